#!/usr/bin/env node
// Tokenizes a corpus with the Hugging Face tokenizers library and writes the reference vectors
// the C++ tokenizer test compares against.
//
// Usage: node tools/tokenizer/reference.js TOKENIZER_JSON CORPUS_JSONL OUT_JSON [--show LINE]
//        node tools/tokenizer/reference.js --decodes TOKENIZER_JSON COUNT OUT_JSON
//   (needs tools/tokenizer/fetch.sh --with-library)
//
// Per corpus line four results are computed:
//   ids          encode(line, add_special_tokens=false)
//   ids_special  encode(line, add_special_tokens=true), plus bos/eos when tokenizer_config.json
//                beside the tokenizer asks for them (add_bos_token / add_eos_token) and the
//                post-processor does not add them itself (what transformers does)
//   text         decode(ids_special, skip_special_tokens=false) and (…, true)
//   random_text  decode of RandomIds(line index) with skip false and true, which exercises
//                partial UTF-8 sequences and special tokens
// The output stores a 48-bit FNV-1a hash of the encode results and of the decode results for
// every line, and the full results for every 100th line. --show prints one line's results.
//
// --decodes writes COUNT id sequences (randomIds of 0..COUNT-1, truncated to 1..16 ids) with
// their decodes, skipping special tokens and not: a check of a decoder chain on its own.
'use strict';

const fs = require('fs');
const path = require('path');
const {createRequire} = require('module');

const cache = path.join(__dirname, '..', '..', '.cache', 'tokenizer');
const {Tokenizer} = createRequire(path.join(cache, 'package.json'))('@anush008/tokenizers');

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK64 = (1n << 64n) - 1n;
function fnv48(text) {
  let h = FNV_OFFSET;
  for (const byte of Buffer.from(text, 'utf8')) h = ((h ^ BigInt(byte)) * FNV_PRIME) & MASK64;
  return (h & ((1n << 48n) - 1n)).toString(16).padStart(12, '0');
}

// Sixteen ids from an xorshift32 stream seeded by the line index (mirrored by the C++ test).
function randomIds(line, vocabSize) {
  let x = (Math.imul(line + 1, 0x9e3779b1) >>> 0) || 1;
  const ids = [];
  for (let i = 0; i < 16; ++i) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    ids.push(x % vocabSize);
  }
  return ids;
}

function configToken(config, key, tokenizer) {
  const value = config[key];
  const content = typeof value === 'string' ? value : value && value.content;
  return typeof content === 'string' ? tokenizer.tokenToId(content) : null;
}

async function writeDecodes(tokenizerPath, count, outPath) {
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const vocabSize = Object.values(tokenizer.getVocab(true)).reduce((a, b) => Math.max(a, b)) + 1;
  const cases = [];
  for (let i = 0; i < count; ++i) {
    const ids = randomIds(i, vocabSize).slice(0, 1 + (i % 16));
    cases.push({ids, text: await tokenizer.decode(ids, false),
                text_skip: await tokenizer.decode(ids, true)});
  }
  fs.writeFileSync(outPath, JSON.stringify(cases) + '\n');
}

async function main() {
  if (process.argv[2] === '--decodes') {
    const [tokenizerPath, count, outPath] = process.argv.slice(3);
    return writeDecodes(tokenizerPath, Number(count), outPath);
  }
  const [tokenizerPath, corpusPath, outPath] = process.argv.slice(2);
  const showIndex = process.argv.indexOf('--show');
  const show = showIndex > 0 ? Number(process.argv[showIndex + 1]) : -1;
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const configPath = path.join(path.dirname(tokenizerPath), 'tokenizer_config.json');
  const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, 'utf8')) : {};
  const template = (await tokenizer.encode('', null, {addSpecialTokens: true})).getIds();
  const bos = configToken(config, 'bos_token', tokenizer);
  const eos = configToken(config, 'eos_token', tokenizer);
  const addBos = config.add_bos_token === true && bos !== null && !template.includes(bos);
  const addEos = config.add_eos_token === true && eos !== null && !template.includes(eos);
  const vocabSize = Object.values(tokenizer.getVocab(true)).reduce((a, b) => Math.max(a, b)) + 1;

  const corpusText = fs.readFileSync(corpusPath, 'utf8');
  const lines = corpusText.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const hashes = [];
  const samples = [];
  for (let i = 0; i < lines.length; ++i) {
    const ids = (await tokenizer.encode(lines[i], null, {addSpecialTokens: false})).getIds();
    const idsSpecial = (await tokenizer.encode(lines[i], null, {addSpecialTokens: true})).getIds();
    if (addBos) idsSpecial.unshift(bos);
    if (addEos) idsSpecial.push(eos);
    const random = randomIds(i, vocabSize);
    const texts = [await tokenizer.decode(idsSpecial, false), await tokenizer.decode(idsSpecial, true),
      await tokenizer.decode(random, false), await tokenizer.decode(random, true)];
    hashes.push(fnv48(ids.join(' ') + '|' + idsSpecial.join(' ')) + fnv48(texts.join('\0')));
    const result = {line: i, ids, ids_special: idsSpecial, texts};
    if (i % 100 === 0) samples.push(result);
    if (i === show) console.log(JSON.stringify({input: lines[i], ...result}, null, 1));
  }
  if (show >= 0) return;
  const out = {
    library: '@anush008/tokenizers 0.6.0 (Hugging Face tokenizers 0.22)',
    corpus_hash: fnv48(corpusText),
    vocab_size: vocabSize,
    hashes: hashes.join(' '),
    samples,
  };
  fs.writeFileSync(outPath, JSON.stringify(out) + '\n');
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
