#!/usr/bin/env bash
# Does one graph-replay process run at the same speed as the next,
# with no cushare at all? In the 20/30/50 mixes one tenant of a run can be
# ~7 % slower for the whole run while its charged GPU time is normal. This
# runs bench/limiter/graph.py alone, natively: REPS times as is, after a
# process took MiB of GPU memory first (the model lands elsewhere), and
# pinned to single CPUs. One line per run in OUT/summary.txt.
# About 100 s (every run starts Python and torch).
#   bench/limiter/probes/speed.sh OUT_DIR
set -u
[ $# -ge 1 ] || { sed -n 2,9p "$0"; exit 2; }
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../../.." && pwd)
graph() { python3 "$root/bench/limiter/graph.py" --secs "${SECS:-2}" --warmup 1 2>&1 |
    sed -n 's/^RESULT .* rate=\([0-9.]*\).*/\1/p'; }
{
    for i in $(seq "${REPS:-3}"); do echo "plain $i: $(graph)"; done
    for mib in 24 40 72 136 520; do
        python3 -c "import torch, time, sys; x = torch.empty($mib << 20, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize(); print('held', flush=True); time.sleep(60)" > "$OUT/hold.txt" 2>&1 &
        holder=$!
        for _ in $(seq 100); do grep -q held "$OUT/hold.txt" && break; sleep 0.1; done
        echo "after $mib MiB held: $(graph)"
        kill "$holder"; wait "$holder" 2> /dev/null
    done
    for cpu in 0 7 15; do echo "on cpu $cpu: $(taskset -c "$cpu" bash -c "$(declare -f graph); root=$root; graph")"; done
} | tee "$OUT/summary.txt"
