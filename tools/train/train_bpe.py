#!/usr/bin/python3
"""Byte-level BPE tokenizer, trained from scratch in pure Python, written as a
Hugging Face tokenizer.json (model BPE with ranked merges, ByteLevel
pre-tokenizer and decoder, TemplateProcessing post-processor that puts bos in
front) plus tokenizer_config.json.

Alphabet: the 256 bytes, each shown as the character GPT-2's byte-to-unicode
table gives it, with ids 0..255 in byte order. Merges follow, then the two
special tokens, DeepSeek's bos and eos strings, as the last two ids.

Pre-tokenization is GPT-2's regular expression (the one the Hugging Face
ByteLevel pre-tokenizer applies when use_regex is true). It needs \\p{L} and
\\p{N}, so it uses the `regex` module (Debian: python3-regex).

Training: count the pre-tokens of the training documents, then repeatedly
merge the most frequent adjacent pair (ties broken by the smaller pair of
ids, so the result is deterministic) until the vocabulary is full or no pair
occurs twice.

usage: train_bpe.py [--vocab-size 4096] [--out models/mlaserve-tiny-moe]
"""
import argparse
import collections
import heapq
import json
import os
import sys
import time

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"  # <｜begin▁of▁sentence｜>
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"    # <｜end▁of▁sentence｜>
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
MODEL_MAX_LENGTH = 2048

_PRETOKENIZE = regex.compile(GPT2_PATTERN)


def bytes_to_unicode():
    """GPT-2's table: printable Latin-1 bytes map to themselves, the other
    bytes to the characters from U+0100 on, in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
            + list(range(ord("\xae"), ord("\xff") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def pretokenize(text):
    return _PRETOKENIZE.findall(text)


def word_counts(texts):
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    return counts


def train(texts, vocab_size, log=print):
    """Returns (vocab {token string: id}, merges [(left, right)]) with
    vocab_size - 2 entries; the two special tokens come after."""
    n_merges = vocab_size - 2 - 256
    counts = word_counts(texts)
    words = []   # list of id lists
    freqs = []
    for w, c in sorted(counts.items()):
        words.append([b for b in w.encode("utf-8")])
        freqs.append(c)
    tok_str = [BYTE_CHAR[b] for b in range(256)]

    pair_count = collections.defaultdict(int)
    pair_where = collections.defaultdict(set)
    for i, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            pair_where[(a, b)].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    t0 = time.time()
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc:
            continue  # stale entry
        if -negc < 2:
            break
        new_id = 256 + len(merges)
        a, b = pair
        merges.append(pair)
        tok_str.append(tok_str[a] + tok_str[b])
        changed = set()
        for i in sorted(pair_where.pop(pair)):
            w, f = words[i], freqs[i]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                changed.add(p)
            out = []
            j = 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new_id)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += f
                pair_where[p].add(i)
                changed.add(p)
        pair_count.pop(pair, None)
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_count.pop(p, None)
                pair_where.pop(p, None)
        if len(merges) % 500 == 0:
            log(f"  {len(merges)} merges, last {tok_str[-1]!r} x{-negc}, {time.time() - t0:.1f}s")
    vocab = {s: i for i, s in enumerate(tok_str)}
    if len(vocab) != len(tok_str):
        raise RuntimeError("two merges produced the same token string")
    return vocab, [(tok_str[a], tok_str[b]) for a, b in merges]


class Tokenizer:
    """Encoder/decoder for the tokenizer.json this script writes (byte-level
    BPE, merges applied lowest rank first, as the Hugging Face BPE model does)."""

    def __init__(self, path):
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        self.vocab = tj["model"]["vocab"]
        self.id_to_token = {i: s for s, i in self.vocab.items()}
        for t in tj["added_tokens"]:
            self.id_to_token[t["id"]] = t["content"]
        self.special = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.bos_id = self.special[BOS]
        self.eos_id = self.special[EOS]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in tj["model"]["merges"]]
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.vocab_size = len(self.id_to_token)
        self._cache = {}

    def _bpe(self, word):
        syms = [BYTE_CHAR[b] for b in word.encode("utf-8")]
        while len(syms) > 1:
            best, best_rank = None, None
            for k in range(len(syms) - 1):
                r = self.ranks.get((syms[k], syms[k + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = k, r
            if best is None:
                break
            pair = (syms[best], syms[best + 1])
            out = []
            k = 0
            while k < len(syms):
                if k + 1 < len(syms) and (syms[k], syms[k + 1]) == pair:
                    out.append(syms[k] + syms[k + 1])
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            syms = out
        return [self.vocab[s] for s in syms]

    def encode(self, text, add_bos=True):
        ids = [self.bos_id] if add_bos else []
        for w in pretokenize(text):
            got = self._cache.get(w)
            if got is None:
                got = self._bpe(w)
                self._cache[w] = got
            ids.extend(got)
        return ids

    def decode(self, ids, skip_special=True):
        out = bytearray()
        for i in ids:
            s = self.id_to_token[int(i)]
            if s in self.special:
                if not skip_special:
                    out.extend(s.encode("utf-8"))
                continue
            out.extend(CHAR_BYTE[c] for c in s)
        return out.decode("utf-8", errors="replace")


def special_token_entry(token_id, content):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def tokenizer_json(vocab, merges):
    bos_id, eos_id = len(vocab), len(vocab) + 1
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special_token_entry(bos_id, BOS), special_token_entry(eos_id, EOS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                          "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": BOS, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


def tokenizer_config():
    def tok(content):
        return {"__type": "AddedToken", "content": content, "lstrip": False,
                "normalized": False, "rstrip": False, "single_word": False}
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": tok(BOS),
        "clean_up_tokenization_spaces": False,
        "eos_token": tok(EOS),
        "legacy": True,
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": tok(EOS),
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizerFast",
        "unk_token": None,
    }


def write(out_dir, vocab, merges):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, ensure_ascii=False, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab-size", type=int, default=4096, help="including the 2 special tokens")
    ap.add_argument("--out", default="models/mlaserve-tiny-moe")
    a = ap.parse_args()
    train_texts, valid_texts = corpus.split(corpus.documents())
    t0 = time.time()
    vocab, merges = train(train_texts, a.vocab_size)
    write(a.out, vocab, merges)
    tok = Tokenizer(a.out)
    for text in valid_texts[:50]:
        if tok.decode(tok.encode(text)) != text:
            sys.exit(f"round trip failed on {text!r}")
    n_bytes = sum(len(t.encode()) for t in valid_texts)
    n_tok = sum(len(tok.encode(t, add_bos=False)) for t in valid_texts)
    print(f"{len(merges)} merges, vocab {tok.vocab_size}, {time.time() - t0:.0f}s; "
          f"validation: {n_bytes / n_tok:.2f} bytes/token -> {a.out}")


if __name__ == "__main__":
    main()
