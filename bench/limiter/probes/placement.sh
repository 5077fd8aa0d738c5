#!/usr/bin/env bash
# In a graph-replay mix one tenant's replays can take ~6 % longer
# on the GPU for its whole life (graph.py --trace). Is that the process
# (where its memory landed) or the company it keeps? No cushare here:
#   seq       N processes start and allocate together, then each replays
#             ALONE in turn (--start-mono staggered);
#   together  N processes start together and replay together (the
#             driver's own time-slicing);
#   stagger   as seq, but each process starts STAGGER seconds (default 7)
#             after the one before, so it allocates alone, beside the
#             memory the earlier ones hold.
# Per process: its replays' GPU time (p50) and rate, in OUT/summary.txt.
#   bench/limiter/probes/placement.sh OUT_DIR [MODE...]   (default: seq together)
# RUNS (default 3), N (3), WIDTHS (default 2048: graph.py --width; 4 layers
# of WIDTH^2 fp16 weights, 32 MiB at 2048 against the H200's 50 MiB L2).
set -u
[ $# -ge 1 ] || { sed -n 2,16p "$0"; exit 2; }
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
graph=$here/../graph.py
secs=${SECS:-2}
mono_in() { python3 -c "import time; print(time.monotonic_ns() + int($1 * 1e9))"; }
p50() { # TRACE: the median GPU time of its measured replays, in us
    python3 "$here/edge_gaps.py" "$1" | sed -n 's/.*on the GPU: mean .* (p50 \([0-9.]*\),.*/\1/p'
}
: > "$OUT/summary.txt"
modes=${*:-seq together}
for mode in $modes; do
    for w in ${WIDTHS:-2048}; do
        for run in $(seq "${RUNS:-3}"); do
            d=$OUT/$mode-w$w-$run
            mkdir -p "$d"
            n=${N:-3} gap=0
            [ "$mode" = stagger ] && gap=${STAGGER:-7}
            start=$(mono_in $((8 + n * gap)))
            pids=()
            for k in $(seq 0 $((n - 1))); do
                at=$start
                [ "$mode" != together ] && at=$((start + k * (secs + 2) * 1000000000))
                python3 "$graph" --width "$w" --secs "$secs" --warmup 1 --start-mono "$at" \
                    --trace "$d/p$k.trace" > "$d/p$k.log" 2>&1 &
                pids+=($!)
                sleep "$gap"
            done
            wait "${pids[@]}"
            line="$mode width $w run $run:"
            for k in $(seq 0 $((n - 1))); do
                rate=$(sed -n 's/^RESULT .* rate=\([0-9.]*\).*/\1/p' "$d/p$k.log")
                line+=" p$k ${rate:-?}/s $(p50 "$d/p$k.trace") us;"
            done
            echo "$line" | tee -a "$OUT/summary.txt"
            rm -f "$d"/*.trace
        done
    done
done
