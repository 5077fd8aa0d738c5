# shellcheck shell=bash
# Shell helpers of the GPU scripts (sourced by tests/gpu/workloads/run.sh and
# the feature scripts tests/gpu/*/run.sh): build, a private MPS daemon.
# The Python side shares tests/gpu/workloads/harness.py and
# tests/gpu/smi_sampler.py.
GPU_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

# gpu_args HEADER_LAST_LINE SCRIPT ARGS...: the command line every step
# script shares (SCRIPT BUILD_DIR OUT_DIR [STEP...]). Without both
# directories it prints the script's header (lines 2..HEADER_LAST_LINE) and
# exits 2; else it sets B and OUT to them, made and absolute. The caller
# then shifts the two away and reads its steps.
gpu_args() {
    local last=$1 script=$2
    shift 2
    if [ $# -lt 2 ]; then
        sed -n "2,${last}p" "$script"
        exit 2
    fi
    B=$(mkdir -p "$1" && cd "$1" && pwd)
    OUT=$(mkdir -p "$2" && cd "$2" && pwd)
}

# gpu_run_steps STEPS_PY LIMIT DEADLINE STEP...: runs `python3 STEPS_PY STEP
# B OUT` for each step under `timeout` (LIMIT seconds, or LIMIT_<step> when
# set; never past DEADLINE, in epoch seconds: a step left under 20 s is
# skipped and says so). Each step's log is OUT/<step>.log; its "SUMMARY "
# line (or why there is none) and its duration go to OUT/summary.txt, and
# its "» " lines are echoed. Prints summary.txt at the end; returns 1 when a
# step FAILed.
gpu_run_steps() {
    local py=$1 limit0=$2 deadline=$3 step limit left start rc line why var
    shift 3
    : > "$OUT/summary.txt"
    for step in "$@"; do
        var=LIMIT_$step
        limit=${!var:-$limit0}
        left=$((deadline - $(date +%s)))
        [ "$left" -lt "$limit" ] && limit=$left
        if [ "$limit" -lt 20 ]; then
            echo "$step SKIP: time budget (BUDGET_S) spent; run it again on its own" >> "$OUT/summary.txt"
            continue
        fi
        echo "== $step (limit ${limit} s, log $OUT/$step.log)"
        start=$(date +%s)
        timeout -k 10 "$limit" python3 "$py" "$step" "$B" "$OUT" > "$OUT/$step.log" 2>&1
        rc=$?
        line=$(grep '^SUMMARY ' "$OUT/$step.log" | tail -1 | cut -d' ' -f2-)
        if [ -z "$line" ]; then
            why="exit $rc"
            { [ $rc = 124 ] || [ $rc = 137 ]; } && why="timed out after ${limit} s"
            line="$step FAIL: no summary ($why; see $step.log)"
        fi
        echo "$line [$(($(date +%s) - start)) s]" >> "$OUT/summary.txt"
        grep '^» ' "$OUT/$step.log" | cut -c1-400
    done
    echo
    echo "== summary ($OUT/summary.txt)"
    cat "$OUT/summary.txt"
    ! grep -q '^[a-z0-9_]* FAIL' "$OUT/summary.txt"
}

# gpu_build BUILD_DIR LOG TARGET...: configure once (Release), then build the
# targets (incremental, so a tree copied onto the machine is rebuilt).
gpu_build() {
    local b=$1 log=$2
    shift 2
    mkdir -p "$b"
    if [ ! -f "$b/CMakeCache.txt" ] &&
        ! timeout 180 cmake -S "$GPU_ROOT" -B "$b" -DCMAKE_BUILD_TYPE=Release >> "$log" 2>&1; then
        echo "build: cmake configure failed (log $log):"
        tail -20 "$log"
        return 1
    fi
    if ! timeout 400 cmake --build "$b" -j"$(nproc)" --target "$@" >> "$log" 2>&1; then
        echo "build: cmake --build $* failed (log $log):"
        tail -30 "$log"
        return 1
    fi
}

# mps_start: a private MPS control daemon (its own pipe and log
# directories) on the GPUs in CUDA_VISIBLE_DEVICES; the caller's EXIT, INT
# and TERM traps stop it again. Returns 1 (with MPS_ERROR set) if it did
# not start.
mps_start() {
    export MPS_ERROR=
    if ! command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
        MPS_ERROR="nvidia-cuda-mps-control not found"
        return 1
    fi
    CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/cushare-mps-pipe.XXXXXX)
    CUDA_MPS_LOG_DIRECTORY=$(mktemp -d /tmp/cushare-mps-log.XXXXXX)
    export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    trap mps_stop EXIT
    trap 'mps_stop; exit 130' INT
    trap 'mps_stop; exit 143' TERM
    if ! timeout 20 nvidia-cuda-mps-control -d; then
        MPS_ERROR="nvidia-cuda-mps-control -d failed"
        mps_stop ""
        return 1
    fi
    echo "MPS control daemon started (pipe dir $CUDA_MPS_PIPE_DIRECTORY)"
}

# mps_stop [LOG_COPY_DIR]: quit the daemon mps_start made (and its server),
# keep a copy of its logs, remove its directories. Safe to call twice.
mps_stop() {
    [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] || return 0
    local pidfile=$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid pid=
    [ -f "$pidfile" ] && pid=$(cat "$pidfile" 2> /dev/null)
    echo quit | timeout 20 nvidia-cuda-mps-control > /dev/null 2>&1
    if [ -n "$pid" ]; then
        for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2> /dev/null; then
            echo "MPS control daemon $pid still running 10 s after quit"
        else
            echo "MPS control daemon $pid quit"
        fi
    else
        sleep 2
        echo "MPS control daemon asked to quit"
    fi
    if [ -n "${1:-}" ]; then
        mkdir -p "$1" && cp -r "$CUDA_MPS_LOG_DIRECTORY"/. "$1"/ 2> /dev/null
    fi
    rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    trap - EXIT INT TERM
}
