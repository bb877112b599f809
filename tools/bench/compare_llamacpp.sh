#!/usr/bin/env bash
# Side-by-side CPU benchmark against llama.cpp on the same synthetic DeepSeek-V2 weights
# (../shared/bench writes them in Hugging Face and GGUF form). Runs mlaserve and llama.cpp
# alternately, ROUNDS times, with the same prompt length, generation length and threads, and
# prints prompt and decode tokens/s of both and their ratios per round. Before every engine run
# it runs the bench's read-bandwidth probe (membw.c) and prints, for each engine, the weight
# bytes its decode reads per second as a fraction of the two-thread probe just before it (the
# median over runs; with THREADS above two, of the CPU backend's start-up probe on those
# threads): the shared host's bandwidth moves within minutes, so a run is compared with its
# own neighbour, not with a probe long before or after. With STREAMS=N (e.g. 16) it then
# compares batched decode: `mlaserve serve` under N concurrent gRPC streams (mlaserve-bench)
# against llama.cpp decoding N sequences in one context, and the
# aggregate rate as a multiple of llama.cpp's and of mlaserve's own one-stream decode in the same
# --dtype (STREAM_DTYPES; DTYPES must include it for the second ratio); the
# aggregate counts from the earliest first token (a stream that starts alone puts the others'
# prefill in its span), `streams_all_decoding` from the moment every stream decodes. It ends
# with one Markdown row per mlaserve dtype for the per-host table of docs/performance.md: the
# processor and kernel build from the backend's `cpu_backend` start-up line, the probe's range
# and the ranges of the ratios.
#
# llama.cpp runs through llamacpp-peer (tools/bench/llamacpp_peer.cc: its C API on the npm
# package's prebuilt CPU libraries, built here on first use by build_llamacpp_peer.sh), not
# through the Node.js harnesses of BENCH_DIR: on the Zen 4 host, alternating with it, those
# reported 32 tok/s batch-1 decode where the C API decodes at 45, and 31-36 tok/s for 16
# sequences where it decodes at 70-73 (docs/performance.md), so they measured node-llama-cpp's
# per-token overhead as much as llama.cpp.
#
# usage: tools/bench/compare_llamacpp.sh BENCH_DIR MODEL_DIR [ROUNDS]
#   BENCH_DIR: the peer benchmark folder (peer_llamacpp.sh, which installs the npm package);
#   MODEL_DIR: holds config.json,
#   model.safetensors and model-bf16.gguf (make_model.py --out MODEL_DIR)
# env: MLASERVE_BIN_DIR (where mlaserve and mlaserve-bench are; default build/bin),
#      LLAMACPP_PEER (the llamacpp-peer binary; default build/llamacpp-peer/llamacpp-peer),
#      LLAMACPP_CPU_VARIANT (e.g. haswell: llama.cpp runs with only that variant of its CPU
#      backend, from a copy of the peer's folder without the other libggml-cpu-*.so; with
#      MLASERVE_CPU_ISA=avx2 both engines run their AVX2 builds, a stand-in for AVX2-only hosts),
#      THREADS (2), PP (512 prompt tokens), TG (64 generated tokens), DTYPES (mlaserve --dtype
#      values run in turn each round, "float32" by default; "float32 bfloat16" runs both),
#      STREAMS (0: no batched comparison), STREAM_PROMPT (64), STREAM_TG (64), STREAM_DTYPES
#      (the --dtype values the batched comparison serves in turn, "float32" by default),
#      WARMUP (1: an untimed run of each engine before the rounds; 0: none)
set -euo pipefail
bench=$1 model=$2 rounds=${3:-3}
threads=${THREADS:-2} pp=${PP:-512} tg=${TG:-64} dtypes=${DTYPES:-float32}
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin=${MLASERVE_BIN_DIR:-$root/build/bin}
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json")
bos=$((vocab - 2))
ids=$(python3 -c "
import random, sys
r = random.Random(1); v = int(sys.argv[1]); n = int(sys.argv[2])
print(','.join([str(v - 2)] + [str(r.randrange(256, v - 2)) for _ in range(n - 1)]))" "$vocab" "$pp")

streams=${STREAMS:-0} stream_prompt=${STREAM_PROMPT:-64} stream_tg=${STREAM_TG:-64}
stream_dtypes=${STREAM_DTYPES:-float32}
membw_bin=$bench/.cache/bin/membw
if [ ! -x "$membw_bin" ]; then
  mkdir -p "$(dirname "$membw_bin")"
  gcc -O2 -mavx2 -fopenmp "$bench/membw.c" -o "$membw_bin"
fi
peer=${LLAMACPP_PEER:-$root/build/llamacpp-peer/llamacpp-peer}
[ -x "$peer" ] || "$root/tools/bench/build_llamacpp_peer.sh" "$bench" "$(dirname "$peer")" >&2
log=$(mktemp) backend_log=$(mktemp) variant_dir=""
trap 'rm -rf "$log" "$backend_log" $variant_dir' EXIT
if [ -n "${LLAMACPP_CPU_VARIANT:-}" ]; then
  variant_lib=$(dirname "$peer")/libggml-cpu-$LLAMACPP_CPU_VARIANT.so
  if [ ! -f "$variant_lib" ]; then
    echo "LLAMACPP_CPU_VARIANT: no $variant_lib (variants:" \
         "$(cd "$(dirname "$peer")" && ls libggml-cpu-*.so | sed 's/libggml-cpu-//; s/\.so//' | tr '\n' ' '))" >&2
    exit 2
  fi
  variant_dir=$(mktemp -d)
  cp -r "$(dirname "$peer")/." "$variant_dir"
  find "$variant_dir" -name 'libggml-cpu-*.so' ! -name "libggml-cpu-$LLAMACPP_CPU_VARIANT.so" -delete
  peer=$variant_dir/$(basename "$peer")
fi
"$membw_bin" | tee -a "$log"

# One untimed run of each engine first (WARMUP=0: none): the first process to touch memory new
# to a virtual machine can run at half speed while the hypervisor backs it (docs/performance.md,
# "Memory new to the virtual machine"), and mlaserve copies its weights into fresh memory where
# llama.cpp maps a file the page cache already holds.
if [ "${WARMUP:-1}" != 0 ]; then
  "$bin/mlaserve" generate --model="$model" --backend=cpu --threads="$threads" \
      --dtype="${dtypes%% *}" --prompt_ids="$ids" --max_tokens=8 --ignore_eos --output=json \
      --max_num_batched_tokens="$pp" --kv_cache_tokens=$((pp + 72)) >/dev/null 2>&1
  "$peer" --model="$model/model-bf16.gguf" --threads="$threads" --pp=64 --tg=4 --reps=1 \
      >/dev/null 2>&1
fi

for round in $(seq "$rounds"); do
  for dtype in $dtypes; do
    "$membw_bin" | tee -a "$log"
    out=$("$bin/mlaserve" generate --model="$model" --backend=cpu --threads="$threads" \
          --dtype="$dtype" --prompt_ids="$ids" --max_tokens="$tg" --ignore_eos --output=json \
          --max_num_batched_tokens="$pp" --kv_cache_tokens=$((pp + tg + 64)) 2>"$backend_log" \
          | tail -1)
    # The host as the CPU backend saw it (processor, kernel build, threads, decode prefetch).
    grep -m1 ' cpu_backend ' "$backend_log" | sed 's/^[^ ]* cpu_backend /host /' | tee -a "$log" >&2
    python3 - "$out" "$pp" "$tg" "$dtype" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); pp = int(sys.argv[2]); tg = int(sys.argv[3])
print(f"mlaserve pp{pp}_tok_s={pp / d['prefill_seconds']:.2f} "
      f"tg{tg}_tok_s={(d['completion_tokens'] - 1) / d['decode_seconds']:.2f} dtype={sys.argv[4]}")
PY
  done | tee -a "$log"
  "$membw_bin" | tee -a "$log"
  "$peer" --model="$model/model-bf16.gguf" --threads="$threads" --pp="$pp" --tg="$tg" --reps=1 \
      2>/dev/null | tail -1 | tee -a "$log"
done
"$membw_bin" | tee -a "$log"

if [ "$streams" -gt 0 ]; then
  for stream_dtype in $stream_dtypes; do
    port=$((20000 + RANDOM % 20000))
    "$bin/mlaserve" serve --model="$model" --backend=cpu --threads="$threads" \
        --dtype="$stream_dtype" --port="$port" --http_port=0 --metrics_port=0 \
        --max_num_seqs="$streams" 2>/dev/null &
    server=$!
    trap 'kill "$server" 2>/dev/null || true; rm -rf "$log" "$backend_log" $variant_dir' EXIT
    for _ in $(seq 600); do
      "$bin/mlaserve-bench" --target="127.0.0.1:$port" --rpc=get_server_info \
          --num_prompts=1 --concurrency=1 >/dev/null 2>&1 && break
      sleep 0.5
    done
    "$bin/mlaserve-bench" --target="127.0.0.1:$port" --num_prompts="$streams" \
        --concurrency="$streams" --prompt_tokens="$stream_prompt" --output_tokens="$stream_tg" \
        2>/dev/null | awk -v n="$streams" -v d="$stream_dtype" \
          '/^decode tokens\/s \(aggregate\)/ {agg = $NF}
           /^decode tok\/s \(all streams\)/ {all = $NF}
           END {print "mlaserve_streams dtype=" d " streams=" n " decode_tok_s=" agg \
                      " all_streams_tok_s=" all}' \
        | tee -a "$log"
    kill "$server"; wait "$server" 2>/dev/null || true
  done
  "$peer" --model="$model/model-bf16.gguf" --threads="$threads" --sequences="$streams" \
      --pp="$stream_prompt" --tg="$stream_tg" 2>/dev/null | tail -1 | tee -a "$log"
fi

python3 - "$log" "$model/model_info.json" "$threads" <<'PY'
import json, re, shlex, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
info = json.load(open(sys.argv[2]))
threads = sys.argv[3]
per_token = info.get("bytes_per_token_bf16", 0)
# Each engine run is paired with the probe run just before it (this shared host's bandwidth
# moves by 2x within minutes): fraction = weight bytes read per second / that probe. membw
# reads with one and two threads; beyond two, the probe is the CPU backend's own start-up probe
# on the same threads (probe_gbps of its `host` line, just before each mlaserve run).
many_threads = int(threads) > 2
probe, runs = None, []  # runs: (engine, dtype, pp tok/s, tg tok/s, probe)
for line in lines:
    if not many_threads and (m := re.match(r"membw .*read_gb_s_2t=([0-9.]+)", line)):
        probe = float(m.group(1))
    elif many_threads and (m := re.match(r"host .*probe_gbps=([0-9.]+)", line)):
        probe = float(m.group(1))
    elif m := re.match(r"mlaserve pp\d+_tok_s=([0-9.]+) tg\d+_tok_s=([0-9.]+) dtype=(\S+)", line):
        runs.append(("mlaserve", m.group(3), float(m.group(1)), float(m.group(2)), probe))
    elif m := re.match(r"llamacpp pp\d+_tok_s=([0-9.]+) tg\d+_tok_s=([0-9.]+)", line):
        runs.append(("llamacpp", "bf16", float(m.group(1)), float(m.group(2)), probe))
peer = [r for r in runs if r[0] == "llamacpp"]
# Per mlaserve dtype, what the Markdown row at the end summarizes.
rows = {}
for dtype in sorted({r[1] for r in runs if r[0] == "mlaserve"}):
    ours = [r for r in runs if r[0] == "mlaserve" and r[1] == dtype]
    row = rows[dtype] = {"pp": [], "tg": [], "fraction": [], "streams": []}
    for i, (o, p) in enumerate(zip(ours, peer)):
        row["pp"].append(o[2] / p[2])
        row["tg"].append(o[3] / p[3])
        print(f"round {i + 1} dtype={dtype} pp_ratio={o[2] / p[2]:.2f} tg_ratio={o[3] / p[3]:.2f}")
    if per_token:
        row["fraction"] = [r[3] * per_token / 1e9 / r[4] for r in ours if r[4]]
        print(f"bandwidth dtype={dtype} decode_gb_s={statistics.median(r[3] for r in ours) * per_token / 1e9:.1f}"
              f" fraction_of_adjacent_probe={statistics.median(row['fraction']):.2f}")
if per_token and peer:
    fractions = [r[3] * per_token / 1e9 / r[4] for r in peer if r[4]]
    print(f"bandwidth llamacpp decode_gb_s={statistics.median(r[3] for r in peer) * per_token / 1e9:.1f}"
          f" fraction_of_adjacent_probe={statistics.median(fractions):.2f}")
text = "\n".join(lines)
theirs = [float(x) for x in re.findall(r"llamacpp_parallel sequences=\d+ decode_tok_s=([0-9.]+)", text)]
for m in re.finditer(r"mlaserve_streams dtype=(\S+) streams=\d+ decode_tok_s=([0-9.]+) "
                     r"all_streams_tok_s=([0-9.]*)", text):
    if not theirs:
        break
    dtype, agg, steady = m.group(1), float(m.group(2)), m.group(3)
    print(f"streams dtype={dtype} ratio_to_llamacpp={agg / theirs[0]:.2f}")
    if steady:
        print(f"streams_all_decoding dtype={dtype} ratio_to_llamacpp={float(steady) / theirs[0]:.2f}")
        rows.setdefault(dtype, {"pp": [], "tg": [], "fraction": [], "streams": []})["streams"].append(
            float(steady) / theirs[0])
    # Against mlaserve's own one-stream decode in the same activation dtype.
    one = [r[3] for r in runs if r[0] == "mlaserve" and r[1] == dtype]
    if one:
        print(f"streams dtype={dtype} ratio_to_one_stream={agg / statistics.median(one):.2f}")
        if steady:
            print(f"streams_all_decoding dtype={dtype} "
                  f"ratio_to_one_stream={float(steady) / statistics.median(one):.2f}")

# One Markdown row per mlaserve dtype for the per-host table of docs/performance.md: the host as
# the backend logged it, the bandwidth probe's range, and the ranges of this invocation's ratios.
host = next((dict(f.split("=", 1) for f in shlex.split(l[len("host "):]) if "=" in f)
             for l in lines if l.startswith("host ")), {})
probes = {t: [float(m.group(1)) for l in lines if (m := re.match(rf"membw .*read_gb_s_{t}=([0-9.]+)", l))]
          for t in ("1t", "2t")}
def span(xs, f="{:.2f}"):
    if not xs:
        return "–"
    lo, hi = f.format(min(xs)), f.format(max(xs))
    return lo if lo == hi else f"{lo}–{hi}"
print("| host | isa | threads | membw 1t / 2t GB/s | dtype | pp ratio | tg ratio "
      "| decode GB/s / adjacent probe | streams / llama.cpp (all decoding) |")
print("|---|---|---|---|---|---|---|---|---|")
for dtype, row in rows.items():
    print(f"| {host.get('cpu', '?')} ({host.get('vendor', '?')}) | {host.get('isa', '?')} | {threads} "
          f"| {span(probes['1t'], '{:.1f}')} / {span(probes['2t'], '{:.1f}')} | {dtype} "
          f"| {span(row['pp'])} | {span(row['tg'])} | {span(row['fraction'])} | {span(row['streams'])} |")
PY
