#!/usr/bin/env bash
# Decode throughput with metrics on vs off (docs/performance.md, "Metrics cost"): two
# `mlaserve serve` daemons with the same flags, one with --metrics_port=0 (metrics off) and one
# with metrics on and scraped every second, benchmarked in alternating rounds by mlaserve-bench
# (one daemon idle while the other runs). Prints output tokens/s per round, the medians and
# their ratio.
#
# Usage: tools/bench/metrics_ab.sh [BIN_DIR=build/bin] [ROUNDS=6] [-- extra serve flags]
set -euo pipefail
bin=${1:-build/bin}
rounds=${2:-6}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
off_port=$(free_port); on_port=$(free_port); metrics_port=$(free_port)
serve=(serve --host=127.0.0.1 --backend=cpu --threads=1 "$@")
"$bin/mlaserve" "${serve[@]}" --port="$off_port" --metrics_port=0 2>"$work/off.log" & pids+=($!)
"$bin/mlaserve" "${serve[@]}" --port="$on_port" --metrics_host=127.0.0.1 \
  --metrics_port="$metrics_port" 2>"$work/on.log" & pids+=($!)
until grep -q '"\?ready' "$work/off.log" && grep -q '"\?ready' "$work/on.log"; do sleep 0.2; done
# Scraped like Prometheus with a 1 s interval.
( while true; do curl -s -o /dev/null "http://127.0.0.1:$metrics_port/metrics" || true; sleep 1; done ) &
pids+=($!)

bench() {
  # The JSON follows the table on stdout.
  "$bin/mlaserve-bench" --target="127.0.0.1:$1" --num_prompts=256 --concurrency=8 \
    --prompt_tokens=32 --output_tokens=128 --json_output=- 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; t=sys.stdin.read(); print("%.1f" % json.loads(t[t.index("\n{")+1:])["output_tokens_per_s"])'
}
bench "$off_port" >/dev/null; bench "$on_port" >/dev/null  # warm-up
off=(); on=()
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then a=$(bench "$off_port"); b=$(bench "$on_port"); else b=$(bench "$on_port"); a=$(bench "$off_port"); fi
  off+=("$a"); on+=("$b")
  echo "round $r: off $a tok/s, on $b tok/s"
done
/usr/bin/python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
m_off, m_on = statistics.median(off), statistics.median(on)
print("median: off %.1f tok/s, on %.1f tok/s, on/off %.4f (%+.2f%%)" % (m_off, m_on, m_on / m_off, 100 * (m_on / m_off - 1)))
PY
