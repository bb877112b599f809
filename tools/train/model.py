"""A trainable, batched DeepSeek-V2 model built from the reference's pieces.

tools/reference/deepseek_ref.py is the oracle: its forward pass runs under
no_grad on one unbatched sequence. This module keeps the weights as
nn.Parameters under their Hugging Face names and computes the same function
on a batch [B, T], differentiably, by calling the reference's own functions
(rms_norm, linear, mlp, rope_cos_sin, apply_rope, softmax_scale, moe, route).
Only multi-head latent attention is re-stated here, because the reference's
version is written for one sequence ([T, ...] views); it is the same
computation with a batch axis in front.

The tensor list (names, shapes, order) and config.json come from
tools/reference/make_tiny_checkpoints.py, so a saved model has exactly the
layout the reference and the engine read.
"""
import math
import os
import sys

import numpy as np
import torch
from torch import nn

_REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference")
sys.path.insert(0, os.path.abspath(_REF))
import deepseek_ref as ref  # noqa: E402
import make_tiny_checkpoints as tiny  # noqa: E402
import safetensors_io as st  # noqa: E402


def attention(W, cfg, p, h, cos, sin):
    """Multi-head latent attention on a batch: h [B, T, hidden] -> [B, T, hidden].
    Same steps as deepseek_ref.attention (plain, non-absorbed form)."""
    B, T, _ = h.shape
    nh, nope, rd, vd = cfg.num_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    if cfg.q_lora_rank is None:
        q = ref.linear(W, p + "q_proj", h)
    else:
        qa = ref.rms_norm(ref.linear(W, p + "q_a_proj", h), W[p + "q_a_layernorm.weight"],
                          ref.LATENT_NORM_EPS)
        q = ref.linear(W, p + "q_b_proj", qa)
    q = q.view(B, T, nh, cfg.q_head_dim)
    q_nope, q_pe = q[..., :nope], q[..., nope:]

    ckv = ref.linear(W, p + "kv_a_proj_with_mqa", h)
    c, k_pe = ckv[..., :cfg.kv_lora_rank], ckv[..., cfg.kv_lora_rank:].reshape(B, T, 1, rd)
    kv = ref.linear(W, p + "kv_b_proj",
                    ref.rms_norm(c, W[p + "kv_a_layernorm.weight"], ref.LATENT_NORM_EPS))
    kv = kv.view(B, T, nh, nope + vd)
    k_nope, v = kv[..., :nope], kv[..., nope:]

    # ref.apply_rope broadcasts cos/sin [T, d] as [T, 1, d], which also fits [B, T, heads, d].
    q_pe = ref.apply_rope(q_pe, cos, sin)
    k_pe = ref.apply_rope(k_pe, cos, sin)
    qf = torch.cat([q_nope, q_pe], dim=-1)
    kf = torch.cat([k_nope, k_pe.expand(B, T, nh, rd)], dim=-1)

    scores = torch.einsum("bthd,bshd->bhts", qf, kf) * ref.softmax_scale(cfg)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=h.device), diagonal=1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o = torch.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, nh * vd)
    return ref.linear(W, p + "o_proj", o)


def balance_loss(W, cfg, p, h):
    """DeepSeek's sequence-level auxiliary loss (seq_aux): per sequence,
    sum_i f_i * P_i with f_i = E / (k T) * (tokens sending to expert i) and
    P_i = mean routing score of expert i. h [B, T, hidden]."""
    B, T, _ = h.shape
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    scores = torch.softmax(h @ W[p + "gate.weight"].T, dim=-1)          # [B, T, E]
    ids = scores.topk(k, dim=-1).indices.reshape(B, T * k)
    load = torch.zeros(B, E, dtype=h.dtype, device=h.device)
    load.scatter_add_(1, ids, torch.ones_like(ids, dtype=h.dtype))
    f = load * (E / (k * T))
    return (f * scores.mean(dim=1)).sum(dim=1).mean()


class DeepseekV2(nn.Module):
    def __init__(self, config_dict, init_seed=0):
        super().__init__()
        self.config_dict = config_dict
        self.cfg = ref.Config(config_dict)
        self.names, self.kinds = [], {}
        params = []
        g = torch.Generator().manual_seed(init_seed)
        n_layers = self.cfg.num_hidden_layers
        for name, shape, kind, fan_in in tiny.tensor_list(config_dict, {}):
            self.names.append(name)
            self.kinds[name] = kind
            params.append(nn.Parameter(self._init(name, shape, kind, n_layers, g)))
        self.params = nn.ParameterList(params)

    @staticmethod
    def _init(name, shape, kind, n_layers, g):
        if kind == "norm":
            return torch.ones(shape)
        std = 0.02
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            std = 0.02 / math.sqrt(2 * n_layers)  # residual branches
        return torch.randn(shape, generator=g) * std

    def weights(self):
        W = dict(zip(self.names, self.params))
        if self.cfg.tie_word_embeddings:
            W["lm_head.weight"] = W["model.embed_tokens.weight"]
        return W

    def forward(self, ids):
        """ids [B, T] -> (logits [B, T, vocab], auxiliary balance loss)."""
        cfg, W = self.cfg, self.weights()
        B, T = ids.shape
        cos, sin = ref.rope_cos_sin(cfg, torch.arange(T))
        # index_select: its backward (index_add_) sums repeated ids in a fixed order
        x = W["model.embed_tokens.weight"].index_select(0, ids.reshape(-1)).view(B, T, -1)
        aux = x.new_zeros(())
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            h = ref.rms_norm(x, W[p + "input_layernorm.weight"], cfg.rms_norm_eps)
            x = x + attention(W, cfg, p + "self_attn.", h, cos, sin)
            h = ref.rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            if cfg.is_moe_layer(i):
                flat = h.reshape(B * T, -1)
                x = x + ref.moe(W, cfg, p + "mlp.", flat).view(B, T, -1)
                if self.training:
                    aux = aux + balance_loss(W, cfg, p + "mlp.", h)
            else:
                x = x + ref.mlp(W, p + "mlp", h)
        x = ref.rms_norm(x, W["model.norm.weight"], cfg.rms_norm_eps)
        return x @ W["lm_head.weight"].T, aux

    def num_parameters(self, active=False):
        cfg = self.cfg
        total = sum(p.numel() for p in self.params)
        if not active:
            return total
        per_expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
        n_moe = sum(cfg.is_moe_layer(i) for i in range(cfg.num_hidden_layers))
        idle = n_moe * (cfg.n_routed_experts - cfg.num_experts_per_tok) * per_expert
        return total - idle - cfg.vocab_size * cfg.hidden_size  # embedding lookup is not compute

    @torch.no_grad()
    def round_to_bf16_(self):
        """Rounds every parameter to the nearest bf16 value (what is saved)."""
        for p in self.params:
            p.copy_(torch.from_numpy(st.round_to_bf16(p.detach().numpy())))

    def state_tensors(self):
        """{name: safetensors Tensor} in BF16, in tensor_list order."""
        out = {}
        for name, p in zip(self.names, self.params):
            bits = st.f32_to_bf16_bits(p.detach().float().numpy())
            out[name] = st.Tensor("BF16", bits)
        return out

    def save(self, out_dir, metadata=None):
        import json
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(self.config_dict, f, indent=2)
            f.write("\n")
        path = os.path.join(out_dir, "model.safetensors")
        tmp = path + ".tmp"
        meta = {"format": "pt"}
        meta.update(metadata or {})
        st.write_file(tmp, self.state_tensors(), metadata=meta)
        os.replace(tmp, path)

    @classmethod
    def load(cls, model_dir):
        cfg = ref.load_config(model_dir)
        m = cls(cfg.raw)
        W = ref.load_weights(model_dir, cfg)
        with torch.no_grad():
            for name, p in zip(m.names, m.params):
                p.copy_(W[name])
        return m


def make_config(shape, vocab_size, aux_loss_alpha):
    """config.json for a DeepSeek-V2-Lite-style model: the reference's key set
    (make_tiny_checkpoints.make_config) with our shapes. bos / eos are the last
    two ids, as the tokenizer lays them out."""
    v = dict(shape)
    v["vocab_size"] = vocab_size
    v.setdefault("storage", "bf16")
    c = tiny.make_config(v)
    c["aux_loss_alpha"] = aux_loss_alpha
    c["bos_token_id"], c["eos_token_id"] = vocab_size - 2, vocab_size - 1
    return dict(sorted(c.items()))


def set_seed(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
