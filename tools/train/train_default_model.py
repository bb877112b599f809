#!/usr/bin/python3
"""Trains mlaserve's default model, models/mlaserve-tiny-moe: a small
DeepSeek-V2 (MLA + MoE) language model of English fortune cookies, on the CPU
with Debian's python3-torch.

Steps:
  1. train the byte-level BPE tokenizer (train_bpe.py) and write
     tokenizer.json / tokenizer_config.json into --out;
  0. (cpu_env.py) re-execute with OpenBLAS, jemalloc and passive OpenMP
     threads, for speed on a shared machine;
  2. tokenize the corpus (corpus.py) into one stream of documents, each as
     bos, text, eos, in a shuffled (seeded) order;
  3. train with AdamW on windows of --seq-len + 1 tokens that start at a
     document's bos, so that position 0 is bos as in generation;
  4. every --ckpt-every steps write a resumable checkpoint and a usable
     Hugging Face directory under --run-dir; at the end write
     config.json, model.safetensors (bf16) and generation_config.json into --out.

Everything is seeded (2 threads, OpenBLAS); a rerun repeats the run.
The log (--run-dir/loss.tsv) has one line per step and the validation loss
every --eval-every steps.

usage (from the repository root):
  nohup /usr/bin/python3 tools/train/train_default_model.py > tools/train/runs/train.out 2>&1 &
  /usr/bin/python3 tools/train/train_default_model.py --resume   # continue an interrupted run
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_env  # noqa: E402

cpu_env.setup(threads=2)  # before torch is loaded

import numpy as np  # noqa: E402
import torch  # noqa: E402

import corpus  # noqa: E402
import model as model_lib  # noqa: E402
import train_bpe  # noqa: E402

# Architecture: DeepSeek-V2-Lite's layout (plain q_proj, dense first layer, greedy
# softmax routing without renormalisation, 2 shared experts), scaled down.
SHAPE = dict(
    model_type="deepseek_v2",
    hidden_size=192,
    num_hidden_layers=4,
    num_attention_heads=4,
    q_lora_rank=None,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
    intermediate_size=512,
    moe_intermediate_size=192,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
    moe_layer_freq=1,
    n_group=1,
    topk_group=1,
    topk_method="greedy",
    scoring_func="softmax",
    norm_topk_prob=False,
    routed_scaling_factor=1.0,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    rope_scaling=None,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
GENERATION_CONFIG = {"do_sample": True, "temperature": 0.8, "top_p": 0.95}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/mlaserve-tiny-moe")
    ap.add_argument("--run-dir", default="tools/train/runs/default")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=480)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-loss-alpha", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--ckpt-every", type=int, default=40)
    ap.add_argument("--resume", action="store_true", help="continue from --run-dir/ckpt.pt")
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="stop (and export) after this much wall time; 0: no limit")
    return ap.parse_args()


def build_stream(tok, texts, seed):
    """One int32 stream of [bos, text ids, eos] per document (shuffled with
    `seed`) and the offsets of the bos tokens."""
    order = np.random.Generator(np.random.PCG64(seed)).permutation(len(texts))
    ids, starts = [], []
    for i in order:
        starts.append(len(ids))
        ids.extend(tok.encode(texts[i], add_bos=True))
        ids.append(tok.eos_id)
    return np.array(ids, dtype=np.int64), np.array(starts, dtype=np.int64)


def window_starts(stream, starts, seq_len):
    return starts[starts + seq_len + 1 <= len(stream)]


def batch(stream, offsets, seq_len):
    x = np.stack([stream[o:o + seq_len + 1] for o in offsets])
    x = torch.from_numpy(x)
    return x[:, :-1], x[:, 1:]


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


@torch.no_grad()
def evaluate(model, stream, starts, seq_len, batch_size):
    """Mean next-token loss over fixed windows covering the validation stream."""
    model.eval()
    offs = window_starts(stream, starts, seq_len)
    picked, last = [], -1
    for o in offs:  # non-overlapping windows
        if o >= last:
            picked.append(o)
            last = o + seq_len
    total, count = 0.0, 0
    for i in range(0, len(picked), batch_size):
        x, y = batch(stream, picked[i:i + batch_size], seq_len)
        logits, _ = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                 reduction="sum")
        total += float(loss)
        count += y.numel()
    model.train()
    return total / count


def make_optimizer(model, a):
    decay, no_decay = [], []
    for name, p in zip(model.names, model.params):
        (no_decay if model.kinds[name] == "norm" else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=a.lr, betas=(0.9, 0.95), eps=1e-8)


def export(model, out_dir, metadata):
    model.save(out_dir, metadata)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        cfg = model.config_dict
        g = {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
             "eos_token_id": cfg["eos_token_id"]}
        g.update(GENERATION_CONFIG)
        g["transformers_version"] = cfg["transformers_version"]
        json.dump(g, f, indent=2)
        f.write("\n")


def save_ckpt(path, model, opt, rng, step, elapsed):
    tmp = path + ".tmp"
    torch.save({"step": step, "elapsed": elapsed, "params": [p.detach() for p in model.params],
                "opt": opt.state_dict(), "rng": rng.bit_generator.state,
                "torch_rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, path)


def main():
    a = parse_args()
    torch.set_num_threads(2)
    model_lib.set_seed(a.seed)
    os.makedirs(a.run_dir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    log_path = os.path.join(a.run_dir, "loss.tsv")
    ckpt_path = os.path.join(a.run_dir, "ckpt.pt")

    # 1. tokenizer
    train_texts, valid_texts = corpus.split(corpus.documents())
    vocab, merges = train_bpe.train(train_texts, a.vocab_size, log=lambda s: None)
    train_bpe.write(a.out, vocab, merges)
    tok = train_bpe.Tokenizer(a.out)
    assert tok.vocab_size == a.vocab_size

    # 2. data
    tr_stream, tr_starts = build_stream(tok, train_texts, a.seed)
    va_stream, va_starts = build_stream(tok, valid_texts, a.seed + 1)
    tr_offs = window_starts(tr_stream, tr_starts, a.seq_len)
    print(cpu_env.describe(), flush=True)
    print(f"train {len(train_texts)} docs, {len(tr_stream)} tokens; valid {len(valid_texts)} docs, "
          f"{len(va_stream)} tokens", flush=True)

    # 3. model
    config = model_lib.make_config(SHAPE, a.vocab_size, a.aux_loss_alpha)
    model = model_lib.DeepseekV2(config, init_seed=a.seed)
    print(f"parameters: {model.num_parameters():,} total, "
          f"{model.num_parameters(active=True):,} active per token (without the embedding)", flush=True)
    opt = make_optimizer(model, a)
    rng = np.random.Generator(np.random.PCG64(a.seed))
    step, elapsed_before = 0, 0.0
    if a.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        with torch.no_grad():
            for p, v in zip(model.params, ck["params"]):
                p.copy_(v)
        opt.load_state_dict(ck["opt"])
        rng.bit_generator.state = ck["rng"]
        torch.set_rng_state(ck["torch_rng"])
        step, elapsed_before = ck["step"], ck["elapsed"]
        print(f"resumed at step {step}", flush=True)
    elif os.path.exists(log_path):
        os.remove(log_path)

    with open(os.path.join(a.run_dir, "args.json"), "w") as f:
        json.dump(vars(a), f, indent=2)
        f.write("\n")
    t0 = time.time() - elapsed_before
    log = open(log_path, "a")
    if step == 0:
        log.write("step\telapsed_s\tlr\ttrain_loss\taux_loss\ttokens_per_s\tvalid_loss\n")
    model.train()
    last_t = time.time()
    while step < a.steps:
        lr = lr_at(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(tr_stream, rng.choice(tr_offs, size=a.batch_size), a.seq_len)
        logits, aux = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + a.aux_loss_alpha * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        step += 1
        now = time.time()
        tps = x.numel() / max(now - last_t, 1e-9)
        last_t = now
        valid = ""
        if step % a.eval_every == 0 or step == a.steps:
            valid = f"{evaluate(model, va_stream, va_starts, a.seq_len, a.batch_size):.4f}"
            last_t = time.time()
        log.write(f"{step}\t{now - t0:.1f}\t{lr:.6f}\t{float(loss):.4f}\t{float(aux):.4f}\t{tps:.0f}\t{valid}\n")
        log.flush()
        if step % 10 == 0 or valid:
            print(f"step {step} loss {float(loss):.4f} aux {float(aux):.3f} lr {lr:.2e} "
                  f"{tps:.0f} tok/s {now - t0:.0f}s" + (f" valid {valid}" if valid else ""), flush=True)
        out_of_time = a.max_minutes and (time.time() - t0) > a.max_minutes * 60
        if step % a.ckpt_every == 0 or step == a.steps or out_of_time:
            save_ckpt(ckpt_path, model, opt, rng, step, time.time() - t0)
            export(model, os.path.join(a.run_dir, "hf"), {"step": str(step)})
            last_t = time.time()
        if out_of_time:
            print(f"stopping at step {step}: --max-minutes reached", flush=True)
            break
    log.close()

    # 4. export
    model.eval()
    export(model, a.out, {"step": str(step)})
    print(f"done: {step} steps, {time.time() - t0:.0f}s -> {a.out}", flush=True)


if __name__ == "__main__":
    main()
