#!/usr/bin/python3
"""Checks deepseek_ref.py against the shared peer bench: the greedy ids that
llama.cpp produced on the bench's synthetic "tiny" model (seed 1234), as
recorded in the bench README, and, when the bench's independent numpy
ref_forward.py is importable, the full logits of the prompt.

usage:
  BENCH=/work/shared/bench
  $BENCH/make_model.py --preset tiny --out /tmp/tiny --no-gguf
  check_against_bench.py /tmp/tiny [--bench-dir $BENCH]

Exit status 0 when the ids match (and the logits agree to 1e-3).
"""
import argparse
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_ref  # noqa: E402


def readme_ids(readme_text):
    """(prompt ids, expected greedy ids) from the README's tiny-preset section."""
    sec = readme_text.split("## Reference greedy ids (tiny preset, seed 1234)", 1)
    if len(sec) != 2:
        raise ValueError("README has no 'Reference greedy ids (tiny preset, seed 1234)' section")
    body = sec[1]
    prompt = re.search(r"Prompt as ids: `\[([0-9, ]+)\]`", body)
    cont = re.search(r"first 16 ids, from llama\.cpp:\s*`([0-9, ]+)`", body)
    if not prompt or not cont:
        raise ValueError("could not find the prompt / continuation ids in the README")
    parse = lambda s: [int(t) for t in s.replace(" ", "").split(",") if t]  # noqa: E731
    return parse(prompt.group(1)), parse(cont.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="the bench's tiny model (make_model.py --preset tiny)")
    ap.add_argument("--bench-dir", default="/work/shared/bench")
    a = ap.parse_args()

    with open(os.path.join(a.bench_dir, "README.md")) as f:
        prompt, expected = readme_ids(f.read())
    model = deepseek_ref.Model(a.model_dir)
    steps = model.greedy(prompt, len(expected))
    got = [t for t, _ in steps]
    gaps = [float(torch.topk(lp, 2).values.diff().abs()) for _, lp in steps]
    ok = got == expected
    print("prompt:   " + ",".join(map(str, prompt)))
    print("expected: " + ",".join(map(str, expected)))
    print("got:      " + ",".join(map(str, got)))
    print(f"ids {'MATCH' if ok else 'DIFFER'}; smallest top1-top2 logprob gap {min(gaps):.4f}")

    bench_ref = os.path.join(a.bench_dir, "ref_forward.py")
    if os.path.exists(bench_ref):
        sys.path.insert(0, a.bench_dir)
        import ref_forward  # the bench's numpy implementation
        import json
        with open(os.path.join(a.model_dir, "config.json")) as f:
            c = json.load(f)
        W = ref_forward.load_safetensors(os.path.join(a.model_dir, "model.safetensors"))
        seq = prompt + got
        theirs = ref_forward.forward(W, c, seq)            # last position only
        ours = model.forward(seq)[-1].numpy()
        diff = float(np.max(np.abs(theirs - ours)))
        scale = float(np.max(np.abs(theirs)))
        print(f"last-position logits vs bench ref_forward.py: max |diff| {diff:.2e} (max |logit| {scale:.2f})")
        ok = ok and diff < 1e-3 * max(1.0, scale)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
