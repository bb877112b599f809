#!/usr/bin/env bash
# The CPU backend's default thread count under a cgroup CPU limit: alternating rounds of
# `mlaserve generate` inside a new cgroup with the given quota, once with the default
# (--threads=0: capped by the limit) and once with one thread per processor of the affinity mask
# (what the default ignores the limit to do), printing prompt and decode tokens/s of each round.
# Needs root and a writable cgroup file system (v1 cpu controller, or v2 with the cpu
# controller enabled for the root's children); the cgroup is removed at the end.
#   tools/bench/cgroup_threads_ab.sh BIN_DIR MODEL_DIR QUOTA_CPUS [ROUNDS] [PROMPT_TOKENS]
set -euo pipefail
bin=$(cd "$1" && pwd) model=$2 cpus=$3 rounds=${4:-2} prompt=${5:-128}
name=mlaserve_threads_ab_$$
period=100000
quota=$(/usr/bin/python3 -c "print(round($cpus * $period))")
if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  dir=/sys/fs/cgroup/$name
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
  mkdir "$dir"
  echo "$quota $period" > "$dir/cpu.max"
elif [[ -d /sys/fs/cgroup/cpu ]]; then
  dir=/sys/fs/cgroup/cpu/$name
  mkdir "$dir"
  echo "$period" > "$dir/cpu.cfs_period_us"
  echo "$quota" > "$dir/cpu.cfs_quota_us"
else
  echo "no writable cgroup cpu controller found" >&2
  exit 1
fi
trap 'rmdir "$dir"' EXIT
mask=$(/usr/bin/python3 -c "import os; print(len(os.sched_getaffinity(0)))")
ids=$(seq -s, 100 $((99 + prompt)))
for ((r = 1; r <= rounds; ++r)); do
  for threads in 0 "$mask"; do
    sh -c "echo \$\$ > '$dir/cgroup.procs' && exec '$bin/mlaserve' generate --model='$model' \
      --backend=cpu --threads=$threads --prompt_ids=$ids --max_tokens=32 --ignore_eos \
      --output=json --max_num_batched_tokens=512 --kv_cache_tokens=640" 2>&1 |
      /usr/bin/python3 -c '
import json, re, sys
lines = sys.stdin.read().splitlines()
started = [l for l in lines if " cpu_backend " in l]
ran = re.search(r" threads=(\d+) threads_source=(\S+)", started[0]).groups() if started else "??"
j = json.loads([l for l in lines if l.startswith("{")][-1])
print("limit %s CPUs, --threads=%-3s (ran %s, %s): prompt %7.1f tok/s  decode %6.2f tok/s" % (
    sys.argv[1], sys.argv[2], ran[0], ran[1], j["prompt_tokens"] / j["prefill_seconds"],
    (j["completion_tokens"] - 1) / j["decode_seconds"]))' "$cpus" "$threads"
  done
done
