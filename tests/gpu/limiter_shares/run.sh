#!/usr/bin/env bash
# Compute-share acceptance on a real GPU (one H200): shares within 2 points, work
# conserved when tenants share, start-up within 2 % of the plain driver.
#   tests/gpu/limiter_shares/run.sh BUILD_DIR OUT_DIR [STEP...]
# Steps (default: limiter free diag init):
#   limiter  `cushare bench limiter` on the 4096^2 bf16 matmul, the 16M-element
#            element-wise kernel and a CUDA-graph replay (4 x Linear 2048,
#            batch 8, fp16) at 10/25/50/75 % (force), RUNS times each (default
#            3, the worst run judged), and the mixes 25+75 and 20+30+50 side
#            by side; targets +-TOL points (default 2) per tenant and >= 97 %
#            of the limits' sum per mix. OUT/limiter/ (table, CSV, plot).
#   mixes    the limiter step's mixes alone (no single limits). OUT/mixes/.
#   free     the mixes again without coordinated windows (CUSHARE_SM_PERIOD_US=0),
#            beside one limit (50): what the windows change. OUT/free/.
#   diag     what the shares are made of: the matmul at 10 and 50 % with the
#            watcher's boost inputs logged (debug) beside nvidia-smi's SM clock
#            and power; the element-wise kernel at 99 % (what measuring every
#            launch costs). OUT/diag/.
#   windows  where a 20/30/50 mix's time goes: the mix alone (no limits) with
#            the limiter's once-a-second debug line in the log (charged GPU
#            time, work, sleeps, the law's sleeps inside the tenant's own
#            window, its clock's lead, its window). OUT/windows/.
#   init     bench/run_init_sweep.sh: cuInit p99, plain and cushare
#            alternating, N = 1 8 32 128 300 and 48 contexts. OUT/init/.
# Environment: SECS (default 4) and WARMUP (1.5) per measurement, START_DELAY
# (8: seconds the tenants of a mix get to start), RUNS, TOL,
# WORKLOADS (default "matmul elementwise graph"; graph-wide: the graph at
# width 3072, 72 MiB of weights, past the L2's size: placement.sh), BUDGET_S
# (default 540: steps that would run past it are skipped and say so).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 25 "$0" "$@"
shift 2
steps=${*:-limiter free diag init}
cd "$GPU_ROOT" || exit 1
deadline=$(($(date +%s) + ${BUDGET_S:-540}))
echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli cushare_bench limiter_workload || exit 1
{ date -u; nvidia-smi -L; git log --oneline -1 2> /dev/null; } > "$OUT/env.txt" 2>&1
CLI=$B/cushare
SECS=${SECS:-4} WARMUP=${WARMUP:-1.5}
: > "$OUT/summary.txt"

workload_args() {
    local w
    for w in ${WORKLOADS:-matmul elementwise graph}; do
        case $w in
        matmul) echo "--workload"; echo "matmul=python3 $GPU_ROOT/bench/limiter/matmul.py" ;;
        elementwise) echo "--workload"; echo "elementwise=$B/limiter_workload elementwise" ;;
        graph) echo "--workload"; echo "graph=python3 $GPU_ROOT/bench/limiter/graph.py" ;;
        graph-wide)
            echo "--workload"
            echo "graph-wide=python3 $GPU_ROOT/bench/limiter/graph.py --width 3072"
            ;;
        esac
    done
}

# bench_limiter NAME LIMITS: the bench into OUT/NAME (log OUT/NAME.log).
bench_limiter() {
    local args=() name=$1
    mapfile -t args < <(workload_args)
    "$CLI" bench limiter --secs "$SECS" --warmup "$WARMUP" --runs "${RUNS:-3}" \
        --limits "$2" --mix 25+75 --mix 20+30+50 --tolerance "${TOL:-2}" \
        --conserve 97 --start-delay "${START_DELAY:-8}" --launchbound none --launchcost none \
        --out "$OUT/$name" "${args[@]}" > "$OUT/$name.log" 2>&1
    local rc=$?
    cat "$OUT/$name.log"
    echo "$name $([ $rc = 0 ] && echo PASS || echo FAIL): $(tail -1 "$OUT/$name.log")" \
        >> "$OUT/summary.txt"
}

step_limiter() { bench_limiter limiter 10,25,50,75; }
step_mixes() { bench_limiter mixes none; }
step_windows() {
    local args=()
    mapfile -t args < <(workload_args)
    CUSHARE_LOG_LEVEL=debug "$CLI" bench limiter --secs "$SECS" --warmup "$WARMUP" \
        --runs "${RUNS:-1}" --limits none --mix 20+30+50 --tolerance "${TOL:-2}" --conserve 97 \
        --start-delay "${START_DELAY:-8}" --launchbound none --launchcost none \
        --out "$OUT/windows" "${args[@]}" > "$OUT/windows.log" 2>&1
    grep -v "^cushare: \(ledger\|identity\|board\): \|boost inputs" "$OUT/windows.log" |
        grep "last 1\|share\|tenant\|together\|==\|native\|window of" | tail -80
    echo "windows DONE: see windows.log" >> "$OUT/summary.txt"
}
step_free() { CUSHARE_SM_PERIOD_US=0 bench_limiter free 50; }

# sample_smi FILE: SM clock and power every 0.2 s until killed.
sample_smi() {
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu \
        --format=csv,noheader -lms 200 > "$1" 2>&1 &
    echo $!
}

step_diag() {
    local d=$OUT/diag pct smi
    mkdir -p "$d"
    for pct in 10 50; do
        smi=$(sample_smi "$d/matmul-$pct-smi.csv")
        CUSHARE_LOG_LEVEL=debug "$CLI" run --sm "$pct" --policy force -- \
            python3 bench/limiter/matmul.py --secs 6 --warmup 1.5 > "$d/matmul-$pct.log" 2>&1
        kill "$smi" 2> /dev/null
        grep -h "RESULT\|boost\|share charged" "$d/matmul-$pct.log" | tail -12
    done
    smi=$(sample_smi "$d/matmul-native-smi.csv")
    python3 bench/limiter/matmul.py --secs 4 --warmup 1 > "$d/matmul-native.log" 2>&1
    kill "$smi" 2> /dev/null
    grep RESULT "$d/matmul-native.log"
    for run in native 99; do
        if [ $run = native ]; then
            "$B/limiter_workload" elementwise --secs 4 --warmup 1 > "$d/ew-$run.log" 2>&1
        else
            "$CLI" run --sm 99 --policy force -- "$B/limiter_workload" elementwise \
                --secs 4 --warmup 1 > "$d/ew-$run.log" 2>&1
        fi
        echo "elementwise $run: $(grep RESULT "$d/ew-$run.log")"
    done
    echo "diag DONE: see diag/" >> "$OUT/summary.txt"
}

step_init() {
    CUSHARE=$CLI timeout 300 bench/run_init_sweep.sh "$OUT/init" > "$OUT/init.log" 2>&1
    local rc=$?
    cat "$OUT/init/init-p99.csv" "$OUT/init/ctx-p99.csv" 2> /dev/null
    echo "init $([ $rc = 0 ] && echo DONE || echo "FAIL (exit $rc)"): see init/" >> "$OUT/summary.txt"
}

for s in $steps; do
    if [ $(($(date +%s) + 30)) -gt "$deadline" ]; then
        echo "$s SKIP: time budget (BUDGET_S) spent" >> "$OUT/summary.txt"
        continue
    fi
    echo "== $s"
    "step_$s"
done
echo "== summary"
cat "$OUT/summary.txt"
! grep -q ' FAIL' "$OUT/summary.txt"
