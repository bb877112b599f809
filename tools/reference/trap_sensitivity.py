#!/usr/bin/python3
"""Shows that each golden file would catch each plausible mistake: runs the
reference with one semantic deliberately changed and reports, per variant,
the largest change of any recorded top-5 log-prob along the golden sequence
(teacher-forced) and how many greedy ids would change.

usage: trap_sensitivity.py [--models tests/data/models]
"""
import argparse
import contextlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_ref as ref  # noqa: E402
import safetensors_io  # noqa: E402


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def route_variant(W, cfg, p, h, margins=None, *, group_score=None, bias_in_weights=False,
                  no_bias=False, no_groups=False, scale=None, fill=0.0):
    """The reference router with one rule swapped (see the keyword arguments)."""
    T = h.shape[0]
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    logits = h @ W[p + "gate.weight"].T
    scores = torch.softmax(logits, -1) if cfg.scoring_func == "softmax" else torch.sigmoid(logits)
    choice = scores
    if cfg.topk_method == "noaux_tc" and not no_bias:
        choice = scores + W[p + "gate.e_score_correction_bias"][None, :]
    masked = choice
    if cfg.topk_method in ("group_limited_greedy", "noaux_tc") and not no_groups:
        G = cfg.n_group
        grouped = choice.view(T, G, E // G)
        kind = group_score or ("max" if cfg.topk_method == "group_limited_greedy" else "top2")
        if kind == "max":
            gs = grouped.max(-1).values
        elif kind == "top2":
            gs = grouped.topk(2, -1).values.sum(-1)
        else:
            gs = grouped.sum(-1)
        keep = torch.zeros(T, G, dtype=torch.bool)
        keep.scatter_(1, gs.topk(cfg.topk_group, -1).indices, True)
        masked = choice.masked_fill(~keep[:, :, None].expand(T, G, E // G).reshape(T, E), fill)
    ids = masked.topk(k, -1).indices
    w = (choice if bias_in_weights else scores).gather(1, ids)
    normalise = k > 1 and cfg.norm_topk_prob
    rule = scale or ("always" if cfg.is_v3 else "v2")
    if rule == "normalise_top1":
        return ids, w / w.sum(-1, keepdim=True)
    if normalise:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    if rule == "always" or (rule == "v2" and not normalise):
        w = w * cfg.routed_scaling_factor
    return ids, w


def rope_without_mscale(orig):
    def f(cfg, positions):
        cos, sin = orig(cfg, positions)
        rs = cfg.rope_scaling
        af = ref.yarn_get_mscale(float(rs["factor"]), rs.get("mscale", 1)) / \
            ref.yarn_get_mscale(float(rs["factor"]), rs.get("mscale_all_dim", 0))
        return cos / af, sin / af
    return f


def rope_unscaled(orig):
    def f(cfg, positions):
        saved = cfg.rope_scaling
        cfg.rope_scaling = None
        try:
            return orig(cfg, positions)
        finally:
            cfg.rope_scaling = saved
    return f


def dequant_unrounded(codes, scale_inv):
    w = safetensors_io.e4m3_to_f32(codes)
    bo, bi = -(-w.shape[0] // scale_inv.shape[0]), -(-w.shape[1] // scale_inv.shape[1])
    s = np.repeat(np.repeat(scale_inv, bo, 0), bi, 1)[:w.shape[0], :w.shape[1]]
    return (w * s).astype(np.float32)


def R(**kw):
    return lambda W, cfg, p, h, margins=None: route_variant(W, cfg, p, h, margins, **kw)


# (label, variants it applies to, patch list [(object, attribute, value-maker)], reload weights)
TRAPS = [
    ("rope not de-interleaved", None, [(ref, "deinterleave", lambda: (lambda x: x))], False),
    ("latent norms use rms_norm_eps", ["v2_group_yarn"],
     [(ref, "LATENT_NORM_EPS", lambda: 1e-2)], False),
    ("YaRN cos/sin without mscale ratio", ["v3_fp8"],
     [(ref, "rope_cos_sin", lambda: rope_without_mscale(ref.rope_cos_sin))], False),
    ("softmax scale without mscale^2", ["v2_group_yarn", "v3_noaux", "v3_fp8"],
     [(ref, "softmax_scale", lambda: (lambda cfg: cfg.q_head_dim ** -0.5))], False),
    ("rope scaling ignored", ["v2_group_yarn", "v3_noaux", "v3_fp8", "v2_linear_tied_f16"],
     [(ref, "rope_cos_sin", lambda: rope_unscaled(ref.rope_cos_sin))], False),
    ("V2 groups ignored (plain greedy)", ["v2_group_yarn"], [(ref, "route", lambda: R(no_groups=True))], False),
    ("V2 weights always scaled", ["v2_group_yarn"], [(ref, "route", lambda: R(scale="always"))], False),
    ("V2 weights never scaled", ["v2_lite_dense_first", "v2_linear_tied_f16"],
     [(ref, "route", lambda: R(scale="never"))], False),
    ("top-1 weight renormalised", ["v2_linear_tied_f16"], [(ref, "route", lambda: R(scale="normalise_top1"))], False),
    ("V3 group score = max", ["v3_noaux", "v3_fp8"], [(ref, "route", lambda: R(group_score="max"))], False),
    ("V3 group score = sum of all", ["v3_noaux", "v3_fp8"], [(ref, "route", lambda: R(group_score="sum"))], False),
    ("V3 bias ignored", ["v3_noaux", "v3_fp8"], [(ref, "route", lambda: R(no_bias=True))], False),
    ("V3 weights from biased scores", ["v3_noaux", "v3_fp8"], [(ref, "route", lambda: R(bias_in_weights=True))], False),
    ("V3 weights not scaled", ["v3_noaux", "v3_fp8"], [(ref, "route", lambda: R(scale="v2"))], False),
    ("masked experts -inf instead of 0 (benign)", ["v2_group_yarn", "v3_noaux", "v3_fp8"],
     [(ref, "route", lambda: R(fill=float("-inf")))], False),
    ("FP8 dequant not rounded to bf16", ["v3_fp8"],
     [(ref, "dequant_fp8_block", lambda: dequant_unrounded)], True),
]


def golden_positions(golden):
    seq = golden["prompt_ids"] + [s["id"] for s in golden["steps"][:-1]]
    start = len(golden["prompt_ids"]) - 1
    return seq, start


def measure(model, golden):
    seq, start = golden_positions(golden)
    logp = torch.log_softmax(model.forward(seq)[start:], dim=-1)
    worst, flips = 0.0, 0
    for i, s in enumerate(golden["steps"]):
        for tid, lp in s["top"]:
            worst = max(worst, abs(float(logp[i, tid]) - lp))
        flips += int(torch.argmax(logp[i])) != s["id"]
    return worst, flips


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tests/data/models")
    a = ap.parse_args()
    torch.set_num_threads(1)
    variants = sorted(d for d in os.listdir(a.models)
                      if os.path.exists(os.path.join(a.models, d, "golden.json")))
    goldens = {v: json.load(open(os.path.join(a.models, v, "golden.json"))) for v in variants}
    models = {v: ref.Model(os.path.join(a.models, v)) for v in variants}
    for v in variants:
        err, flips = measure(models[v], goldens[v])
        print(f"{'(unchanged reference)':42s} {v:20s} max|dlogprob| {err:.2e}  id changes {flips}")
    for label, only, patches, reload in TRAPS:
        for v in variants:
            if only is not None and v not in only:
                continue
            with contextlib.ExitStack() as stack:
                for obj, name, make in patches:
                    stack.enter_context(patched(obj, name, make()))
                model = ref.Model(os.path.join(a.models, v)) if reload else models[v]
                err, flips = measure(model, goldens[v])
            print(f"{label:42s} {v:20s} max|dlogprob| {err:.2e}  id changes {flips}")


if __name__ == "__main__":
    main()
