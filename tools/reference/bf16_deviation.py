#!/usr/bin/python3
"""How far rounding GEMM inputs to bf16 (mlaserve --dtype=bfloat16) moves the golden log-probs,
measured on the reference itself: for each tiny checkpoint, the golden sequence (prompt and
golden greedy ids) runs once in fp32 and once with bf16 linear inputs, and the largest change of
any golden top-5 log-prob over the golden steps is written to
tests/data/models/<variant>/bf16_deviation.json:

  {"max_top5_logprob_deviation": d, "min_bf16_gap": smallest top1 - top2 gap with bf16 inputs,
   "greedy_ids_agree": whether bf16 inputs keep every golden greedy id,
   "max_top5_logprob_deviation_bf16_cache": the same d with the keys and values also made from
   the latent and rope key rounded to bf16 (a bf16 KV cache, --kv_cache_dtype=bfloat16)}

The C++ golden test bounds its own bf16-activation logits by a multiple of d: mlaserve rounds
at partly different points (absorbed decode attention multiplies the rounded query into the
latent space instead of rounding the latent), so its deviation is of the same order, not equal.

usage: bf16_deviation.py [--models tests/data/models] [variant ...]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_ref  # noqa: E402
from make_tiny_checkpoints import VARIANTS  # noqa: E402


def step_logprobs(model, golden):
    """Log-probs [steps, vocab] at each golden step, the golden ids fed back (teacher forcing)."""
    ids = [s["id"] for s in golden["steps"]]
    seq = golden["prompt_ids"] + ids[:-1]
    logits = model.forward(seq)[len(golden["prompt_ids"]) - 1:]
    return torch.log_softmax(logits, dim=-1)


def deviation(model_dir):
    with open(os.path.join(model_dir, "golden.json")) as f:
        golden = json.load(f)
    f32 = step_logprobs(deepseek_ref.Model(model_dir), golden)
    bf16 = step_logprobs(deepseek_ref.Model(model_dir, bf16_inputs=True), golden)
    cache = step_logprobs(deepseek_ref.Model(model_dir, bf16_inputs=True, bf16_cache=True), golden)
    dev, dev_cache, agree, min_gap = 0.0, 0.0, True, float("inf")
    for i, step in enumerate(golden["steps"]):
        for tok, _ in step["top"]:
            dev = max(dev, abs(float(bf16[i, tok] - f32[i, tok])))
            dev_cache = max(dev_cache, abs(float(cache[i, tok] - f32[i, tok])))
        top2 = torch.topk(bf16[i], 2)
        agree = agree and int(top2.indices[0]) == step["id"]
        min_gap = min(min_gap, float(top2.values[0] - top2.values[1]))
    return {"max_top5_logprob_deviation": dev, "min_bf16_gap": min_gap,
            "greedy_ids_agree": agree, "max_top5_logprob_deviation_bf16_cache": dev_cache}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", default=list(VARIANTS), help="default: all")
    ap.add_argument("--models", default="tests/data/models")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for variant in a.variants:
        d = os.path.join(a.models, variant)
        result = deviation(d)
        with open(os.path.join(d, "bf16_deviation.json"), "w") as f:
            f.write(json.dumps(result, indent=1) + "\n")
        print(variant, json.dumps(result))


if __name__ == "__main__":
    main()
