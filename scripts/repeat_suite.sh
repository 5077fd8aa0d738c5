#!/usr/bin/env bash
# The determinism proof: the plain CTest suite N times in a row on one
# CPU (`taskset -c 0`, or --cpu), then N times with two CPU hogs running
# (one busy loop pinned to that CPU, one free to run anywhere), stopping at
# the first failing run. A test that passes only by scheduling luck fails here.
#
#   scripts/repeat_suite.sh [-n N] [--build DIR] [--jobs J] [--only pinned|hogs]
#                           [--cpu C] [--log DIR] [-- CTEST_ARGS...]
#     -n       runs per phase (default 20)
#     --build  configured and built build directory (default: build next to
#              scripts/; run `make` first)
#     --jobs   ctest -j (default 2, as CI runs it)
#     --only   run one phase only
#     --cpu    the CPU of the pinned phase and of the pinned busy loop
#              (default 0; two checkouts can then run their pinned phases
#              side by side, one CPU each)
#     --log    where each run's ctest output goes (default: a fresh temp dir,
#              kept and named on failure)
#     CTEST_ARGS  extra ctest arguments, e.g. -R ledger_ for a quick check
#
# Prints one line per run (phase, number, wall seconds, result), the failing
# tests and their output of the first failing run, and a summary line:
#   repeat_suite: pinned 20/20 passed (min/mean/max 201/210/232 s); hogs ...
# Exit 0: every run passed; 1: a run failed; 2: usage or set-up error.
set -u

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }

here=$(cd "$(dirname "$0")" && pwd)
n=20 build="$here/../build" jobs=2 only="" log="" cpu=0
ctest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=${2:-}; shift 2 ;;
    --build) build=${2:-}; shift 2 ;;
    --jobs) jobs=${2:-}; shift 2 ;;
    --only) only=${2:-}; shift 2 ;;
    --cpu) cpu=${2:-}; shift 2 ;;
    --log) log=${2:-}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "repeat_suite: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$n" in ''|*[!0-9]*|0) echo "repeat_suite: -n wants a positive integer, got '$n'" >&2; exit 2 ;; esac
case "$jobs" in ''|*[!0-9]*|0) echo "repeat_suite: --jobs wants a positive integer, got '$jobs'" >&2; exit 2 ;; esac
case "$cpu" in ''|*[!0-9]*) echo "repeat_suite: --cpu wants a CPU number, got '$cpu'" >&2; exit 2 ;; esac
case "$only" in ''|pinned|hogs) ;; *) echo "repeat_suite: --only wants pinned or hogs, got '$only'" >&2; exit 2 ;; esac
if [ ! -f "$build/CTestTestfile.cmake" ]; then
    echo "repeat_suite: no built suite in '$build' (run make, or pass --build DIR)" >&2
    exit 2
fi
for tool in ctest taskset; do
    command -v "$tool" >/dev/null || { echo "repeat_suite: $tool not found" >&2; exit 2; }
done
if [ -z "$log" ]; then
    log=$(mktemp -d "${TMPDIR:-/tmp}/repeat-suite-XXXXXX") || exit 2
else
    mkdir -p "$log" || exit 2
fi

# The hogs: busy shells, ended by their pids (and with us, whatever ends us).
hogs=()
stop_hogs() {
    for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${hogs[@]}"; do wait "$p" 2>/dev/null; done
    hogs=()
}
trap 'stop_hogs' EXIT
trap 'stop_hogs; exit 130' INT TERM
start_hogs() {
    taskset -c "$cpu" sh -c 'while :; do :; done' & hogs+=($!)
    sh -c 'while :; do :; done' & hogs+=($!)
}

summary=""
# run_phase NAME: N runs; returns 1 at the first failing one.
run_phase() {
    local name=$1 i t0 t1 secs rc out min="" max=0 sum=0
    local -a prefix=()
    [ "$name" = pinned ] && prefix=(taskset -c "$cpu")
    [ "$name" = hogs ] && start_hogs
    for i in $(seq 1 "$n"); do
        out="$log/$name-$i.txt"
        t0=$(date +%s.%N)
        "${prefix[@]}" ctest --test-dir "$build" -j "$jobs" --timeout 300 --output-on-failure \
            "${ctest_args[@]}" >"$out" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')
        sum=$((sum + secs))
        [ -z "$min" ] || [ "$secs" -lt "$min" ] && min=$secs
        [ "$secs" -gt "$max" ] && max=$secs
        if [ $rc -ne 0 ]; then
            echo "$name run $i/$n: FAILED after ${secs} s (ctest exit $rc); log $out"
            sed -n '/The following tests FAILED/,$p' "$out"
            echo "--- output of the failing tests (from $out) ---"
            grep -n -A40 -- '\*\*\*Failed\|\*\*\*Timeout\|\*\*\*Exception\|Not Run' "$out" | head -200
            summary="$summary${summary:+; }$name FAILED at run $i/$n ($((i - 1)) passed before)"
            stop_hogs
            return 1
        fi
        echo "$name run $i/$n: passed in ${secs} s ($(grep -o 'out of [0-9]*' "$out" | tail -1) tests, $(grep -c -- '\*\*\*Skipped' "$out") skipped)"
    done
    stop_hogs
    summary="$summary${summary:+; }$name $n/$n passed (min/mean/max $min/$((sum / n))/$max s)"
    return 0
}

status=0
echo "repeat_suite: $n runs per phase of ctest -j $jobs in $build; logs in $log"
if [ -z "$only" ] || [ "$only" = pinned ]; then
    run_phase pinned || status=1
fi
if [ $status -eq 0 ] && { [ -z "$only" ] || [ "$only" = hogs ]; }; then
    run_phase hogs || status=1
fi
echo "repeat_suite: $summary"
[ $status -eq 0 ] && [ -z "${KEEP_LOGS:-}" ] && case "$log" in "${TMPDIR:-/tmp}"/repeat-suite-*) rm -rf "$log" ;; esac
exit $status
