#!/usr/bin/python3
"""Writes the model card of the default model: README.md and loss.png (the
loss curve, drawn with matplotlib: Debian python3-matplotlib) in the model
directory, from its config.json / model.safetensors, the training log
(--run-dir/loss.tsv) and samples drawn with sample.py at temperature 0.8.

usage: write_model_card.py [--model models/mlaserve-tiny-moe] [--run-dir tools/train/runs/default]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_env  # noqa: E402

cpu_env.setup(threads=2)

import torch  # noqa: E402

import corpus  # noqa: E402
import sample  # noqa: E402
import train_bpe  # noqa: E402
from model import ref, st  # noqa: E402

PROMPTS = [("", 11), ("", 12), ("The best way to", 13), ("A computer", 14)]


def read_log(path):
    rows = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rows.append(dict(zip(header, line.rstrip("\n").split("\t"))))
    return rows


def ema(values, k=0.9):
    out, m = [], None
    for v in values:
        m = v if m is None else k * m + (1 - k) * v
        out.append(m)
    return out


def plot(rows, path, tokens_per_step):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [int(r["step"]) for r in rows]
    train = [float(r["train_loss"]) for r in rows]
    vs = [(int(r["step"]), float(r["valid_loss"])) for r in rows if r.get("valid_loss")]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    ax.plot(steps, train, color="#9ecae1", linewidth=0.8, label="train (per step)")
    ax.plot(steps, ema(train), color="#2171b5", linewidth=1.6, label="train (moving average)")
    if vs:
        ax.plot([s for s, _ in vs], [v for _, v in vs], "o-", color="#d94801", markersize=4,
                label="validation")
    ax.set_xlabel(f"step ({tokens_per_step} tokens each)")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("mlaserve-tiny-moe training loss")
    ax.set_ylim(bottom=max(0.0, min(train + [v for _, v in vs]) - 0.5), top=min(9.0, max(train) + 0.2))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def count_params(model_dir):
    tensors = st.read_model_dir(model_dir)
    return sum(int(t.data.size) for t in tensors.values()), len(tensors)


def dir_size(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if os.path.isfile(os.path.join(path, f)))


def quote(text):
    return "\n".join("    " + ln for ln in text.split("\n"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/mlaserve-tiny-moe")
    ap.add_argument("--run-dir", default="tools/train/runs/default")
    a = ap.parse_args()
    torch.set_num_threads(2)

    with open(os.path.join(a.model, "config.json")) as f:
        c = json.load(f)
    rows = read_log(os.path.join(a.run_dir, "loss.tsv"))
    with open(os.path.join(a.run_dir, "args.json")) as f:
        targs = json.load(f)
    tokens_per_step = targs["batch_size"] * targs["seq_len"]
    plot(rows, os.path.join(a.model, "loss.png"), tokens_per_step)
    n_params, n_tensors = count_params(a.model)
    last = rows[-1]
    tail = [float(r["train_loss"]) for r in rows[-20:]]
    final_train = sum(tail) / len(tail)
    final_aux = sum(float(r["aux_loss"]) for r in rows[-20:]) / len(rows[-20:])
    valid_rows = [r for r in rows if r.get("valid_loss")]
    final_valid = float(valid_rows[-1]["valid_loss"]) if valid_rows else float("nan")
    steps, minutes = int(last["step"]), float(last["elapsed_s"]) / 60

    tok = train_bpe.Tokenizer(a.model)
    train_texts, valid_texts = corpus.split(corpus.documents())
    n_bytes = sum(len(t.encode()) for t in valid_texts)
    n_tok = sum(len(tok.encode(t, add_bos=False)) for t in valid_texts)
    bytes_per_token = n_bytes / n_tok
    n_train_tokens = sum(len(tok.encode(t)) + 1 for t in train_texts)

    m = ref.Model(a.model)
    samples = []
    for prompt, seed in PROMPTS:
        text, stopped = sample.generate(m, tok, prompt, 0.8, seed, 160)
        samples.append((prompt, seed, prompt + text, stopped))

    E, k = c["n_routed_experts"], c["num_experts_per_tok"]
    per_expert = 3 * c["hidden_size"] * c["moe_intermediate_size"]
    n_moe = sum(1 for i in range(c["num_hidden_layers"])
                if i >= c["first_k_dense_replace"] and i % c["moe_layer_freq"] == 0)
    # per token: everything but the idle routed experts and all but one embedding row
    active = n_params - n_moe * (E - k) * per_expert - (c["vocab_size"] - 1) * c["hidden_size"]
    sample_text = "\n\n".join(
        f"Prompt {p!r}, seed {s}{'' if stop else ' (cut at 160 tokens)'}:\n\n{quote(t)}"
        for p, s, t, stop in samples)
    size_mb = dir_size(a.model) / 1e6  # the README itself adds about 0.01 MB

    readme = f"""# mlaserve-tiny-moe

mlaserve's built-in default model: a very small DeepSeek-V2 language model (multi-head
latent attention + mixture of experts) trained from scratch on the English fortune
cookie files that Debian ships. It exists so that `mlaserve` serves something real,
with real MLA and MoE layers, with no download. It was trained for about half an
hour on two shared CPU cores, on about one million tokens: expect fortune-shaped text
made of English words and phrases, grammatical in stretches, with invented words and
little meaning; not facts, not instructions.

## Files

| file | what |
| --- | --- |
| `config.json` | DeepSeek-V2 config (`model_type` `deepseek_v2`, every key of DeepSeek-V2-Lite's config) |
| `model.safetensors` | {n_tensors} tensors, BF16, {os.path.getsize(os.path.join(a.model, 'model.safetensors')) / 1e6:.1f} MB |
| `tokenizer.json`, `tokenizer_config.json` | byte-level BPE, {c['vocab_size']} tokens, bos added in front |
| `generation_config.json` | bos / eos ids; sampling, temperature 0.8, top_p 0.95 |
| `loss.png` | training and validation loss |

## Model

{n_params:,} parameters ({n_params / 1e6:.1f} M); {active:,} of them take part in each
token's forward pass ({k} of the {E} routed experts per MoE layer, one embedding row).
On disk: {size_mb:.1f} MB for the whole directory.

| | |
| --- | --- |
| layers | {c['num_hidden_layers']} (layer 0 dense MLP, {c['intermediate_size']} wide; layers {c['first_k_dense_replace']}-{c['num_hidden_layers'] - 1} MoE) |
| hidden size | {c['hidden_size']} |
| attention | MLA, {c['num_attention_heads']} heads; q_lora_rank {json.dumps(c['q_lora_rank'])} (plain `q_proj`), kv_lora_rank {c['kv_lora_rank']}, qk_nope_head_dim {c['qk_nope_head_dim']}, qk_rope_head_dim {c['qk_rope_head_dim']}, v_head_dim {c['v_head_dim']} |
| rope | theta {c['rope_theta']:g}, no scaling; max_position_embeddings {c['max_position_embeddings']} |
| MoE | {E} routed experts (moe_intermediate_size {c['moe_intermediate_size']}) + {c['n_shared_experts']} shared, top-{k}, softmax scores, `{c['topk_method']}`, norm_topk_prob {str(c['norm_topk_prob']).lower()}, routed_scaling_factor {c['routed_scaling_factor']} |
| norms | RMSNorm, eps {c['rms_norm_eps']:g} |
| vocabulary | {c['vocab_size']} (bos {c['bos_token_id']} `<｜begin▁of▁sentence｜>`, eos {c['eos_token_id']} `<｜end▁of▁sentence｜>`) |
| embeddings | untied (`lm_head` separate) |

The layout is DeepSeek-V2-Lite's, scaled down: no q LoRA, first layer dense, greedy
softmax routing without renormalisation, shared experts added to the routed sum.

## Tokenizer

Byte-level BPE trained by `tools/train/train_bpe.py` (pure Python) on the training
documents: GPT-2's byte-to-unicode alphabet (ids 0-255 in byte order), GPT-2's
pre-tokenization regular expression (the Hugging Face `ByteLevel` pre-tokenizer with
`use_regex`), {c['vocab_size'] - 258} merges, then bos and eos as the last two ids. The
post-processor (`TemplateProcessing`) puts bos in front of every encoded text;
`tokenizer_config.json` also says `add_bos_token: true`. About {bytes_per_token:.2f} bytes
per token on the validation documents. `tools/train/train_bpe.py`'s own encoder (used to
tokenize the training data) gives the same ids and decoded text as the Hugging Face
`tokenizers` library reading this tokenizer.json (`tools/train/check_tokenizer.py`: every
7th document of the corpus plus edge cases, over 2,000 texts).

## Data

The fortune cookie files of Debian's `fortunes` and `fortunes-min` packages
(fortune-mod 1.99.1, Debian version 1:1.99.1-7.3), `/usr/share/games/fortunes/*`:
quotations, jokes, definitions, verses and proverbs in English. Left out: `ascii-art`
(pictures), `perl` (mostly code), `zippy` (deliberate nonsense), `translate-me` (not
English) and `ethnic` (ethnic jokes). Each fortune is one document
(`tools/train/corpus.py`): backspace overstrikes and control characters are removed,
runs of spaces become one, and the 72-column lines are unwrapped into sentences
(blank lines and indented lines such as the `-- Author` attributions stay separate). {len(train_texts) + len(valid_texts):,} documents,
{len(train_texts):,} for training ({n_train_tokens:,} tokens with bos and eos), every 50th
({len(valid_texts)}) held out for validation.

Licence of the data, as recorded in `/usr/share/doc/fortunes/copyright` (the same file
in `fortunes-min`): the fortune package, fortune files included, is distributed under the
BSD licence of the University of California (1991; the advertising clause deleted);
the file names Ken Arnold as the original author, the `cookie` file as coming from Karl
Lehenbauer's postings to alt.sources, and carries a separate notice for the atheism
quotation file (Wayne Aiken). Debian ships both packages in `main`. This model is
distributed on the same terms.

## Training

`tools/train/train_default_model.py`, with Debian's `python3-torch` (1.13, CPU) on 2
threads, all seeds fixed ({targs['seed']}):

```sh
apt-get install -y python3-torch python3-numpy python3-regex python3-matplotlib \\
    fortunes fortunes-min libopenblas0-pthread libjemalloc2
/usr/bin/python3 tools/train/train_default_model.py      # tokenizer + model -> {a.model}
/usr/bin/python3 tools/train/verify_checkpoint.py        # saved files == training model
/usr/bin/python3 tools/train/check_tokenizer.py          # optional: vs the tokenizers library
/usr/bin/python3 tools/train/write_model_card.py         # this README and loss.png
```

The trainer runs every layer through the functions of the reference implementation
`tools/reference/deepseek_ref.py` (batched multi-head latent attention is in
`tools/train/model.py`), and takes the tensor list and config keys from
`tools/reference/make_tiny_checkpoints.py`. It uses OpenBLAS and jemalloc for this
process only (`tools/train/cpu_env.py`); a rerun on the same setup repeats the run.

| | |
| --- | --- |
| steps | {steps} of {targs['batch_size']} windows x {targs['seq_len']} tokens ({tokens_per_step} tokens), each window starting at a document's bos; {steps * tokens_per_step:,} tokens, {steps * tokens_per_step / n_train_tokens:.2f} epochs |
| optimiser | AdamW, betas (0.9, 0.95), weight decay {targs['weight_decay']} (not on norms), gradient clip {targs['clip']} |
| learning rate | {targs['lr']:g} peak, {targs['warmup']} warm-up steps, cosine to {targs['lr'] * targs['min_lr_ratio']:g} |
| loss | next-token cross-entropy + {c['aux_loss_alpha']} x DeepSeek's sequence-level expert-balance loss (per MoE layer 1.0 when the experts are evenly loaded; {final_aux / n_moe:.3f} at the end) |
| init | normal(0, 0.02); o_proj and down_proj normal(0, 0.02 / sqrt(2 x layers)); norms 1 |
| wall time | {minutes:.1f} minutes on 2 shared CPU cores |
| final loss | train {final_train:.3f} (mean of the last 20 steps), validation {final_valid:.3f} nats/token ({final_valid / math.log(2) / bytes_per_token:.2f} bits/byte) |

![training loss](loss.png)

The weights are rounded to BF16 when saved. `tools/train/verify_checkpoint.py` loads
the saved directory with `deepseek_ref.Model` and compares its logits with the training
model's (in eval mode, from the final checkpoint) on validation documents, one of them
600 tokens long: largest difference below 1e-3, same argmax everywhere.

Training windows are {targs['seq_len']} tokens; positions beyond that were never seen in training, so
text gets worse in long contexts, although the model accepts
{c['max_position_embeddings']} positions. Fortunes are short; the model usually ends
them with eos.

## Samples

Temperature 0.8, plain sampling, with the reference forward pass
(`tools/train/sample.py`), up to 160 tokens:

{sample_text}
"""
    with open(os.path.join(a.model, "README.md"), "w", encoding="utf-8") as f:
        f.write(readme)
    print(f"{a.model}: {n_params:,} parameters, {dir_size(a.model) / 1e6:.2f} MB "
          f"final train {final_train:.3f}, valid {final_valid:.3f}, "
          f"{steps} steps, {minutes:.1f} min")
    for p, s, t, stop in samples:
        print(f"--- {p!r} seed {s} {'eos' if stop else 'cut'}\n{t}")


if __name__ == "__main__":
    main()
