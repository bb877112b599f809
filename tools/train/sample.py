#!/usr/bin/python3
"""Samples text from a model directory with the reference forward pass
(tools/reference/deepseek_ref.py) and the directory's own tokenizer:
temperature sampling from a seeded generator, stopping at eos or after
--max-tokens tokens.

usage: sample.py [--model models/mlaserve-tiny-moe] [--prompt TEXT] [--temperature 0.8]
                 [--seed 1] [--n 3] [--max-tokens 160]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_env  # noqa: E402

cpu_env.setup(threads=2)

import torch  # noqa: E402

import train_bpe  # noqa: E402
from model import ref  # noqa: E402


def generate(ref_model, tok, prompt, temperature, seed, max_tokens):
    """Returns (generated text, whether it ended with eos)."""
    g = torch.Generator().manual_seed(seed)
    ids = tok.encode(prompt)
    start = len(ids)
    for _ in range(max_tokens):
        logits = ref_model.forward(ids)[-1]
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = int(torch.multinomial(probs, 1, generator=g))
        else:
            nxt = int(torch.argmax(logits))
        if nxt == tok.eos_id:
            return tok.decode(ids[start:]), True
        ids.append(nxt)
    return tok.decode(ids[start:]), False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/mlaserve-tiny-moe")
    ap.add_argument("--prompt", default="")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=160)
    a = ap.parse_args()
    torch.set_num_threads(2)
    m = ref.Model(a.model)
    tok = train_bpe.Tokenizer(a.model)
    for i in range(a.n):
        text, stopped = generate(m, tok, a.prompt, a.temperature, a.seed + i, a.max_tokens)
        print(f"--- seed {a.seed + i}{'' if stopped else ' (no eos)'}")
        print(a.prompt + text)


if __name__ == "__main__":
    main()
