#!/usr/bin/env bash
# CUDA-graph capture and context-budget acceptance on a real GPU (one H200 is enough):
#   tests/gpu/capture_contexts/run.sh BUILD_DIR OUT_DIR [STEP...]
# Steps (default: all, in this order): capture_share ctx_budget3 ctx_kill24
# memcpy_interference demo3 — what each checks: tests/gpu/capture_contexts/steps.py.
# Every step runs under `timeout` (STEP_TIMEOUT, default 200 s; demo3 260 s;
# never past BUDGET_S, default 560 s from the start, so the script fits a
# 10-minute command: a step with under 30 s left is skipped), writes
# OUT/<step>.log (+ OUT/<step>/ sub-run logs) and one line to
# OUT/summary.txt; the compact report of each step and summary.txt are
# printed at the end. ~4-5 minutes for all steps on an H200.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 12 "$0" "$@"
shift 2
steps=${*:-capture_share ctx_budget3 ctx_kill24 memcpy_interference demo3}
export PYTHONUNBUFFERED=1
deadline=$(($(date +%s) + ${BUDGET_S:-560}))
cd "$GPU_ROOT" || exit 1

echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli limiter_workload || exit 1
if ! gcc -O2 -Wall -I"$CUDA_HOME/include" "$here/ctx_hold.c" -o "$B/ctx_hold" \
        -L"$CUDA_HOME/lib64/stubs" -lcuda >> "$OUT/build.log" 2>&1; then
    echo "build: ctx_hold.c failed (log $OUT/build.log)"
    tail -10 "$OUT/build.log"
fi
{ date -u; nvidia-smi -L; git log --oneline -1 2> /dev/null; } > "$OUT/env.txt" 2>&1

export LIMIT_demo3=${DEMO_TIMEOUT:-260}
# shellcheck disable=SC2086 # steps are words
gpu_run_steps "$here/steps.py" "${STEP_TIMEOUT:-200}" "$deadline" $steps
