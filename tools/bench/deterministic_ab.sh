#!/usr/bin/env bash
# The cost of --deterministic (batch-invariant kernels): alternating rounds of
# `mlaserve generate` with --deterministic=true and =false on one model and prompt, printing
# prompt and decode tokens/s of each round and the medians.
#   tools/bench/deterministic_ab.sh BIN_DIR MODEL_DIR PROMPT_IDS_FILE [ROUNDS] [THREADS]
set -euo pipefail
bin=$1 model=$2 ids=$3 rounds=${4:-5} threads=${5:-2}
for ((r = 1; r <= rounds; ++r)); do
  for d in true false; do
    "$bin/mlaserve" generate --model="$model" --prompt_ids="$(cat "$ids")" --max_tokens=64 \
      --ignore_eos --output=json --threads="$threads" --deterministic="$d" 2>/dev/null |
      tail -1 | sed "s/^/$d /"
  done
done | /usr/bin/python3 -c '
import json, statistics, sys
rows = {"true": [], "false": []}
for line in sys.stdin:
    mode, record = line.split(" ", 1)
    j = json.loads(record)
    pp = j["prompt_tokens"] / j["prefill_seconds"]
    tg = (j["completion_tokens"] - 1) / j["decode_seconds"]
    rows[mode].append((pp, tg))
    print("deterministic=%-5s prompt %7.1f tok/s  decode %6.2f tok/s" % (mode, pp, tg))
med = {m: (statistics.median(p for p, _ in v), statistics.median(t for _, t in v))
       for m, v in rows.items()}
for m, (pp, tg) in med.items():
    print("median deterministic=%-5s prompt %7.1f tok/s  decode %6.2f tok/s" % (m, pp, tg))
print("ratio true/false: prompt %.2f  decode %.2f" % (med["true"][0] / med["false"][0],
                                                     med["true"][1] / med["false"][1]))
'
