#!/usr/bin/env node
// Writes the tokenizer test corpus to stdout: one JSON string per line (so lines may hold
// newlines and carriage returns). Deterministic: a fixed-seed generator, no clock, no
// Math.random, so every run on every machine gives the same bytes.
//
// Usage: node tools/tokenizer/gen_corpus.js > corpus.jsonl
'use strict';

let seed = 0x9e3779b9;
function random() {  // mulberry32
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(random() * n);
const pick = (list) => list[int(list.length)];
const repeat = (n, f) => Array.from({length: n}, f).join('');

const WORDS = ('the of and to in is was for that with as on by at from his her they this had not ' +
  'are but which have one were their all been has would when there who more will can could ' +
  'model server token batch cache kernel attention expert latent decode prefill stream ' +
  'throughput Hello World Internet Tokyo Paris DeepSeek naïve café résumé coöperate façade ' +
  'Straße Ærø İstanbul ΑΘΗΝΑ Москва').split(' ');
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll",
  "'D", "'ſ", "'x", "’s", "'K"];
const PUNCT = ['.', ',', '!', '?', ';', ':', '...', ' -', ' —', '"', "'", '(', ')', '[', ']',
  '«', '»', '¿', '¡', '…', '、', '。', '！', '？'];
const CJK = ['我们正在测试分词器的正确性', '今天天气很好，适合出去散步。', '深度求索发布了新的模型',
  '東京は日本の首都です。', 'ひらがなとカタカナ、そして漢字。', 'トークナイザーのテスト',
  '한국어 문장도 포함합니다.', '다람쥐 헌 쳇바퀴에 타고파', '中文，English混合text。',
  '「引用」と『二重引用』', '全角ＡＢＣ１２３　空白'];
const SCRIPTS = ['Привет, как дела? Всё хорошо.', 'Γειά σου Κόσμε, καλημέρα.',
  'مرحبا بالعالم، كيف حالك؟', 'שלום עולם, מה שלומך?', 'नमस्ते दुनिया, आप कैसे हैं?',
  'สวัสดีชาวโลก ทดสอบภาษาไทย', 'Tiếng Việt có dấu: Việt Nam, Hà Nội.',
  'ქართული ენა', 'Հայերեն լեզու', 'ᐃᓄᒃᑎᑐᑦ', 'ጤና ይስጥልኝ', 'ꯃꯤꯇꯩ ꯂꯣꯟ'];
const EMOJI = ['😀', '🚀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '🇺🇸', '❤️', '✨', '🤖', '🧪', '⌨️', '☕',
  '🫠', '🦀', '1️⃣', '©️', '™', '♻️', '🀄'];
const COMBINING = ['e\u0301', 'a\u0308', 'n\u0303', 'o\u0302\u0323', 'o\u0323\u0302',
  'a\u0328\u0301', 'u\u031b\u0300', '\u1100\u1161\u11a8', '\u1112\u1161\u11ab', 'A\u030a',
  'Z\u0335\u0321\u0358', 'i\u0307', 'c\u0327', 'e\u0300\u0316', 'q\u0307\u0323',
  '\u0915\u093c', '\u0061\u0315\u0300\u05ae\u0300\u0062', 'ﬁ', 'Å', 'Ω', '\u212b'];
const SPECIAL = ['<|endoftext|>', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>',
  '<|im_start|>', '<|im_end|>', '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>',
  '<think>', '</think>', '<｜User｜>', '<｜Assistant｜>', '<|endofprompt|>', '<|fim_prefix|>',
  '<|reserved_special_token_5|>', '<｜tool▁calls▁begin｜>', '<|endof', '<|im_', '<<|im_end|>>'];
const SPACES = [' ', '  ', '   ', '\t', '\t\t', ' \t ', '\n', '\n\n', '\r\n', '\r', ' \n ',
  '\u00a0', '\u3000', '\u2009', '\u200b', '\u2028', '\u0085', '\f', '\v', '    \n'];
const CODE = [
  'def f(x):\n    return x * 2  # double',
  'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}',
  'const add = (a, b) => a + b;',
  'if x != None and len(xs) >= 3: print(f"{x!r}")',
  'SELECT id, name FROM users WHERE age > 21 ORDER BY name;',
  '#include <vector>\nstd::vector<int> v{1, 2, 3};',
  '<div class="note">Hello &amp; welcome</div>',
  '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b"}}',
  'git commit -m "Fix bug #123" && git push origin main',
  '$ ls -la /usr/local/bin | grep -E \'^d\' > out.txt 2>&1',
  'fn main() { let s: &str = "héllo"; println!("{}", s); }',
  'x_1=__init__.__dict__["__call__"]; y -= 0x1F; z **= 2',
  '    \n        indented_block()\n\n\n',
  'https://example.com/path?q=tokenizer&lang=en#section-2',
  'user.name+tag@example.co.uk',
  '| col1 | col2 |\n|------|------|\n| a    | b    |',
];

function number() {
  switch (int(10)) {
    case 0: return String(int(10));
    case 1: return String(int(1000000));
    case 2: return repeat(1 + int(40), () => String(int(10)));
    case 3: return (random() * 1000).toFixed(1 + int(6));
    case 4: return `${1 + int(12)}/${1 + int(28)}/${1990 + int(40)}`;
    case 5: return `${int(1000)},${String(int(1000)).padStart(3, '0')},${String(int(1000)).padStart(3, '0')}`;
    case 6: return `${(random() * 10).toFixed(3)}e-${int(30)}`;
    case 7: return pick(['٣٤٥', '１２３', '²³', 'Ⅻ', '½', '໓໔', '۱۲۳', '𝟘𝟙𝟚', '①②']);
    case 8: return `v${int(10)}.${int(20)}.${int(100)}-rc${int(5)}`;
    default: return `+1 (${100 + int(900)}) ${100 + int(900)}-${1000 + int(9000)}`;
  }
}

function sentence() {
  let out = '';
  const n = 3 + int(15);
  for (let i = 0; i < n; ++i) {
    let w = pick(WORDS);
    if (i === 0) w = w[0].toUpperCase() + w.slice(1);
    if (random() < 0.1) w += pick(CONTRACTIONS);
    if (random() < 0.08) w = w.toUpperCase();
    out += (i ? ' ' : '') + w;
    if (random() < 0.12) out += pick(PUNCT);
    if (random() < 0.05) out += ' ' + number();
  }
  return out + pick(['.', '!', '?', '', '...']);
}

// Random code points from long-established blocks, so no Unicode-version differences matter.
function randomText() {
  const blocks = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff],
    [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe5b], [0x1100, 0x11ff], [0x2000, 0x206f],
    [0x20a0, 0x20bf], [0x2190, 0x23ff], [0x2500, 0x27bf], [0x3000, 0x30ff], [0x4e00, 0x9fa5],
    [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f],
    [0x1d400, 0x1d7ff]];
  let out = '';
  const n = 1 + int(40);
  for (let i = 0; i < n; ++i) {
    const [lo, hi] = pick(blocks);
    out += String.fromCodePoint(lo + int(hi - lo + 1));
  }
  return out;
}

const GENERATORS = [
  [30, sentence],
  [6, () => sentence() + ' ' + sentence()],
  [10, () => pick(CODE)],
  [8, () => repeat(1 + int(6), () => number() + pick([' ', ', ', '-', '', 'x', '.']))],
  [8, () => repeat(1 + int(6), () => pick(SPACES) + pick(WORDS)) + pick(SPACES)],
  [7, () => pick(CJK) + (random() < 0.5 ? pick(CJK) : number())],
  [6, () => repeat(1 + int(5), () => pick(EMOJI) + (random() < 0.5 ? ' ' : '')) + sentence()],
  [6, () => pick(SCRIPTS) + ' ' + pick(SCRIPTS)],
  [7, () => repeat(1 + int(6), () => pick(WORDS) + pick(COMBINING) + pick([' ', '', '.']))],
  [8, () => sentence() + pick(['', ' ', '  ', '\n']) + pick(SPECIAL) + pick(['', ' ', '\n']) +
            sentence()],
  [3, () => repeat(2 + int(4), () => pick(SPECIAL))],
  [10, randomText],
  [2, () => pick(['a', 'ab', 'Zz', '0', ' ', '\n', '!!', '\t', '.', '\u200d', ''])],
  [2, () => pick(['x', ' ', '7', 'ha', '\t', '=']).repeat(100 + int(900))],
  [3, () => pick(WORDS).repeat(2 + int(30))],
  [4, () => `## ${sentence()}\n\n- ${sentence()}\n- **${pick(WORDS)}**: \`${pick(CODE)}\``],
];

const total = GENERATORS.reduce((sum, [weight]) => sum + weight, 0);
const lines = [];
for (let i = 0; i < 5200; ++i) {
  let r = int(total);
  for (const [weight, generate] of GENERATORS) {
    if (r < weight) {
      lines.push(generate());
      break;
    }
    r -= weight;
  }
}
process.stdout.write(lines.map((line) => JSON.stringify(line)).join('\n') + '\n');
