#!/usr/bin/env bash
# Fair-share acceptance of the compute limiter (docs/limiter.md, "What a
# share means"): a share is a floor under contention, idle capacity goes to
# whoever can use it, priority protects latency, force still caps. Runs
# bench/limiter/fair.py (three repetitions, configurations alternated,
# medians with their spread, verdicts on the worst repetition) over:
#   decode+decode      two HF decode loops (~1 B Llama, bf16, batch 32,
#                      prompt 128, 32 new tokens per call) at 25 and 75
#   decode+hog         a decode loop (25) beside an 8192^2 bf16 matmul (75);
#                      also with the decode at a higher CUDA_TASK_PRIORITY
#   priority sweep     the prioritised decode beside matmul hogs of
#                      2048^2, 4096^2, 8192^2 and 16384^2 (kernels of about
#                      0.03, 0.2, 1.6 and 13 ms): the bound a kernel that
#                      cannot be preempted puts on the decode's latency
#   graph x4           four small CUDA-graph tenants at 25 each
#   matmul 25+75       4096^2 bf16 matmuls, saturating
#   matmul 20/30/50    the same, three tenants
# Each configuration (alone, no limiter = plain time-slicing, default,
# priority, force) is measured in the same run; every tenant is one warm
# process measuring one window per configuration and repetition.
#
# The whole set takes two GPU calls (each well inside 8 minutes):
#   PART=1   decode+decode, decode+hog, the priority sweep
#   PART=2   graph x4, matmul 25+75, matmul 20/30/50, then the no-regression
#            checks: the empty-launch cost (limiter_workload launchcost
#            natively and under cushare without a limit: the median of 16
#            alternated pairs on the last CPU, bench/limiter/launch_pairs.sh;
#            one run each at --sm 50 and --sm 99 force, not judged) and
#            start-up (cushare bench init -n 300 --baseline --repeat 6:
#            the median p99 ratio of the pairs after the first,
#            bench/limiter/init_pairs.py)
#   unset    everything (the fake driver)
#
# Run from the repository root after `make` (uses ./build):
#   PART=1 OUT=/some/dir tests/gpu/limiter/fair.sh        on the GPU machine
#   FAKE=1 OUT=/tmp/fair tests/gpu/limiter/fair.sh        on the fake driver
# Optional: REPS (3), GROUP (1: repetitions per judged run, whose figures
# are the medians of its repetitions; REPS=9 GROUP=3 judges the worst of
# three runs of three alternated repetitions), SECS (3), WARMUP (seconds before each window is
# measured: 3 for PART=2, whose saturating mixes are judged once the
# default policy has engaged, which takes 1-1.5 s after tenants start
# together; 1 otherwise), SETTLE (1 s of rest between
# windows), BUDGET (seconds of fair.py; 420 / 330 for the parts, 0 = none), MIXES
# ("a,b": mix names above), SWEEP ("hog2048,hog4096,hog,hog16384"; "" for
# none), FAIR_FORCE=0 (leave out the force runs), OVERHEAD=0 (PART=2
# without the no-regression checks), NODE_TRACE=1 (node.jsonl:
# the node view every 0.5 s), FRESH=1 (start each window's tenants for it
# instead of warm ones: slow, to check that idle tenants change nothing),
# PIN=0 (leave the tenants unpinned; on the GPU each tenant of a mix gets
# physical cores of its own by default, tenant i of every configuration
# the same ones, so a decode loop's speed does not depend on which cores
# the scheduler gave it or on a neighbour's hyper-thread),
# SPLIT ("a,b": non-saturating mixes that also run each tenant alone
# under cushare beside native others: whose cushare costs a tenant what
# default costs it; not judged), AGAIN=1 (every mix also measures time-
# slicing a second time in a window of its own, set against the first as
# default is judged: the A/A reading of this machine's noise; not judged),
# DECODE=stand-in (on the GPU, limiter_workload decode in place of the
# Hugging Face loop: see below), GPU_TRACE=1 (gpu-trace.csv: SM clock, power and
# temperature every second, nvidia-smi).
# Everything lands in $OUT: summary.txt (PASS/FAIL, the verdict per target
# as the acceptance words it, the tables), fair-bench.txt (tables and
# verdicts), fair-bench.csv (every window, with the steal over each
# tenant's CPUs and the decode's CPU use), fair-bench.log (every tenant's
# output), progress.txt (fair.py's progress and errors), overhead.txt
# (PART=2: launch cost and start-up; launch_pairs.txt and init.txt: their
# runs), nvidia-smi.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/limiter-fair}
BUILD=${BUILD:-$ROOT/build}
PART=${PART:-}
REPS=${REPS:-3}
GROUP=${GROUP:-1}
SECS=${SECS:-3}
case "$PART" in 2) DEF_WARMUP=3 ;; *) DEF_WARMUP=1 ;; esac
WARMUP=${WARMUP:-$DEF_WARMUP}
SETTLE=${SETTLE:-1}
case "$PART" in
1) DEF_MIXES="decode+decode,decode+hog"; DEF_SWEEP="hog2048,hog4096,hog,hog16384" ;;
2) DEF_MIXES="graph x4,matmul 25+75,matmul 20/30/50"; DEF_SWEEP="" ;;
"") DEF_MIXES="decode+decode,decode+hog,graph x4,matmul 25+75,matmul 20/30/50"
    DEF_SWEEP="hog2048,hog4096,hog,hog16384" ;;
*) echo "fair.sh: PART must be 1, 2 or unset (everything), not '$PART'" >&2; exit 2 ;;
esac
MIXES=${MIXES-$DEF_MIXES}
SWEEP=${SWEEP-$DEF_SWEEP}
# fair.py's seconds: a part ends well inside a 560 s GPU call after a
# one-minute build (PART=2 then spends about a minute on the overhead checks).
case "$PART" in 1) DEF_BUDGET=420 ;; 2) DEF_BUDGET=330 ;; *) DEF_BUDGET=0 ;; esac
BUDGET=${BUDGET:-$DEF_BUDGET}
mkdir -p "$OUT"
T0=$(date +%s)

# The no-regression checks (PART=2 and the whole set, unless OVERHEAD=0).
# Their start-up check runs `cushare bench init`, which needs the harness
# beside cushare: missing, it would end the run with no verdict.
OVERHEAD_RUNS=0
[ "$PART" != 1 ] && [ "${OVERHEAD:-1}" != 0 ] && OVERHEAD_RUNS=1
NEED=("$BUILD/cushare" "$BUILD/limiter_workload")
[ $OVERHEAD_RUNS = 1 ] && NEED+=("$BUILD/cushare-bench")
for f in "${NEED[@]}"; do
    [ -x "$f" ] || { echo "FAIL: $f missing: run make first" | tee "$OUT/summary.txt"; exit 1; }
done

W=()
if [ -n "${FAKE:-}" ]; then
    # The fake driver: a shared simulated GPU whose context switches cost
    # 50 us; stand-ins for the GPU workloads (decode: 32 small kernels per
    # call with CPU gaps between them, about a third of the GPU; hogs:
    # element-wise kernels of about 0.16, 0.65, 1.3 and 5 ms).
    export LD_LIBRARY_PATH="$BUILD/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    mkdir -p "$OUT/tmp"
    rm -f "$OUT/tmp/gpu.state"
    export FAKECUDA_STATE="$OUT/tmp/gpu.state" FAKECUDA_NS_PER_BLOCK=40
    export FAKECUDA_UTIL_WINDOW_MS=300 FAKECUDA_CTX_SWITCH_US=50
    export CUSHARE_BOARD="$OUT/tmp/board"   # the fakes' UUIDs are everyone's
    LW="$BUILD/limiter_workload"
    W+=(--workload "decode=$LW decode" --workload "hog=$LW hog --n 8388608")
    W+=(--workload "hog2048=$LW hog --n 1048576 --batch 32")
    W+=(--workload "hog4096=$LW hog --n 4194304 --batch 16")
    W+=(--workload "hog16384=$LW hog --n 33554432 --batch 2")
    W+=(--workload "matmul=$LW elementwise --n 4194304 --batch 16")
    W+=(--workload "graph=$LW decode --batch 8 --gap-us 400")
    INIT_N=8
    PIN=${PIN:-0}
    echo "fake driver (tests/fakecuda): stand-in workloads" > "$OUT/nvidia-smi.txt"
else
    { nvidia-smi; nvidia-smi -q -d COMPUTE,CLOCK; } > "$OUT/nvidia-smi.txt" 2>&1 || true
    PY="python3 $ROOT/bench/limiter"
    # DECODE=stand-in: the C stand-in (32 element-wise kernels of 0.06 ms
    # a call with slept gaps: the GPU about half busy alone) in
    # place of the HF loop, whose speed follows the CPU's: the mechanism
    # judged without the host's noise; the HF loop stays the headline.
    if [ "${DECODE:-hf}" = stand-in ]; then
        W+=(--workload "decode=$BUILD/limiter_workload decode --n 16777216 --gap-us 60")
    else
        W+=(--workload "decode=$PY/decode.py")
    fi
    W+=(--workload "hog=$PY/matmul.py --n 8192 --batch 4")
    W+=(--workload "hog2048=$PY/matmul.py --n 2048 --batch 200")
    W+=(--workload "hog4096=$PY/matmul.py --n 4096 --batch 20")
    W+=(--workload "hog16384=$PY/matmul.py --n 16384 --batch 1")
    W+=(--workload "matmul=$PY/matmul.py" --workload "graph=$PY/graph.py --width 1024")
    INIT_N=300
fi

# fair.py's arguments: OPTION once per name of a comma-separated LIST.
A=()
each() {
    local want x
    IFS=, read -r -a want <<< "$2"
    for x in "${want[@]}"; do [ -n "$x" ] && A+=("$1" "$x"); done
}
each --mix "$MIXES"
each --split "${SPLIT:-}"
each --sweep "$SWEEP"
if [ ${#A[@]} -eq 0 ] && [ $OVERHEAD_RUNS = 0 ]; then
    echo "fair.sh: nothing to measure: MIXES and SWEEP are empty${PART:+ for PART=$PART}; name a mix or a sweep" >&2
    exit 2
fi

# NODE_TRACE=1: the node view (every tenant's share decision) every 0.5 s.
if [ "${NODE_TRACE:-0}" = 1 ]; then
    ( while :; do "$BUILD/cushare" status --json 2>/dev/null; sleep 0.5; done ) > "$OUT/node.jsonl" &
    TRACE=$!
    trap 'kill $TRACE 2>/dev/null' EXIT
fi
# GPU_TRACE=1: what the GPU's clock and power did while the windows ran.
if [ "${GPU_TRACE:-0}" = 1 ] && [ -z "${FAKE:-}" ]; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
        --format=csv -l 1 > "$OUT/gpu-trace.csv" 2>&1 &
    GTRACE=$!
    trap 'kill ${TRACE:-} $GTRACE 2>/dev/null' EXIT
fi
rc=0
if [ ${#A[@]} -gt 0 ]; then
    python3 "$ROOT/bench/limiter/fair.py" --cushare "$BUILD/cushare" "${W[@]}" "${A[@]}" \
        --reps "$REPS" --group "$GROUP" --secs "$SECS" --warmup "$WARMUP" --settle "$SETTLE" \
        --budget "$BUDGET" --out "$OUT" ${FRESH:+--fresh} $([ "${PIN:-1}" = 1 ] && echo --pin) \
        $([ "${AGAIN:-0}" = 1 ] && echo --again) \
        2> >(tee "$OUT/progress.txt" >&2)
    rc=$?
fi
[ -n "${TRACE:-}" ] && kill "$TRACE" 2>/dev/null
[ -n "${GTRACE:-}" ] && kill "$GTRACE" 2>/dev/null

# No regression (PART=2 and the whole set): what an empty launch costs, and
# start-up, each judged on alternated pairs measured here and now (one run
# of either moves by more than the margin it is judged against). Verdict
# lines go to overhead.txt in the summary's words.
overhead() {
    local orc=0 lc=("$BUILD/limiter_workload" launchcost --secs 1 --warmup 0.3) x
    # The judged figure: the median of 16 alternated pairs on one CPU (the
    # last, which every machine has).
    bench/limiter/launch_pairs.sh -n 16 --cpu $(($(nproc) - 1)) --build "$BUILD" \
        > "$OUT/launch_pairs.txt" 2>&1
    local lp med
    lp=$(tail -1 "$OUT/launch_pairs.txt")
    echo "empty launch, no limit: $lp"
    med=$(sed -n 's/.* median \([0-9.]*\) .*/\1/p' <<< "$lp")
    if [ -n "$med" ] && python3 -c "import sys; sys.exit(float('$med') > 1.01)"; then
        echo "PASS no regression: empty-launch overhead within 1 % (median of 16 pairs: $med)"
    else
        echo "MISS no regression: empty-launch overhead within 1 % (median of 16 pairs: ${med:-no result})"
        orc=1
    fi
    # Not judged: the free path (uncontended --sm 50) and every launch
    # measured (--sm 99 force), one run each after a native one.
    lc_rate() { "$@" 2>>"$OUT/fair-bench.log" | sed -n 's/^RESULT .* rate=\([0-9.]*\).*/\1/p'; }
    echo "  native $(lc_rate "${lc[@]}") launches/s" \
         "--sm 50 $(lc_rate "$BUILD/cushare" run --sm 50 -- "${lc[@]}")" \
         "--sm 99 force $(lc_rate "$BUILD/cushare" run --sm 99 --policy force -- "${lc[@]}") (not judged)"
    # Start-up: a warm-up pair first (the first cuInit of a run reads
    # apart from the rest), then five alternated pairs, judged by the
    # median of their p99 ratios.
    "$BUILD/cushare" bench init -n "$INIT_N" --baseline --repeat 6 > "$OUT/init.txt" 2>>"$OUT/fair-bench.log"
    local r ratio
    r=$(python3 "$ROOT/bench/limiter/init_pairs.py" "$OUT/init.txt")
    ratio=${r%% *}
    echo "start-up: cushare bench init -n $INIT_N --baseline --repeat 6, p99 ratio per pair after the first: ${r#* }"
    if [ -n "${FAKE:-}" ]; then
        echo "n/a  start-up unchanged (the fake's cuInit costs nothing: ratio ${ratio:-?} not judged)"
    elif [ -n "$ratio" ] && python3 -c "import sys; sys.exit(float('$ratio') > 1.05)"; then
        echo "PASS start-up unchanged: cuInit p99 at N=$INIT_N within 1.05 x plain (median of 5 pairs: $ratio)"
    else
        echo "MISS start-up unchanged: cuInit p99 at N=$INIT_N within 1.05 x plain (median of 5 pairs: ${ratio:-no result})"
        orc=1
    fi
    return $orc
}
orc=0
if [ $OVERHEAD_RUNS = 1 ]; then
    overhead > "$OUT/overhead.txt" 2>&1
    orc=$?
    [ $rc -eq 0 ] && [ $orc -ne 0 ] && rc=1
fi
{
    if [ $rc -eq 0 ]; then echo "PASS: fair-share targets met${PART:+ (part $PART)}"
    elif [ $rc -eq 1 ]; then echo "FAIL: fair-share targets missed${PART:+ (part $PART)}"
    elif [ $rc -eq 3 ]; then echo "FAIL: a tenant failed, no verdict (fair-bench.log has its output)"
    else echo "FAIL: fair.py exited $rc (see fair-bench.log)"; fi
    grep -E '^fair.py: ' "$OUT/progress.txt" 2>/dev/null
    sed -n '/^== targets/,/^$/p' "$OUT/fair-bench.txt" 2>/dev/null
    [ -f "$OUT/overhead.txt" ] && grep -E '^(PASS|MISS|n/a) ' "$OUT/overhead.txt"
    echo
    sed -n '1,/^== targets/p' "$OUT/fair-bench.txt" 2>/dev/null | grep -v '^== targets'
    [ -f "$OUT/overhead.txt" ] && cat "$OUT/overhead.txt"
    echo "elapsed $(( $(date +%s) - T0 )) s"
} > "$OUT/summary.txt"
rm -rf "$OUT/tmp"
cat "$OUT/summary.txt"
exit $rc
