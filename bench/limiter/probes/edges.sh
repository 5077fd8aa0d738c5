#!/usr/bin/env bash
# Where a time-sliced mix loses GPU time at window edges. One
# device call:
#   bench/limiter/probes/edges.sh BUILD_DIR OUT_DIR [VARIANT...]
# Builds edge_trace (nvcc) and cushare, runs edge_trace alone without
# cushare (the baseline), then per VARIANT (NAME=KEY=VALUE[,KEY=VALUE...],
# environment for the tenants; default: base) the MIX (default 20+30+50)
# under `cushare run --sm X --policy force`, all tenants started together,
# and merges their traces (edge_gaps.py). OUT/summary.txt: per run the
# throughput kept (sum of the tenants' rates over the baseline's) and where
# the idle GPU time went; OUT/NAME-N/ the tenants' logs and the analysis.
# RUNS (default 1), SECS (3), MIX; TRACER=graph traces
# bench/limiter/graph.py itself (its --trace) instead of edge_trace.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../../../tests/gpu/common.sh"
gpu_args 13 "$0" "$@"
shift 2
variants=${*:-base=CUSHARE_SM_PERIOD_US=50000}
cd "$GPU_ROOT" || exit 1
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli || exit 1
if [ "${TRACER:-}" = graph ]; then
    tracer=(python3 "$GPU_ROOT/bench/limiter/graph.py")
else
    tracer=("$B/edge_trace")
    "$CUDA_HOME/bin/nvcc" -O2 -o "$B/edge_trace" "$here/edge_trace.cu" >> "$OUT/build.log" 2>&1 ||
        { echo "edge_trace: nvcc failed (log $OUT/build.log)"; exit 1; }
fi
secs=${SECS:-3}
IFS=+ read -r -a limits <<< "${MIX:-20+30+50}"
mono_in() { python3 -c "import time; print(time.monotonic_ns() + int($1 * 1e9))"; }
rate() { sed -n 's/^RESULT .* rate=\([0-9.]*\).*/\1/p' "$1"; }

mkdir -p "$OUT/native"
"${tracer[@]}" --secs "$secs" --warmup 1 --trace "$OUT/native/native.trace" > "$OUT/native/native.log" 2>&1
native=$(rate "$OUT/native/native.log")
python3 "$here/edge_gaps.py" --label native "$OUT/native/native.trace" > "$OUT/native/gaps.txt"
rm -f "$OUT/native/native.trace"
{ echo "native: $native replays/s"; cat "$OUT/native/gaps.txt"; } | tee "$OUT/summary.txt"
[ -n "$native" ] || exit 1

for v in $variants; do
    name=${v%%=*} envs=${v#*=}
    IFS=, read -r -a kv <<< "$envs"
    for run in $(seq "${RUNS:-1}"); do
        d=$OUT/$name-$run
        mkdir -p "$d"
        start=$(mono_in 6)
        pids=()
        for pct in "${limits[@]}"; do
            env CUSHARE_LOG_LEVEL=debug "${kv[@]}" "$B/cushare" run --sm "$pct" --policy force -- \
                "${tracer[@]}" --secs "$secs" --warmup 1 --start-mono "$start" \
                --trace "$d/sm$pct.trace" > "$d/sm$pct.log" 2>&1 &
            pids+=($!)
        done
        wait "${pids[@]}"
        kept=0 shares=""
        for pct in "${limits[@]}"; do
            r=$(rate "$d/sm$pct.log")
            s=$(python3 -c "print(f'{100 * ${r:-0} / $native:.1f}')")
            shares+=" sm$pct=$s%"
            kept=$(python3 -c "print(f'{$kept + $s:.1f}')")
        done
        python3 "$here/edge_gaps.py" --label "$name-$run" --timeline "$d/timeline.csv" \
            "$d"/sm*.trace > "$d/gaps.txt"
        { echo "== $name-$run ($envs): kept $kept % of native:$shares"; cat "$d/gaps.txt"; } |
            tee -a "$OUT/summary.txt"
        rm -f "$d"/*.trace
    done
done
