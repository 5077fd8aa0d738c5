#!/usr/bin/env bash
# A tenant whose first launches were measured beside a busy context, then
# runs alone: does it get its cap, or is it charged for the neighbour's
# time slices long after? One device call, several builds alternated:
#   bench/limiter/probes/first_sample.sh OUT_DIR NAME=SOURCE_DIR [NAME=SOURCE_DIR...]
# Each SOURCE_DIR (a copy of this repository) is built into build-NAME.
# Per repetition (REPS, default 3) and build: a native hog (16384^2 bf16
# matmuls, about 13 ms each) runs for HOG_SECS (5); two seconds in, the
# tenant starts under `cushare run --sm 25 --policy force` (4096^2
# matmuls): its set-up's first products are measured beside the hog's
# slices. It then waits for the hog to end and a rest of REST seconds (2),
# and measures SECS (3) after WARMUP (0.2). A native run of the tenant
# alone gives the reference speed. OUT/summary.txt: per run, the tenant's
# rate and its % of alone (its cap is 25 %); OUT/NAME-R.log: its
# limiter's debug lines.
set -u
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR NAME=SOURCE_DIR..." >&2; exit 2; }
OUT=$1
shift
root=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$OUT"
: > "$OUT/summary.txt"
REPS=${REPS:-3} HOG_SECS=${HOG_SECS:-5} REST=${REST:-2} SECS=${SECS:-3} WARMUP=${WARMUP:-0.2}
PY=(python3 "$root/bench/limiter/matmul.py")
# shellcheck source=bench/limiter/probes/build_each.sh
. "$(dirname "$0")/build_each.sh"
build_each "$OUT" "libcushare cushare_cli" "$@" || exit 1
rate() { sed -n 's/^RESULT .* rate=\([0-9.]*\).*/\1/p'; }
mono_ns() { python3 -c 'import time; print(time.clock_gettime_ns(time.CLOCK_MONOTONIC))'; }
alone=$("${PY[@]}" --secs "$SECS" --warmup 1 2>/dev/null | rate)
echo "tenant alone (native): $alone products/s" | tee -a "$OUT/summary.txt"
for r in $(seq 1 "$REPS"); do
    for b in "$@"; do
        name=${b%%=*} build=$root/build-${b%%=*}
        "${PY[@]}" --n 16384 --batch 1 --secs "$HOG_SECS" --warmup 0 > /dev/null 2>&1 &
        hog=$!
        sleep 2
        # The tenant starts measuring REST seconds after the hog's last product
        # at the latest (the hog's set-up takes a few seconds of its own).
        start=$(( $(mono_ns) + (HOG_SECS + 4 + ${REST%.*}) * 1000000000 ))
        CUSHARE_LOG_LEVEL=debug "$build/cushare" run --sm 25 --policy force -- \
            "${PY[@]}" --start-mono "$start" --warmup "$WARMUP" --secs "$SECS" > "$OUT/$name-$r.log" 2>&1 &
        tenant=$!
        wait "$hog"
        wait "$tenant"
        got=$(rate < "$OUT/$name-$r.log")
        pct=$(python3 -c "print(f'{100 * float(\"${got:-0}\") / float(\"$alone\"):.1f}')")
        echo "rep $r $name: $got products/s, $pct % of alone (cap 25)" | tee -a "$OUT/summary.txt"
    done
done
