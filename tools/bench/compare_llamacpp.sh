#!/usr/bin/env bash
# Side-by-side CPU benchmark against llama.cpp on the same synthetic DeepSeek-V2 weights
# (../shared/bench writes them in Hugging Face and GGUF form). Runs mlaserve and llama.cpp
# alternately, ROUNDS times, with the same prompt length, generation length and threads, and
# prints prompt and decode tokens/s of both and their ratios.
#
# usage: tools/bench/compare_llamacpp.sh BENCH_DIR MODEL_DIR [ROUNDS]
#   BENCH_DIR: the peer benchmark folder (peer_llamacpp.sh); MODEL_DIR: holds config.json,
#   model.safetensors and model-bf16.gguf (make_model.py --out MODEL_DIR)
# env: THREADS (2), PP (512 prompt tokens), TG (64 generated tokens), DTYPES (mlaserve --dtype
#      values run in turn each round, "float32" by default; "float32 bfloat16" runs both)
set -euo pipefail
bench=$1 model=$2 rounds=${3:-3}
threads=${THREADS:-2} pp=${PP:-512} tg=${TG:-64} dtypes=${DTYPES:-float32}
root="$(cd "$(dirname "$0")/../.." && pwd)"
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json")
bos=$((vocab - 2))
ids=$(python3 -c "
import random, sys
r = random.Random(1); v = int(sys.argv[1]); n = int(sys.argv[2])
print(','.join([str(v - 2)] + [str(r.randrange(256, v - 2)) for _ in range(n - 1)]))" "$vocab" "$pp")

for round in $(seq "$rounds"); do
  for dtype in $dtypes; do
    out=$("$root/build/bin/mlaserve" generate --model="$model" --backend=cpu --threads="$threads" \
          --dtype="$dtype" --prompt_ids="$ids" --max_tokens="$tg" --ignore_eos --output=json \
          --max_num_batched_tokens="$pp" --kv_cache_tokens=$((pp + tg + 64)) 2>/dev/null | tail -1)
    python3 - "$out" "$pp" "$tg" "$dtype" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); pp = int(sys.argv[2]); tg = int(sys.argv[3])
print(f"mlaserve pp{pp}_tok_s={pp / d['prefill_seconds']:.2f} "
      f"tg{tg}_tok_s={(d['completion_tokens'] - 1) / d['decode_seconds']:.2f} dtype={sys.argv[4]}")
PY
  done
  THREADS=$threads "$bench/peer_llamacpp.sh" "$model/model-bf16.gguf" --pp "$pp" --tg "$tg" \
      --reps 1 --wait-idle 10 --max-tries 3 2>/dev/null | tail -1
done
