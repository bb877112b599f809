#!/usr/bin/python3
"""Runs the reference on each tiny checkpoint and writes
tests/data/models/<variant>/golden.json:

  {"prompt_ids": [80 ids, the first is bos_token_id],
   "steps": [{"id": greedy id,
              "top": [[id, logprob], ... 5 entries, best first],
              "gap": top1 - top2 logprob}, ... 24 steps]}

Log-probs are log_softmax over the full vocabulary in fp32. Greedy decoding
recomputes the whole sequence every step. The prompt is drawn from a seeded
generator (ids other than bos/eos); the first few prompt seeds are tried and
the one whose smallest step gap is largest is kept, so no greedy step is a
near-tie, and no step may produce eos.

usage: make_goldens.py [--models tests/data/models] [--tries 8] [variant ...]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_ref  # noqa: E402
from make_tiny_checkpoints import VARIANTS  # noqa: E402

PROMPT_LEN = 80
NUM_STEPS = 24
TOP = 5
MIN_GAP = 1e-3


def make_prompt(cfg, seed):
    bos, eos = cfg.raw["bos_token_id"], cfg.raw["eos_token_id"]
    rng = np.random.Generator(np.random.PCG64(seed))
    allowed = np.array([t for t in range(cfg.vocab_size) if t not in (bos, eos)])
    return [int(bos)] + [int(t) for t in rng.choice(allowed, size=PROMPT_LEN - 1)]


def run(model, prompt):
    steps = []
    for tok, logp in model.greedy(prompt, NUM_STEPS):
        vals, ids = torch.topk(logp, TOP)
        top = [[int(i), float(v)] for i, v in zip(ids, vals)]
        assert top[0][0] == tok
        steps.append({"id": tok, "top": top, "gap": top[0][1] - top[1][1]})
    return steps


def router_margin(model, seq):
    margins = []
    model.forward(seq, margins)
    return min(margins) if margins else float("inf")


def make_golden(model_dir, tries):
    model = deepseek_ref.Model(model_dir)
    eos = model.cfg.raw["eos_token_id"]
    best = None
    for seed in range(tries):
        prompt = make_prompt(model.cfg, seed)
        steps = run(model, prompt)
        if any(s["id"] == eos for s in steps):
            continue
        min_gap = min(s["gap"] for s in steps)
        if best is None or min_gap > best[0]:
            best = (min_gap, seed, prompt, steps)
    if best is None or best[0] < MIN_GAP:
        raise RuntimeError(f"{model_dir}: no prompt seed below {tries} gives gaps >= {MIN_GAP}")
    min_gap, seed, prompt, steps = best
    seq = prompt + [s["id"] for s in steps[:-1]]
    info = {"prompt_seed": seed, "min_gap": min_gap,
            "router_margin": router_margin(model, seq),
            "distinct_ids": len({s["id"] for s in steps})}
    return {"prompt_ids": prompt, "steps": steps}, info


def format_golden(golden):
    """JSON text with the prompt on one line and one line per step."""
    steps = ",\n".join("  " + json.dumps(s) for s in golden["steps"])
    return ('{\n "prompt_ids": ' + json.dumps(golden["prompt_ids"]) +
            ',\n "steps": [\n' + steps + '\n ]\n}\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", default=list(VARIANTS), help="default: all")
    ap.add_argument("--models", default="tests/data/models")
    ap.add_argument("--tries", type=int, default=8, help="prompt seeds to try")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for variant in a.variants:
        d = os.path.join(a.models, variant)
        golden, info = make_golden(d, a.tries)
        with open(os.path.join(d, "golden.json"), "w") as f:
            f.write(format_golden(golden))
        print(f"{variant}: prompt seed {info['prompt_seed']}, min gap {info['min_gap']:.4f}, "
              f"min router margin {info['router_margin']:.2e}, "
              f"{info['distinct_ids']} distinct ids in {NUM_STEPS} steps")


if __name__ == "__main__":
    main()
