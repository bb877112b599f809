#!/usr/bin/python3
"""Checks train_bpe.py's encoder and decoder against the Hugging Face
`tokenizers` library (its Node binding, installed into .cache/tokenizer by
tools/tokenizer/fetch.sh --with-library) on every 7th corpus document and a
few edge cases: same ids (bos included) and same decoded text.

Text that spells out a special token ("<｜end▁of▁sentence｜>") is left out:
the library maps it to the token's id, the training encoder never sees it.

usage: check_tokenizer.py [--model models/mlaserve-tiny-moe]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import train_bpe  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CACHE = os.path.join(ROOT, ".cache", "tokenizer")

JS = r"""
const path = require('path');
const fs = require('fs');
const {createRequire} = require('module');
const [cache, tokPath, inPath, outPath] = process.argv.slice(1);
const {Tokenizer} = createRequire(path.join(cache, 'package.json'))('@anush008/tokenizers');
(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  const out = [];
  for (const line of fs.readFileSync(inPath, 'utf8').split('\n')) {
    if (!line) continue;
    const ids = Array.from((await tok.encode(JSON.parse(line), null, {addSpecialTokens: true})).getIds());
    out.push({ids, text: await tok.decode(ids, true)});
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
})();
"""

EDGE_CASES = ["Hello  world!\n\n\tTabs and   spaces   ", "na\u00efve caf\u00e9 \u2014 \u201cquotes\u201d 123,456.78 don't I'll",
              "   leading", "trailing   \n", "\u4f60\u597d \U0001f600", ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/mlaserve-tiny-moe")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(CACHE, "node_modules", "@anush008")):
        sys.exit(f"{CACHE} has no tokenizers binding: run tools/tokenizer/fetch.sh --with-library")
    texts = [t for _, t in corpus.documents()][::7] + EDGE_CASES
    tok = train_bpe.Tokenizer(a.model)
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.json")
        with open(inp, "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(t) for t in texts) + "\n")
        subprocess.run(["node", "-e", JS, CACHE, os.path.join(a.model, "tokenizer.json"), inp, outp],
                       check=True)
        with open(outp, encoding="utf-8") as f:
            hf = json.load(f)
    bad = 0
    for text, h in zip(texts, hf):
        ids = tok.encode(text)
        if ids != h["ids"] or tok.decode(ids) != h["text"]:
            bad += 1
            print(f"differs: {text[:60]!r}\n  ours {ids[:16]}\n  hf   {h['ids'][:16]}")
    print(f"{len(texts)} texts, {sum(len(h['ids']) for h in hf)} tokens, {bad} differences")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
