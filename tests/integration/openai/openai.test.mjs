// The OpenAI-compatible HTTP API of `mlaserve serve`, driven by the official `openai` npm
// client over loopback, on the embedded default model.
//
//   MLASERVE_BIN=build/bin/mlaserve node --test tests/integration/openai/openai.test.mjs
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';

const BIN = process.env.MLASERVE_BIN;
if (!BIN) throw new Error('set MLASERVE_BIN to build/bin/mlaserve');

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `mlaserve serve` and waits until GET /health answers 200.
async function startServer(extraFlags = []) {
  const [port, httpPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const proc = spawn(BIN, ['serve', '--host=127.0.0.1', `--port=${port}`, `--http_port=${httpPort}`,
    `--metrics_port=${metricsPort}`, '--metrics_host=127.0.0.1', '--threads=2', ...extraFlags],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  const base = `http://127.0.0.1:${httpPort}`;
  for (let i = 0; i < 600; ++i) {
    try {
      if ((await fetch(`${base}/health`)).status === 200) break;
    } catch { /* not listening yet */ }
    if (proc.exitCode !== null) throw new Error(`mlaserve exited:\n${log}`);
    await sleep(100);
  }
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
  return { proc, exited, base, metricsPort, client, log: () => log };
}

// KV blocks referenced by live sequences, from the Prometheus gauges.
async function kvBlocksInUse(metricsPort) {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const gauge = (name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))[1]);
  return gauge('mlaserve_kv_cache_blocks_total') - gauge('mlaserve_kv_cache_blocks_free');
}

async function expectError(promise, status, param) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof OpenAI.APIError, `not an APIError: ${err}`);
    assert.equal(err.status, status, err.message);
    if (param !== undefined) assert.equal(err.param, param, err.message);
    return true;
  });
}

describe('mlaserve OpenAI API', () => {
  let server;
  let client;
  let model;
  before(async () => {
    server = await startServer();
    client = server.client;
    model = (await client.models.list()).data[0].id;
  });
  after(async () => {
    server.proc.kill('SIGTERM');
    assert.equal(await server.exited, 0);
  });

  test('models lists the served model', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].object, 'model');
    assert.equal((await client.models.retrieve(model)).id, model);
  });

  test('completions: non-streamed and streamed agree, usage in the last chunk', async () => {
    const params = { model, prompt: 'The meaning of life is', max_tokens: 12, temperature: 0,
      ignore_eos: true };
    const full = await client.completions.create(params);
    assert.equal(full.object, 'text_completion');
    assert.equal(full.choices.length, 1);
    assert.equal(full.choices[0].finish_reason, 'length');
    assert.equal(full.usage.completion_tokens, 12);
    assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + 12);
    const stream = await client.completions.create(
      { ...params, stream: true, stream_options: { include_usage: true } });
    let text = '';
    const chunks = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      for (const choice of chunk.choices) text += choice.text;
    }
    assert.equal(text, full.choices[0].text);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, full.usage);
    assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
  });

  test('chat: non-streamed and streamed agree, role delta first', async () => {
    const params = { model, messages: [{ role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello there' }], max_completion_tokens: 10, temperature: 0,
    ignore_eos: true };
    const full = await client.chat.completions.create(params);
    assert.equal(full.object, 'chat.completion');
    assert.equal(full.choices[0].message.role, 'assistant');
    assert.equal(full.usage.completion_tokens, 10);
    const stream = await client.chat.completions.create(
      { ...params, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks[0].object, 'chat.completion.chunk');
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.flatMap((c) => c.choices).map((c) => c.delta.content ?? '').join('');
    assert.equal(text, full.choices[0].message.content);
    assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
    assert.deepEqual(chunks.at(-1).usage, full.usage);
    // The SDK's own accumulator agrees.
    const final = await client.chat.completions.stream(params).finalChatCompletion();
    assert.equal(final.choices[0].message.content, full.choices[0].message.content);
  });

  test('stop strings end the text before the stop', async () => {
    const params = { model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0,
      ignore_eos: true };
    const text = (await client.completions.create(params)).choices[0].text;
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
    const stopped = await client.completions.create({ ...params, stop: [stop, 'zzzzqqq'] });
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    assert.equal(stopped.choices[0].text, text.slice(0, text.indexOf(stop)));
  });

  test('seeds: the same seed repeats, other seeds differ', async () => {
    const params = { model, prompt: 'In the beginning', max_tokens: 16, temperature: 1,
      ignore_eos: true };
    const run = async (seed) => (await client.completions.create({ ...params, seed })).choices[0].text;
    const first = await run(42);
    assert.equal(await run(42), first);
    const others = [await run(7), await run(1234), await run(99)];
    assert.ok(others.some((t) => t !== first), 'three other seeds all gave the same text');
  });

  test('n choices with a seed are distinct samples', async () => {
    const r = await client.completions.create({ model, prompt: 'Hi', max_tokens: 8, n: 3,
      temperature: 1, seed: 5, ignore_eos: true });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.equal(r.usage.completion_tokens, 24);
  });

  test('logprobs: completions and chat shapes', async () => {
    const c = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5,
      temperature: 0, logprobs: 2, ignore_eos: true });
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.token_logprobs.length, 5);
    assert.equal(lp.tokens.join(''), c.choices[0].text);
    for (const top of lp.top_logprobs) assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 2);
    for (const v of lp.token_logprobs) assert.ok(v <= 0);
    const chat = await client.chat.completions.create({ model, max_tokens: 4, temperature: 0,
      messages: [{ role: 'user', content: 'Hi' }], logprobs: true, top_logprobs: 3, ignore_eos: true });
    const content = chat.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const item of content) {
      assert.equal(typeof item.token, 'string');
      assert.ok(item.logprob <= 0);
      assert.equal(item.top_logprobs.length, 3);
      assert.deepEqual(item.bytes, [...Buffer.from(item.token)]);
    }
  });

  test('400 names the field', async () => {
    await expectError(client.completions.create({ model, prompt: 'x', temperature: -1 }), 400,
      'temperature');
    await expectError(client.completions.create({ model, prompt: 'x', top_p: 1.5 }), 400, 'top_p');
    await expectError(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
      max_completion_tokens: 0 }), 400, 'max_completion_tokens');
    await expectError(client.completions.create({ model, prompt: 'x', logit_bias: { 5: 10 } }), 400,
      'logit_bias');
    await expectError(client.completions.create({ model, prompt: 'x', logprobs: 21 }), 400, 'logprobs');
    await expectError(client.completions.create({ model, prompt: 'x', stop: [''] }), 400, 'stop[0]');
  });

  test('404 for an unknown model and route', async () => {
    await expectError(client.completions.create({ model: 'no-such-model', prompt: 'x' }), 404, 'model');
    assert.equal((await fetch(`${server.base}/v1/no-such-route`)).status, 404);
  });

  test('a prompt over the context is 400 naming the prompt', async () => {
    const prompt = Array.from({ length: 5000 }, (_, i) => 100 + (i % 50));
    await expectError(client.completions.create({ model, prompt, max_tokens: 1 }), 400, 'prompt');
  });

  test('a client abort mid-stream frees its KV blocks at once', async () => {
    const before = await kvBlocksInUse(server.metricsPort);
    const stream = await client.completions.create({ model, prompt: 'Tell me a long story',
      max_tokens: 3000, ignore_eos: true, temperature: 0, stream: true });
    let chunks = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      if (++chunks === 3) break;  // leaving the loop aborts the HTTP request
    }
    assert.ok(await kvBlocksInUse(server.metricsPort) >= before);
    let inUse = -1;
    for (let i = 0; i < 50 && inUse !== before; ++i) {
      await sleep(40);
      inUse = await kvBlocksInUse(server.metricsPort);
    }
    assert.equal(inUse, before, 'the aborted request still holds KV blocks');
  });
});

describe('queue limits and drain', () => {
  test('429 when the queue is full, 503 while draining, open streams finish', async () => {
    const server = await startServer(['--max_queue=1', '--max_num_seqs=1', '--drain_timeout_s=60']);
    const { client } = server;
    const model = (await client.models.list()).data[0].id;
    const long = { model, prompt: 'A long story', max_tokens: 3000, ignore_eos: true, temperature: 0 };
    // One runs, one waits; the third finds the queue full.
    const running = await client.completions.create({ ...long, stream: true });
    const iterator = running[Symbol.asyncIterator]();
    await iterator.next();  // admitted and generating
    const waiting = client.completions.create({ ...long, max_tokens: 2 });
    await sleep(200);
    await expectError(client.completions.create({ ...long, max_tokens: 2 }), 429);

    server.proc.kill('SIGTERM');
    await sleep(300);
    await expectError(client.completions.create({ ...long, max_tokens: 2 }), 503);
    assert.equal((await fetch(`${server.base}/health`)).status, 503);
    // The open stream still ends with its final chunk and [DONE].
    let finish = null;
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      finish = r.value.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'length');
    // So does the request that was waiting when the drain began.
    assert.equal((await waiting).choices[0].finish_reason, 'length');
    assert.equal(await server.exited, 0);
  });
});
