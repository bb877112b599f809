#!/usr/bin/env node
// Single-thread encode throughput of the Hugging Face tokenizers library (Node binding) on a
// corpus, measured like tools/bench/tokenizer_bench.cc: the first pass (cold caches), then the
// mean of the following passes, in corpus bytes and tokens per CPU second of the process.
// Two ways of calling the library: one encode() per line, each awaited before the next (what a
// server does per request), and one encodeBatch() of all lines, which spares the per-call
// overhead; RAYON_NUM_THREADS=1 keeps the batch on one thread.
//
// Usage: RAYON_NUM_THREADS=1 node tools/tokenizer/bench.js TOKENIZER_JSON CORPUS_JSONL [SECONDS]
//   (needs tools/tokenizer/fetch.sh --with-library)
'use strict';

const fs = require('fs');
const path = require('path');
const {createRequire} = require('module');

const cache = path.join(__dirname, '..', '..', '.cache', 'tokenizer');
const {Tokenizer} = createRequire(path.join(cache, 'package.json'))('@anush008/tokenizers');

function cpuSeconds() {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

const MODES = {
  async line(tokenizer, lines) {
    let tokens = 0;
    for (const line of lines) {
      tokens += (await tokenizer.encode(line, null, {addSpecialTokens: false})).getLength();
    }
    return tokens;
  },
  async batch(tokenizer, lines) {
    const encodings = await tokenizer.encodeBatch(lines, {addSpecialTokens: false});
    return encodings.reduce((sum, encoding) => sum + encoding.getLength(), 0);
  },
};

async function encodeAll(mode, tokenizer, lines) {
  const start = cpuSeconds();
  const tokens = await MODES[mode](tokenizer, lines);
  return {seconds: cpuSeconds() - start, tokens};
}

async function main() {
  const [tokenizerPath, corpusPath, minSeconds = '10'] = process.argv.slice(2);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const lines = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l).map(JSON.parse);
  const bytes = lines.reduce((sum, line) => sum + Buffer.byteLength(line, 'utf8'), 0);

  console.log(`corpus: ${lines.length} lines, ${bytes} bytes`);
  for (const mode of Object.keys(MODES)) {
    const first = await encodeAll(mode, tokenizer, lines);
    let seconds = 0;
    let tokens = 0;
    let passes = 0;
    while (seconds < Number(minSeconds)) {
      const pass = await encodeAll(mode, tokenizer, lines);
      seconds += pass.seconds;
      tokens += pass.tokens;
      ++passes;
    }
    console.log(`${mode} first pass: ${first.seconds.toFixed(3)} s CPU, ` +
                `${(bytes / first.seconds / 1e6).toFixed(2)} MB/s, ` +
                `${(first.tokens / first.seconds).toFixed(0)} tokens/s`);
    console.log(`${mode} steady (${passes} passes): ${(seconds / passes).toFixed(3)} s CPU per ` +
                `pass, ${(bytes * passes / seconds / 1e6).toFixed(2)} MB/s, ` +
                `${(tokens / seconds).toFixed(0)} tokens/s`);
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
