#!/usr/bin/python3
"""Writes tiny random DeepSeek-V2 / V3 checkpoints in real Hugging Face format
(config.json with the real keys, model.safetensors) that together cover every
config variant the engine supports. Deterministic: each tensor is drawn from
its own numpy PCG64 stream seeded with (seed, crc32(tensor name)).

  linear weights      normal(0, 1/sqrt(fan_in)), rounded to bf16
  embeddings          normal(0, 1) (tied variant: 1/sqrt(hidden)), rounded to bf16
  RMSNorm weights     1 + normal(0, 0.25), rounded to bf16 (so the norms matter)
  V3 router bias      normal(0, 0.1), stored F32

Storage per variant: BF16; or F16 with some F32 (v2_linear_tied_f16); or
F8_E4M3 with "<name>_scale_inv" F32 128x128 block scales for the linear
weights inside the decoder layers (v3_fp8, like DeepSeek-V3's release).

usage: make_tiny_checkpoints.py [--out tests/data/models] [--seed 1] [variant ...]
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
from safetensors_io import Tensor  # noqa: E402

# Shapes shared by every variant (overridden per variant where noted).
BASE = dict(
    hidden_size=48, num_attention_heads=4, kv_lora_rank=32, qk_nope_head_dim=16,
    qk_rope_head_dim=8, v_head_dim=16, vocab_size=256, num_hidden_layers=3,
    intermediate_size=64, moe_intermediate_size=8, n_routed_experts=8,
    num_experts_per_tok=2, max_position_embeddings=4096, rope_theta=10000.0,
)

VARIANTS = {
    # V2-Lite layout: plain q_proj, greedy softmax routing, no renormalisation, so
    # routed_scaling_factor (1.5 here) multiplies the weights.
    "v2_lite_dense_first": dict(
        model_type="deepseek_v2", q_lora_rank=None, topk_method="greedy",
        scoring_func="softmax", n_group=1, topk_group=1, first_k_dense_replace=1,
        moe_layer_freq=1, rope_scaling=None, norm_topk_prob=False,
        routed_scaling_factor=1.5, n_shared_experts=2, rms_norm_eps=1e-6,
        tie_word_embeddings=False, storage="bf16"),
    # V2 (236B) layout: q LoRA, group-limited greedy, YaRN, renormalised top-3 (so the
    # routed_scaling_factor of 16 must NOT be applied), MoE only on even layers.
    "v2_group_yarn": dict(
        model_type="deepseek_v2", q_lora_rank=40, topk_method="group_limited_greedy",
        scoring_func="softmax", n_group=4, topk_group=2, first_k_dense_replace=0,
        moe_layer_freq=2, num_experts_per_tok=3, norm_topk_prob=True,
        routed_scaling_factor=16.0, n_shared_experts=1, rms_norm_eps=1e-2,
        rope_scaling=dict(type="yarn", factor=4, original_max_position_embeddings=128,
                          beta_fast=32, beta_slow=1, mscale=0.707, mscale_all_dim=0.707),
        tie_word_embeddings=False, storage="bf16"),
    # V3 layout: sigmoid + correction bias, noaux_tc over 4 groups of 3 experts (so
    # the group score "sum of the top 2" differs from both max and sum), plus
    # multi-token-prediction tensors of layer 3 that the loader must ignore.
    "v3_noaux": dict(
        model_type="deepseek_v3", q_lora_rank=40, topk_method="noaux_tc",
        scoring_func="sigmoid", n_routed_experts=12, n_group=4, topk_group=2,
        first_k_dense_replace=1, moe_layer_freq=1, norm_topk_prob=True,
        routed_scaling_factor=2.5, n_shared_experts=1, rms_norm_eps=1e-6,
        rope_scaling=dict(type="yarn", factor=4, original_max_position_embeddings=128,
                          beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0),
        tie_word_embeddings=False, storage="bf16", mtp=True),
    # v3_noaux with DeepSeek-V3's FP8 release format; the dense MLP is 136 wide so
    # its weights span two 128-blocks. mscale != mscale_all_dim here, so cos/sin
    # carry a YaRN factor other than 1.
    "v3_fp8": dict(
        model_type="deepseek_v3", q_lora_rank=40, topk_method="noaux_tc",
        scoring_func="sigmoid", n_routed_experts=12, n_group=4, topk_group=2,
        first_k_dense_replace=1, moe_layer_freq=1, norm_topk_prob=True,
        routed_scaling_factor=2.5, n_shared_experts=1, rms_norm_eps=1e-6,
        intermediate_size=136,
        rope_scaling=dict(type="yarn", factor=4, original_max_position_embeddings=128,
                          beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=0.5),
        tie_word_embeddings=False, storage="fp8", mtp=True),
    # Linear rope scaling, tied embeddings (no lm_head tensor; embeddings drawn with
    # std 1/sqrt(hidden) so the output is not dominated by the current token's own
    # embedding), F16 + F32 storage,
    # top-1 of 4 experts with norm_topk_prob true (top-1 is never renormalised, so
    # routed_scaling_factor applies), no shared experts.
    "v2_linear_tied_f16": dict(
        model_type="deepseek_v2", q_lora_rank=None, topk_method="greedy",
        scoring_func="softmax", n_routed_experts=4, num_experts_per_tok=1, n_group=1,
        topk_group=1, first_k_dense_replace=1, moe_layer_freq=1, norm_topk_prob=True,
        routed_scaling_factor=2.0, n_shared_experts=0, rms_norm_eps=1e-6,
        rope_scaling=dict(type="linear", factor=2.0),
        tie_word_embeddings=True, storage="f16", embed_std=48 ** -0.5),
}


def make_config(v):
    """config.json with the keys DeepSeek's own configs carry."""
    c = dict(BASE)
    c.update({k: val for k, val in v.items() if k in BASE})
    v3 = v["model_type"] == "deepseek_v3"
    V = c["vocab_size"]
    bos, eos = (0, 1) if v3 else (V - 2, V - 1)
    name = "DeepseekV3" if v3 else "DeepseekV2"
    cfg = {
        "architectures": [f"{name}ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": f"configuration_deepseek.{name}Config",
            "AutoModel": f"modeling_deepseek.{name}Model",
            "AutoModelForCausalLM": f"modeling_deepseek.{name}ForCausalLM",
        },
        "bos_token_id": bos,
        "eos_token_id": eos,
        "ep_size": 1,
        "first_k_dense_replace": v["first_k_dense_replace"],
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"],
        "kv_lora_rank": c["kv_lora_rank"],
        "max_position_embeddings": c["max_position_embeddings"],
        "model_type": v["model_type"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "moe_layer_freq": v["moe_layer_freq"],
        "n_group": v["n_group"],
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": v["n_shared_experts"],
        "norm_topk_prob": v["norm_topk_prob"],
        "num_attention_heads": c["num_attention_heads"],
        "num_experts_per_tok": c["num_experts_per_tok"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": c["num_attention_heads"],
        "q_lora_rank": v["q_lora_rank"],
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "rms_norm_eps": v["rms_norm_eps"],
        "rope_scaling": v["rope_scaling"],
        "rope_theta": c["rope_theta"],
        "routed_scaling_factor": v["routed_scaling_factor"],
        "scoring_func": v["scoring_func"],
        "tie_word_embeddings": v["tie_word_embeddings"],
        "topk_group": v["topk_group"],
        "topk_method": v["topk_method"],
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.3" if v3 else "4.39.3",
        "use_cache": True,
        "v_head_dim": c["v_head_dim"],
        "vocab_size": V,
    }
    if v3:
        cfg["num_nextn_predict_layers"] = 1 if v.get("mtp") else 0
    else:
        cfg["aux_loss_alpha"] = 0.001
        cfg["pretraining_tp"] = 1
        cfg["seq_aux"] = True
    if v["storage"] == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    if v["storage"] == "f16":
        cfg["torch_dtype"] = "float16"
    return dict(sorted(cfg.items()))


# Kinds of tensor: "linear" (fan_in given), "embed", "norm", "router", "bias".
def tensor_list(c, v):
    """Ordered [(name, shape, kind, fan_in)] of a checkpoint with config c."""
    H, nh = c["hidden_size"], c["num_attention_heads"]
    qhd = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    kvr, rd = c["kv_lora_rank"], c["qk_rope_head_dim"]
    out = [("model.embed_tokens.weight", (c["vocab_size"], H), "embed", None)]

    def lin(name, o, i):
        out.append((name, (o, i), "linear", i))

    def mlp(p, inter):
        lin(p + "gate_proj.weight", inter, H)
        lin(p + "up_proj.weight", inter, H)
        lin(p + "down_proj.weight", H, inter)

    def layer_has_moe(i):
        return (c["n_routed_experts"] is not None and i >= c["first_k_dense_replace"]
                and i % c["moe_layer_freq"] == 0)

    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", (H,), "norm", None))
        a = p + "self_attn."
        if c["q_lora_rank"] is None:
            lin(a + "q_proj.weight", nh * qhd, H)
        else:
            lin(a + "q_a_proj.weight", c["q_lora_rank"], H)
            out.append((a + "q_a_layernorm.weight", (c["q_lora_rank"],), "norm", None))
            lin(a + "q_b_proj.weight", nh * qhd, c["q_lora_rank"])
        lin(a + "kv_a_proj_with_mqa.weight", kvr + rd, H)
        out.append((a + "kv_a_layernorm.weight", (kvr,), "norm", None))
        lin(a + "kv_b_proj.weight", nh * (c["qk_nope_head_dim"] + c["v_head_dim"]), kvr)
        lin(a + "o_proj.weight", H, nh * c["v_head_dim"])
        out.append((p + "post_attention_layernorm.weight", (H,), "norm", None))
        m = p + "mlp."
        if layer_has_moe(i):
            E = c["n_routed_experts"]
            out.append((m + "gate.weight", (E, H), "router", H))
            if c["topk_method"] == "noaux_tc":
                out.append((m + "gate.e_score_correction_bias", (E,), "bias", None))
            for e in range(E):
                mlp(f"{m}experts.{e}.", c["moe_intermediate_size"])
            if c["n_shared_experts"]:
                mlp(m + "shared_experts.", c["moe_intermediate_size"] * c["n_shared_experts"])
        else:
            mlp(m, c["intermediate_size"])
    if v.get("mtp"):
        # A few tensors of DeepSeek-V3's multi-token-prediction layer, which sits
        # after the last decoder layer and is not part of the forward pass.
        p = f"model.layers.{c['num_hidden_layers']}."
        out.append((p + "enorm.weight", (H,), "norm", None))
        out.append((p + "hnorm.weight", (H,), "norm", None))
        lin(p + "eh_proj.weight", H, 2 * H)
        out.append((p + "shared_head.norm.weight", (H,), "norm", None))
    out.append(("model.norm.weight", (H,), "norm", None))
    if not c["tie_word_embeddings"]:
        lin("lm_head.weight", c["vocab_size"], H)
    return out


def draw(seed, name, shape, kind, fan_in, embed_std=1.0):
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(name.encode())]))
    if kind in ("linear", "router"):
        x = rng.normal(0.0, 1.0 / np.sqrt(fan_in), size=shape)
    elif kind == "embed":
        x = rng.normal(0.0, embed_std, size=shape)
    elif kind == "norm":
        x = 1.0 + rng.normal(0.0, 0.25, size=shape)
    elif kind == "bias":
        x = rng.normal(0.0, 0.1, size=shape)
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


def quantize_fp8_blocks(w, block=(128, 128)):
    """w [out, in] f32 -> (e4m3 codes, f32 scale_inv [ceil(out/128), ceil(in/128)]),
    one scale per block so that the block's largest |w| maps to 448."""
    rows, cols = w.shape
    br, bc = -(-rows // block[0]), -(-cols // block[1])
    scale = np.zeros((br, bc), dtype=np.float32)
    codes = np.zeros(w.shape, dtype=np.uint8)
    for i in range(br):
        for j in range(bc):
            sl = (slice(i * block[0], (i + 1) * block[0]), slice(j * block[1], (j + 1) * block[1]))
            amax = float(np.max(np.abs(w[sl])))
            s = np.float32(amax / st.E4M3_MAX if amax > 0 else 1.0)
            scale[i, j] = s
            codes[sl] = st.f32_to_e4m3(w[sl] / s)
    return codes, scale


def is_layer_linear(name, kind):
    return kind == "linear" and name.startswith("model.layers.")


def encode(name, x, kind, storage):
    """[(name, Tensor)] to store for tensor `name` with f32 values x."""
    if storage == "bf16":
        if kind == "bias":
            return [(name, Tensor("F32", x))]
        return [(name, Tensor("BF16", st.f32_to_bf16_bits(x)))]
    if storage == "fp8":
        if kind == "bias":
            return [(name, Tensor("F32", x))]
        if is_layer_linear(name, kind):
            codes, scale = quantize_fp8_blocks(x)
            return [(name, Tensor("F8_E4M3", codes)), (name + "_scale_inv", Tensor("F32", scale))]
        return [(name, Tensor("BF16", st.f32_to_bf16_bits(x)))]
    if storage == "f16":
        xb = st.round_to_bf16(x)
        # Norms, router and the latent up-projection stay F32; the rest is F16.
        if kind in ("norm", "router", "bias") or name.endswith("kv_b_proj.weight"):
            return [(name, Tensor("F32", xb))]
        return [(name, Tensor("F16", xb.astype(np.float16)))]
    raise ValueError(storage)


def write_variant(out_dir, variant, seed):
    v = VARIANTS[variant]
    cfg = make_config(v)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for name, shape, kind, fan_in in tensor_list(cfg, v):
        x = st.round_to_bf16(draw(seed, name, shape, kind, fan_in, v.get("embed_std", 1.0)))
        for n, t in encode(name, x, kind, v["storage"]):
            tensors[n] = t
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    path = os.path.join(out_dir, "model.safetensors")
    st.write_file(path, tensors, metadata={"format": "pt"})
    return path, len(tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", default=list(VARIANTS), help="default: all")
    ap.add_argument("--out", default="tests/data/models")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for variant in a.variants:
        if variant not in VARIANTS:
            sys.exit(f"unknown variant {variant}; known: {', '.join(VARIANTS)}")
        path, n = write_variant(os.path.join(a.out, variant), variant, a.seed)
        print(f"{variant}: {n} tensors, {os.path.getsize(path)} bytes -> {path}")


if __name__ == "__main__":
    main()
