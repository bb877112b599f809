#!/usr/bin/python3
"""Readable float32 PyTorch forward pass of DeepSeek-V2 / V2-Lite / V3 models
from a Hugging Face directory (config.json + safetensors), following the
semantics of DeepSeek's `modeling_deepseek.py` for both model types.

It is the oracle for the engine's model tests: slow, simple, no KV cache
(every call recomputes the whole sequence), every step in fp32.

Semantics that are easy to get wrong, all reproduced here:
  * The rope part of q and k is de-interleaved (even dims, then odd dims)
    before the rotate_half rotation.
  * Linear rope scaling divides the positions by `factor`.
  * YaRN: blended inverse frequencies; cos and sin are multiplied by
    mscale(factor, mscale) / mscale(factor, mscale_all_dim); the softmax scale
    (qk_head_dim ** -0.5) is multiplied by mscale(factor, mscale_all_dim) ** 2
    whenever rope_scaling sets a non-zero mscale_all_dim.
  * q_a_layernorm and kv_a_layernorm use eps 1e-6 (the RMSNorm default; the
    modeling code does not pass rms_norm_eps to them). The decoder-layer norms
    and the final norm use rms_norm_eps.
  * Layer i is MoE iff n_routed_experts is set, i >= first_k_dense_replace and
    i % moe_layer_freq == 0; otherwise it has a dense MLP (intermediate_size).
  * Router in fp32. deepseek_v2: softmax scores; "greedy" top-k, or
    "group_limited_greedy" (group score = max of the group); weights are
    renormalised when top_k > 1 and norm_topk_prob, otherwise multiplied by
    routed_scaling_factor. deepseek_v3: sigmoid scores; "noaux_tc" chooses
    with scores + e_score_correction_bias (group score = sum of the group's
    top-2), weights are the unbiased scores, renormalised when top_k > 1 and
    norm_topk_prob, then always multiplied by routed_scaling_factor.
    Experts outside the chosen groups are masked to 0.0 (not -inf), as in the
    modeling code.
  * Shared experts (intermediate moe_intermediate_size * n_shared_experts) are
    added to the routed sum.
  * tie_word_embeddings: lm_head is embed_tokens.
  * Weights: BF16, F16 and F32 are used as stored; F8_E4M3 weights with a
    "<name>_scale_inv" tensor of 128x128 block scales are dequantized as
    value * scale in fp32 and then rounded to bf16 (DeepSeek's own conversion).
  * Tensors of layers >= num_hidden_layers (V3's multi-token-prediction
    layers) are ignored.

usage:
  deepseek_ref.py MODEL_DIR --ids 1022,305,306 [--n 16]   # greedy ids
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

LATENT_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm: RMSNorm's default eps


# ------------------------------------------------------------------ config

class Config:
    """The config.json fields the forward pass reads, with the modeling code's
    defaults for optional ones."""

    def __init__(self, d):
        self.raw = d
        self.model_type = d.get("model_type", "deepseek_v2")
        if self.model_type not in ("deepseek_v2", "deepseek_v3"):
            raise ValueError(f"model_type {self.model_type!r} is not deepseek_v2/deepseek_v3")
        self.is_v3 = self.model_type == "deepseek_v3"
        g = d.get
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.moe_intermediate_size = g("moe_intermediate_size")
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_heads = d["num_attention_heads"]
        self.max_position_embeddings = g("max_position_embeddings", 2048)
        self.rms_norm_eps = g("rms_norm_eps", 1e-6)
        self.attention_bias = bool(g("attention_bias", False))
        self.q_lora_rank = g("q_lora_rank")
        self.kv_lora_rank = d["kv_lora_rank"]
        self.qk_nope_head_dim = d["qk_nope_head_dim"]
        self.qk_rope_head_dim = d["qk_rope_head_dim"]
        self.v_head_dim = d["v_head_dim"]
        self.q_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.rope_theta = float(g("rope_theta", 10000.0))
        self.rope_scaling = g("rope_scaling")
        self.n_routed_experts = g("n_routed_experts")
        self.n_shared_experts = g("n_shared_experts")
        self.num_experts_per_tok = g("num_experts_per_tok")
        self.first_k_dense_replace = g("first_k_dense_replace", 0)
        self.moe_layer_freq = g("moe_layer_freq", 1)
        self.n_group = g("n_group")
        self.topk_group = g("topk_group")
        self.topk_method = g("topk_method", "noaux_tc" if self.is_v3 else "greedy")
        self.scoring_func = g("scoring_func", "sigmoid" if self.is_v3 else "softmax")
        self.norm_topk_prob = bool(g("norm_topk_prob", False))
        self.routed_scaling_factor = float(g("routed_scaling_factor", 1.0))
        self.tie_word_embeddings = bool(g("tie_word_embeddings", False))
        self.hidden_act = g("hidden_act", "silu")
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported")

    def is_moe_layer(self, i):
        return (self.n_routed_experts is not None
                and i >= self.first_k_dense_replace
                and i % self.moe_layer_freq == 0)


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return Config(json.load(f))


# ------------------------------------------------------------------ weights

def dequant_fp8_block(codes, scale_inv, block_size):
    """codes [out, in] e4m3 codes, scale_inv [ceil(out/bo), ceil(in/bi)] f32 for
    block_size (bo, bi): w = value * scale of its block, in f32, then rounded to bf16."""
    w = safetensors_io.e4m3_to_f32(codes)
    rows, cols = w.shape
    bo, bi = block_size
    # every block but the last in each direction is full
    if scale_inv.shape != (-(-rows // bo), -(-cols // bi)):
        raise ValueError(f"scale shape {scale_inv.shape} does not tile weight {w.shape}")
    s = np.repeat(np.repeat(scale_inv, bo, axis=0), bi, axis=1)[:rows, :cols]
    return safetensors_io.round_to_bf16((w * s).astype(np.float32))


def load_weights(model_dir, cfg, block_size=(128, 128)):
    """{name: fp32 torch tensor} for every tensor the forward pass uses."""
    raw = safetensors_io.read_model_dir(model_dir)
    qc = cfg.raw.get("quantization_config") or {}
    if qc:
        if qc.get("quant_method") != "fp8":
            raise ValueError(f"quantization {qc.get('quant_method')!r} is not supported")
        block_size = tuple(qc.get("weight_block_size", block_size))
    out = {}
    for name, t in raw.items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= cfg.num_hidden_layers:
            continue  # multi-token-prediction layers
        if name.endswith("_scale_inv") or name.endswith("rotary_emb.inv_freq"):
            continue
        if t.dtype == "F8_E4M3":
            s = raw.get(name + "_scale_inv")
            if s is None:
                raise ValueError(f"F8_E4M3 tensor {name} has no {name}_scale_inv")
            sv = s.to_f32()
            exp = (-(-t.shape[0] // block_size[0]), -(-t.shape[1] // block_size[1]))
            if tuple(sv.shape) != exp:
                raise ValueError(f"{name}_scale_inv has shape {sv.shape}, expected {exp}")
            arr = dequant_fp8_block(t.data, sv, block_size)
        else:
            arr = t.to_f32()
        out[name] = torch.from_numpy(np.array(arr, dtype=np.float32))
    if cfg.tie_word_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


# --------------------------------------------------------------------- rope

def yarn_get_mscale(scale, mscale):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(num_rotations, dim, base, max_pos):
    return (dim * math.log(max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def rope_cos_sin(cfg, positions):
    """cos, sin of shape [T, rope_dim] (the frequencies repeated twice, the
    layout rotate_half expects), YaRN's mscale ratio included."""
    dim = cfg.qk_rope_head_dim
    base = cfg.rope_theta
    exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    inv_freq = 1.0 / (base ** exponents)
    t = positions.to(torch.float32)
    attn_factor = 1.0
    rs = cfg.rope_scaling
    if rs is not None:
        kind = rs.get("type", rs.get("rope_type"))
        factor = float(rs["factor"])
        if kind == "linear":
            t = t / factor
        elif kind == "yarn":
            orig = rs.get("original_max_position_embeddings", 4096)
            beta_fast = rs.get("beta_fast", 32)
            beta_slow = rs.get("beta_slow", 1)
            mscale = rs.get("mscale", 1)
            mscale_all_dim = rs.get("mscale_all_dim", 0)
            freq_extra = inv_freq
            freq_inter = 1.0 / (factor * base ** exponents)
            low = max(math.floor(_yarn_correction_dim(beta_fast, dim, base, orig)), 0)
            high = min(math.ceil(_yarn_correction_dim(beta_slow, dim, base, orig)), dim - 1)
            if low == high:
                high += 0.001
            ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
            extra_mask = 1.0 - ramp  # 1: keep the original frequency, 0: interpolate
            inv_freq = freq_inter * (1 - extra_mask) + freq_extra * extra_mask
            attn_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
        else:
            raise ValueError(f"rope_scaling type {kind!r} is not supported")
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos() * attn_factor, emb.sin() * attn_factor


def softmax_scale(cfg):
    scale = cfg.q_head_dim ** -0.5
    rs = cfg.rope_scaling
    if rs is not None:
        mscale_all_dim = rs.get("mscale_all_dim", 0)
        if mscale_all_dim:
            m = yarn_get_mscale(float(rs["factor"]), mscale_all_dim)
            scale = scale * m * m
    return scale


def deinterleave(x):
    """[..., d] with pairs (x0, x1), (x2, x3), ... -> [x0, x2, ..., x1, x3, ...]."""
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [T, heads, d]; cos/sin [T, d]."""
    x = deinterleave(x)
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


# ------------------------------------------------------------------- layers

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


# W key naming the weights whose inputs are rounded to bf16 (Model(bf16_inputs=True)).
ROUND_INPUTS = "__round_inputs__"
# W key present when attention reads its keys as a bf16 latent cache holds them
# (Model(bf16_cache=True)).
BF16_CACHE = "__bf16_cache__"


def round_bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def linear(W, name, x):
    if name + ".weight" in W.get(ROUND_INPUTS, ()):
        x = round_bf16(x)
    y = x @ W[name + ".weight"].T
    b = W.get(name + ".bias")
    return y if b is None else y + b


def mlp(W, prefix, x):
    g = linear(W, prefix + ".gate_proj", x)
    u = linear(W, prefix + ".up_proj", x)
    return linear(W, prefix + ".down_proj", torch.nn.functional.silu(g) * u)


def attention(W, cfg, p, h, cos, sin):
    """Multi-head latent attention, the plain (non-absorbed) form. h [T, hidden]."""
    T = h.shape[0]
    nh, nope, rd, vd = cfg.num_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    if cfg.q_lora_rank is None:
        q = linear(W, p + "q_proj", h)
    else:
        qa = rms_norm(linear(W, p + "q_a_proj", h), W[p + "q_a_layernorm.weight"], LATENT_NORM_EPS)
        q = linear(W, p + "q_b_proj", qa)
    q = q.view(T, nh, cfg.q_head_dim)
    q_nope, q_pe = q[..., :nope], q[..., nope:]

    ckv = linear(W, p + "kv_a_proj_with_mqa", h)
    c, k_pe = ckv[:, :cfg.kv_lora_rank], ckv[:, cfg.kv_lora_rank:].reshape(T, 1, rd)
    # What a latent cache row holds: the normalised latent and the rotated rope key.
    latent = rms_norm(c, W[p + "kv_a_layernorm.weight"], LATENT_NORM_EPS)
    k_pe = apply_rope(k_pe, cos, sin)
    if BF16_CACHE in W:
        latent, k_pe = round_bf16(latent), round_bf16(k_pe)
    kv = linear(W, p + "kv_b_proj", latent)
    kv = kv.view(T, nh, nope + vd)
    k_nope, v = kv[..., :nope], kv[..., nope:]

    q_pe = apply_rope(q_pe, cos, sin)
    qf = torch.cat([q_nope, q_pe], dim=-1)                           # [T, nh, q_head_dim]
    kf = torch.cat([k_nope, k_pe.expand(T, nh, rd)], dim=-1)         # [T, nh, q_head_dim]

    scores = torch.einsum("thd,shd->hts", qf, kf) * softmax_scale(cfg)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o = torch.einsum("hts,shd->thd", probs, v).reshape(T, nh * vd)
    return linear(W, p + "o_proj", o)


def route(W, cfg, p, h, margins=None):
    """Returns (expert ids [T, k], weights [T, k]) for tokens h [T, hidden].
    `margins`, when a list, receives the smallest gap between a chosen and an
    unchosen candidate (groups and experts), to spot fragile routing."""
    T = h.shape[0]
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    logits = h @ W[p + "gate.weight"].T
    if cfg.scoring_func == "softmax":
        scores = torch.softmax(logits, dim=-1)
    elif cfg.scoring_func == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        raise ValueError(f"scoring_func {cfg.scoring_func!r} is not supported")

    method = cfg.topk_method
    if method == "noaux_tc":
        choice = scores + W[p + "gate.e_score_correction_bias"][None, :]
    else:
        choice = scores
    if method in ("greedy", "gready"):  # "gready" is how early V2 code spelled it
        masked = choice
    elif method in ("group_limited_greedy", "noaux_tc"):
        G = cfg.n_group
        grouped = choice.view(T, G, E // G)
        if method == "group_limited_greedy":
            group_scores = grouped.max(dim=-1).values
        else:
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        top_groups = group_scores.topk(cfg.topk_group, dim=-1).indices
        group_mask = torch.zeros(T, G, dtype=torch.bool)
        group_mask.scatter_(1, top_groups, True)
        expert_mask = group_mask[:, :, None].expand(T, G, E // G).reshape(T, E)
        masked = choice.masked_fill(~expert_mask, 0.0)
        if margins is not None and cfg.topk_group < G:
            gs = group_scores.sort(dim=-1, descending=True).values
            margins.append(float((gs[:, cfg.topk_group - 1] - gs[:, cfg.topk_group]).min()))
    else:
        raise ValueError(f"topk_method {method!r} is not supported")
    ids = masked.topk(k, dim=-1).indices
    if margins is not None and k < E:
        ms = masked.sort(dim=-1, descending=True).values
        margins.append(float((ms[:, k - 1] - ms[:, k]).min()))
    weights = scores.gather(1, ids)

    normalise = k > 1 and cfg.norm_topk_prob
    if normalise:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    if cfg.is_v3 or not normalise:
        weights = weights * cfg.routed_scaling_factor
    return ids, weights


def moe(W, cfg, p, h, margins=None):
    ids, weights = route(W, cfg, p, h, margins)
    y = torch.zeros_like(h)
    for e in range(cfg.n_routed_experts):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        out = mlp(W, f"{p}experts.{e}", h[tok])
        y.index_add_(0, tok, out * weights[tok, slot][:, None])
    if cfg.n_shared_experts:
        y = y + mlp(W, p + "shared_experts", h)
    return y


def bf16_stored_names(model_dir):
    """Names of the weights mlaserve keeps in bf16: BF16 in the checkpoint, or F8_E4M3 (which
    it dequantizes to bf16 at load)."""
    raw = safetensors_io.read_model_dir(model_dir)
    names = {n for n, t in raw.items() if t.dtype in ("BF16", "F8_E4M3")}
    if "model.embed_tokens.weight" in names and "lm_head.weight" not in raw:
        names.add("lm_head.weight")  # tied
    return frozenset(names)


class Model:
    """bf16_inputs: the input of every linear layer whose weight mlaserve keeps in bf16 is
    rounded to bf16 first (its --dtype=bfloat16); the router, norms, attention and the residual
    stream stay fp32. bf16_cache: every key and value comes from the latent and rope key
    rounded to bf16, as mlaserve's decode steps read them from a bf16 cache
    (--kv_cache_dtype=bfloat16)."""

    def __init__(self, model_dir, bf16_inputs=False, bf16_cache=False):
        self.cfg = load_config(model_dir)
        self.W = load_weights(model_dir, self.cfg)
        if bf16_inputs:
            self.W[ROUND_INPUTS] = bf16_stored_names(model_dir)
        if bf16_cache:
            self.W[BF16_CACHE] = True

    @torch.no_grad()
    def forward(self, ids, margins=None):
        """ids: list of token ids, positions 0..T-1. Returns fp32 logits [T, vocab]."""
        cfg, W = self.cfg, self.W
        ids_t = torch.tensor(ids, dtype=torch.long)
        cos, sin = rope_cos_sin(cfg, torch.arange(len(ids)))
        x = W["model.embed_tokens.weight"][ids_t]
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, W[p + "input_layernorm.weight"], cfg.rms_norm_eps)
            x = x + attention(W, cfg, p + "self_attn.", h, cos, sin)
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            if cfg.is_moe_layer(i):
                x = x + moe(W, cfg, p + "mlp.", h, margins)
            else:
                x = x + mlp(W, p + "mlp", h)
        x = rms_norm(x, W["model.norm.weight"], cfg.rms_norm_eps)
        return linear(W, "lm_head", x)

    def greedy(self, prompt, n):
        """Greedy decode by recomputing the whole sequence each step.
        Returns a list of (token id, log-probs [vocab] of that step)."""
        ids = list(prompt)
        steps = []
        for _ in range(n):
            logits = self.forward(ids)[-1]
            logp = torch.log_softmax(logits, dim=-1)
            nxt = int(torch.argmax(logp))
            steps.append((nxt, logp))
            ids.append(nxt)
        return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--ids", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--n", type=int, default=16, help="greedy steps")
    a = ap.parse_args()
    model = Model(a.model_dir)
    steps = model.greedy([int(t) for t in a.ids.split(",")], a.n)
    gaps = []
    for _, logp in steps:
        top2 = torch.topk(logp, 2).values
        gaps.append(float(top2[0] - top2[1]))
    print("greedy_ids=" + ",".join(str(t) for t, _ in steps))
    print("top1_top2_logprob_gaps=" + ",".join(f"{g:.4f}" for g in gaps))


if __name__ == "__main__":
    main()
