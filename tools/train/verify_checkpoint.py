#!/usr/bin/python3
"""Checks that the saved model directory is read by the reference exactly as
the training code computes it.

  A: the training model (model.DeepseekV2), built from config.json, with the
     fp32 parameters of the final training checkpoint (--run-dir/ckpt.pt)
     rounded to bf16, in eval mode, run batched;
  B: tools/reference/deepseek_ref.Model loading --model (config.json +
     model.safetensors), run one sequence at a time.

Both run on the same validation documents (tokenized with the saved
tokenizer.json); the largest |logit difference| must stay below --tol, and
both must pick the same greedy next token everywhere. Also checks that the
tokenizer decodes what it encodes and that the post-processor's bos matches
config.json.

usage: verify_checkpoint.py [--model models/mlaserve-tiny-moe] [--run-dir tools/train/runs/default]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_env  # noqa: E402

cpu_env.setup(threads=2)

import torch  # noqa: E402

import corpus  # noqa: E402
import model as model_lib  # noqa: E402
import train_bpe  # noqa: E402
from model import ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/mlaserve-tiny-moe")
    ap.add_argument("--run-dir", default="tools/train/runs/default")
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    torch.set_num_threads(2)

    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    tok = train_bpe.Tokenizer(a.model)
    assert tok.bos_id == config["bos_token_id"] and tok.eos_id == config["eos_token_id"]
    assert tok.vocab_size == config["vocab_size"]
    with open(os.path.join(a.model, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    assert tj["post_processor"]["special_tokens"][train_bpe.BOS]["ids"] == [config["bos_token_id"]]

    # A: training model from the checkpoint's fp32 parameters
    train_model = model_lib.DeepseekV2(config)
    ckpt = os.path.join(a.run_dir, "ckpt.pt")
    if os.path.exists(ckpt):
        ck = torch.load(ckpt)
        with torch.no_grad():
            for p, v in zip(train_model.params, ck["params"]):
                p.copy_(v)
        source = f"{ckpt} (step {ck['step']})"
    else:
        sys.exit(f"{ckpt} not found: run train_default_model.py first")
    train_model.round_to_bf16_()
    train_model.eval()

    # B: the reference, from the saved directory
    ref_model = ref.Model(a.model)

    _, valid = corpus.split(corpus.documents())
    seqs = []
    for text in valid[:a.docs]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text, "tokenizer round trip"
        seqs.append(ids + [tok.eos_id])
    # one long sequence too, several documents back to back (positions up to ~600)
    long_seq = []
    for text in valid[a.docs:]:
        long_seq += tok.encode(text) + [tok.eos_id]
        if len(long_seq) >= 600:
            break
    seqs.append(long_seq[:600])

    worst, mismatches, n_pos = 0.0, 0, 0
    T = max(len(s) for s in seqs[:-1])
    # batched run of the short documents, padded at the end (causal: padding does not
    # change earlier positions)
    batch = torch.full((len(seqs) - 1, T), tok.eos_id, dtype=torch.long)
    for i, s in enumerate(seqs[:-1]):
        batch[i, :len(s)] = torch.tensor(s)
    with torch.no_grad():
        la, _ = train_model(batch)
        lb_long, _ = train_model(torch.tensor([seqs[-1]]))
    for i, s in enumerate(seqs):
        a_logits = la[i, :len(s)] if i < len(seqs) - 1 else lb_long[0]
        b_logits = ref_model.forward(s)
        d = float((a_logits - b_logits).abs().max())
        worst = max(worst, d)
        mismatches += int((a_logits.argmax(-1) != b_logits.argmax(-1)).sum())
        n_pos += len(s)
        print(f"sequence {i}: {len(s)} tokens, max |diff| {d:.2e}")
    print(f"training model ({source}, bf16-rounded) vs deepseek_ref.Model({a.model}): "
          f"max |logit diff| {worst:.2e} over {n_pos} positions, {mismatches} argmax mismatches")
    if worst >= a.tol or mismatches:
        sys.exit("FAILED")
    print("OK")


if __name__ == "__main__":
    main()
