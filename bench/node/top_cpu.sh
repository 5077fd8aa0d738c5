#!/usr/bin/env bash
# CPU cost of the node view: `cushare top` (live mode, in a pseudo-terminal)
# refreshing at 1 Hz over N tenants (default 100) on the fake driver, each
# an idle limiter_worker holding a slot in its own ledger.
#   bench/node/top_cpu.sh BUILD_DIR [N] [SECS]
# Prints: RESULT tenants=N secs=S cpu_pct=P (user+system of top / wall).
set -eu
B=$(cd "${1:?BUILD_DIR}" && pwd); N=${2:-100}; SECS=${3:-30}
T=$B/tmp/bench_node; rm -rf "$T"; mkdir -p "$T/reg"; chmod 1777 "$T/reg"
export CUSHARE_REGISTRY=$T/reg/cushare-ledgers CUSHARE_LOG_LEVEL=error
export LD_LIBRARY_PATH=$B/fakecuda FAKECUDA_STATE=$T/fake.state
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for i in $(seq 1 "$N"); do
  CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/t$i.ledger CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_SM_LIMIT=10 \
    LD_PRELOAD=$B/libcushare.so "$B/limiter_worker" --mode idle --secs $((SECS + 120)) >/dev/null 2>&1 &
  pids+=($!)
done
for _ in $(seq 1 600); do
  n=$("$B/cushare" status --json --no-scan 2>/dev/null | grep -o '"state":"live"' | wc -l)
  [ "$n" -ge "$N" ] && break; sleep 0.2
done
[ "$n" -ge "$N" ] || { echo "only $n of $N tenants came up" >&2; exit 1; }
mkfifo "$T/keys"; exec 3<>"$T/keys"
script -qfec "$B/cushare top --no-scan --interval 1000" /dev/null <"$T/keys" >/dev/null 2>&1 &
pids+=($!)
sleep 2
top=$(pgrep -n -f "^$B/cushare top --no-scan")
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$top/stat"; }
c0=$(cpu); t0=$(date +%s.%N)
sleep "$SECS"
c1=$(cpu); t1=$(date +%s.%N)
echo q >&3
awk -v c="$((c1 - c0))" -v hz="$tick" -v a="$t0" -v b="$t1" -v n="$N" \
  'BEGIN { printf "RESULT tenants=%d secs=%.1f cpu_pct=%.3f\n", n, b - a, 100 * c / hz / (b - a) }'
