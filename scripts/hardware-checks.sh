#!/usr/bin/env bash
# The checks that need an NVIDIA GPU (and the measurements worth taking on its host CPU), from
# an archive of scripts/stage-hardware-checks.sh, in this order, each skipped when the time
# left (SECONDS, default 540, from the start) is too short for it:
#   gpu_tests.log     every *_gpu test binary, MLASERVE_POISON=1
#   golden.log        tests/server/cli/generate_golden_test.py --backends=cpu,cuda
#   cpu_tests.log     the CPU kernel tests of the archive (cpu_*_test: every kernel build the
#                     CPU runs, the AMX tiles included where it has them), the CPU engine's
#                     goldens (deepseek_golden_test, the AMX builds' decode rows on tiles) and
#                     its batch invariance (engine_invariance_test, with every decode row of
#                     the AMX build on tiles: MLASERVE_CPU_DECODE_TILES=all), the simulated-CUDA
#                     and oracle cases left out
#   cuda_perf.log     mlaserve generate --backend=cuda on lite-slice-4 (512-token prompt, 256
#                     tokens), --deterministic on and off alternating, f32 twice and bf16 once
#   sanitizer.log     compute-sanitizer memcheck and racecheck over SANITIZE (default
#                     cuda_mla_split_test_gpu), where compute-sanitizer is installed, each run
#                     while at least 240 s are left, for at most SANITIZE_SECONDS (default 60)
#   kernel_ab.log     where the CPU has AMX: mlaserve-kernel-ab, the amx_bf16 build against
#                     avx512_bf16 on every CPU, f32 and bf16 activations, 40 s each
#   decode_ab.log     where the CPU has AMX: replayed decode steps of 1 and 16 rows
#                     (mlaserve-graph-bench, every CPU), alternating, two rounds: under
#                     --deterministic with decode rows on tiles for no weight, for weights over
#                     the default threshold and for every weight (MLASERVE_CPU_DECODE_TILES
#                     off, unset, all), f32 and bf16 activations; without it (calls of 8-16
#                     rows on tiles) in f32; bf16 with the tiles off and as by default on two
#                     threads
#   cpu_compare.log   tools/bench/compare_llamacpp.sh on every CPU, two rounds, 16 streams
#                     (needs the archive's llama/ and bench/)
#   cpu_profile.log   where the CPU time goes on every CPU (MLASERVE_PROFILE=1): a 512-token
#                     prompt in f32 and bf16 (mlaserve generate), and replayed 16-row decode
#                     steps (mlaserve-graph-bench)
#   cuda_serve.log    mlaserve serve --backend=cuda under mlaserve-bench at 16 and 64 streams,
#                     --deterministic on and off
#   cpu_compare_2t.log  the comparison on two threads, one round
# plus env.log (the GPU, the CPU, where cuBLAS was found). lite-slice-4 is written under
# MODEL (default /tmp/lite-slice-4) by the archive's make_model.py unless it is there already.
# SKIP: names of steps to leave out, among gpu_tests, golden, cpu_tests, cuda_perf, sanitizer,
# kernel_ab, decode_ab, cpu_compare, cpu_profile, cuda_serve and cpu_compare_2t.
# Run from the root of a checkout of the commit the archive was built from.
# usage: [SKIP="STEP ..."] scripts/hardware-checks.sh ARCHIVE OUT_DIR [SECONDS]
set -u
[ $# -ge 2 ] || { echo "usage: $0 ARCHIVE OUT_DIR [SECONDS]" >&2; exit 2; }
start=$SECONDS
archive=$(realpath "$1") out=$(realpath -m "$2") budget=${3:-540}
left() { echo $((budget - (SECONDS - start))); }
wanted() { case " ${SKIP:-} " in *" $1 "*) return 1 ;; esac; }
cd "$(dirname "$0")/.."
root=$PWD
m=$(mktemp -d)
trap 'rm -rf "$m"' EXIT
mkdir -p "$out"
tar -C "$m" -xJf "$archive" || exit 1
bin=$m/bin
cublas=$( (ldconfig -p | awk '/libcublas\.so\.13 /{print $NF}'
          find /usr/local/cuda* /usr/lib /usr/local/lib /opt -name 'libcublas.so.13' 2>/dev/null) | head -1)
export LD_LIBRARY_PATH=$m/lib:${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|L2|L3|NUMA node\(s\)'
  grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  echo "cublas=$cublas"
  ldd "$bin/mlaserve_cuda_plugin.so" "$bin/mlaserve" | grep -E 'not found|cublas|cudart'
} > "$out/env.log" 2>&1

model=${MODEL:-/tmp/lite-slice-4}
py=python3; python3 -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
mk=
if [ ! -f "$model/config.json" ] && [ -f "$m/bench/make_model.py" ]; then
  ($py "$m/bench/make_model.py" --preset lite-slice --layers 4 --out "$model" > /dev/null 2>&1
   echo "make_model rc=$? at $((SECONDS - start)) s" >> "$out/env.log") &
  mk=$!
fi

# Runs the test binary $1 (further arguments passed on; the caller's environment plus
# MLASERVE_POISON=1) and prints its counts, failures and exit status.
run_test() {
  local t0=$SECONDS rc
  MLASERVE_POISON=1 MLASERVE_TEST_DATA=$root/tests/data timeout 150 "$@" > "$m/test.log" 2>&1
  rc=$?
  echo "== $(basename "$1") rc=$rc $((SECONDS - t0)) s"
  grep -E '^\[==========\] [0-9]+ tests? from .* ran|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+ tests?,' "$m/test.log"
  grep -E -A12 '^\[  FAILED  \]|Failure$' "$m/test.log" | head -60
  [ $rc -ne 0 ] && tail -20 "$m/test.log"
}

wanted gpu_tests && for t in "$bin"/*_gpu; do
  run_test "$t"
done > "$out/gpu_tests.log" 2>&1

if wanted golden; then
  timeout 150 python3 tests/server/cli/generate_golden_test.py --mlaserve="$bin/mlaserve" \
      --models=tests/data/models --backends=cpu,cuda > "$out/golden.log" 2>&1
  echo "golden rc=$? at $((SECONDS - start)) s" >> "$out/golden.log"
fi

wanted cpu_tests && for t in "$bin"/cpu_*_test "$bin"/deepseek_golden_test \
    "$bin"/engine_invariance_test; do
  [ -x "$t" ] || continue
  [ "$(left)" -lt 200 ] && { echo "skipped $(basename "$t"): $(left) s left"; continue; }
  tiles= filter='-*cuda*:*Cuda*'
  case $(basename "$t") in
    deepseek_golden_test) filter='*cpu*' ;;
    engine_invariance_test) tiles=all filter='*Cpu*:EngineInvarianceTest.*' ;;
  esac
  MLASERVE_CPU_DECODE_TILES=$tiles run_test "$t" --gtest_filter="$filter"
done > "$out/cpu_tests.log" 2>&1

[ -n "$mk" ] && wait "$mk"
if [ ! -f "$model/config.json" ]; then
  echo "no model at $model: the measurements are skipped" >> "$out/env.log"
  exit 0
fi
ids=$(python3 -c "
import json, random, sys
v = json.load(open(sys.argv[1]))['vocab_size']; r = random.Random(1)
print(','.join([str(v - 2)] + [str(r.randrange(256, v - 2)) for _ in range(511)]))" "$model/config.json")

wanted cuda_perf && for round in 1 2; do
  for dtype in float32 bfloat16; do
    [ "$dtype" = bfloat16 ] && [ "$round" = 2 ] && continue
    for det in true false; do
      [ "$(left)" -lt 300 ] && { echo "skipped: $(left) s left"; break 3; }
      o=$(timeout 60 "$bin/mlaserve" generate --backend=cuda --model="$model" --dtype=$dtype \
            --deterministic=$det --prompt_ids="$ids" --max_tokens=256 --ignore_eos \
            --output=json 2> "$m/generate.err" | tail -1)
      python3 - "$o" "$dtype" "$det" <<'PY' 2>/dev/null || tail -3 "$m/generate.err"
import json, sys
d = json.loads(sys.argv[1])
print(f"cuda generate dtype={sys.argv[2]} deterministic={sys.argv[3]} "
      f"prefill_ms={1e3 * d['prefill_seconds']:.1f} "
      f"decode_tok_s={(d['completion_tokens'] - 1) / d['decode_seconds']:.1f}")
PY
    done
  done
done > "$out/cuda_perf.log" 2>&1

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$sanitizer" ] && wanted sanitizer && [ "$(left)" -gt 330 ]; then
  for name in ${SANITIZE:-cuda_mla_split_test_gpu}; do
    for tool in memcheck racecheck; do
      [ "$(left)" -lt 240 ] && { echo "$name $tool skipped: $(left) s left"; continue; }
      MLASERVE_POISON=1 MLASERVE_TEST_DATA=$root/tests/data timeout "${SANITIZE_SECONDS:-60}" \
          "$sanitizer" --tool $tool --error-exitcode 9 "$bin/$name" > "$m/sanitizer.log" 2>&1
      echo "$name $tool rc=$?"; tail -2 "$m/sanitizer.log"
    done
  done > "$out/sanitizer.log" 2>&1
fi

if grep -qw amx_bf16 /proc/cpuinfo && wanted kernel_ab && [ "$(left)" -gt 180 ]; then
  for dtype in float32 bfloat16; do
    timeout 60 "$bin/mlaserve-kernel-ab" --builds=amx_bf16,avx512_bf16 --dtype=$dtype --seconds=40
    echo "kernel_ab dtype=$dtype rc=$? at $((SECONDS - start)) s"
  done > "$out/kernel_ab.log" 2>&1
fi

if grep -qw amx_bf16 /proc/cpuinfo && wanted decode_ab && [ "$(left)" -gt 150 ]; then
  for round in 1 2; do
    for v in "true float32 off" "true float32 -" "true float32 all" "true bfloat16 off" \
        "true bfloat16 -" "true bfloat16 all" "false float32 -" "true bfloat16 off 2" \
        "true bfloat16 - 2"; do
      set -- $v
      [ "$(left)" -lt 40 ] && { echo "skipped: $(left) s left"; break 2; }
      threads=${4:-$(nproc)}
      echo "== deterministic=$1 dtype=$2 MLASERVE_CPU_DECODE_TILES=$3 threads=$threads round=$round"
      tiles=$3; [ "$tiles" = - ] && tiles=
      MLASERVE_CPU_DECODE_TILES=$tiles timeout 40 "$bin/mlaserve-graph-bench" --model="$model" \
          --batches=1,16 --rounds=1 --steps=6 --threads="$threads" --deterministic=$1 \
          --dtype=$2 2>&1 | tail -3
    done
  done > "$out/decode_ab.log" 2>&1
  echo "decode_ab at $((SECONDS - start)) s" >> "$out/decode_ab.log"
fi

cpu_compare() {  # THREADS ROUNDS STREAMS
  THREADS=$1 DTYPES="float32 bfloat16" STREAMS=$3 STREAM_DTYPES="float32 bfloat16" \
    MLASERVE_BIN_DIR=$bin LLAMACPP_PEER=$m/llama/llamacpp-peer \
    timeout $(($(left) - 20)) tools/bench/compare_llamacpp.sh "$m/bench" "$model" "$2"
  echo "compare threads=$1 rc=$? at $((SECONDS - start)) s"
}
can_compare=$([ -x "$m/llama/llamacpp-peer" ] && [ -x "$m/bench/.cache/bin/membw" ] && echo 1)
[ -n "$can_compare" ] && wanted cpu_compare && [ "$(left)" -gt 200 ] && cpu_compare "$(nproc)" 2 16 > "$out/cpu_compare.log" 2>&1

if wanted cpu_profile && [ "$(left)" -gt 100 ]; then
  for dtype in float32 bfloat16; do
    echo "== 512-token prompt, dtype=$dtype, $(nproc) threads"
    MLASERVE_PROFILE=1 timeout 40 "$bin/mlaserve" generate --backend=cpu --model="$model" \
        --threads="$(nproc)" --dtype=$dtype --prompt_ids="$ids" --max_tokens=1 \
        --max_num_batched_tokens=512 --kv_cache_tokens=640 2>&1 > /dev/null \
      | sed -n '/op profile/,$p'
  done
  echo "== 16 decode rows, eager and replayed (the graph bench profiles both), $(nproc) threads"
  timeout 60 "$bin/mlaserve-graph-bench" --model="$model" --batches=16 --rounds=1 --steps=5 \
      --threads="$(nproc)" 2>&1 | sed -n '/op profile/,$p'
  echo "cpu_profile at $((SECONDS - start)) s"
fi > "$out/cpu_profile.log" 2>&1

wanted cuda_serve && for det in true false; do
  [ "$(left)" -lt 70 ] && { echo "skipped: $(left) s left"; break; }
  port=$((20000 + RANDOM % 20000))
  "$bin/mlaserve" serve --backend=cuda --model="$model" --deterministic=$det --port=$port \
      --http_port=0 --metrics_port=0 --max_num_seqs=64 2> "$m/serve.err" &
  server=$!
  for _ in $(seq 120); do
    kill -0 $server 2> /dev/null || break
    "$bin/mlaserve-bench" --target=127.0.0.1:$port --rpc=get_server_info --num_prompts=1 \
        --concurrency=1 > /dev/null 2>&1 && break
    sleep 0.5
  done
  if ! kill -0 $server 2> /dev/null; then
    echo "serve deterministic=$det did not start:"; tail -3 "$m/serve.err"; continue
  fi
  for c in 16 64; do
    echo "serve deterministic=$det concurrency=$c"
    timeout 40 "$bin/mlaserve-bench" --target=127.0.0.1:$port --prompt_tokens=512 \
        --output_tokens=128 --concurrency=$c --num_prompts=$((2 * c)) 2>&1 \
      | grep -E 'decode tok/s \(all streams\)|^ITL|^TTFT|requests '
  done
  kill $server; wait $server 2> /dev/null
done > "$out/cuda_serve.log" 2>&1

[ -n "$can_compare" ] && wanted cpu_compare_2t && [ "$(left)" -gt 80 ] && cpu_compare 2 1 0 > "$out/cpu_compare_2t.log" 2>&1
echo "done at $((SECONDS - start)) s" >> "$out/env.log"
