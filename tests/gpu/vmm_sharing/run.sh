#!/usr/bin/env bash
# VMM-sharing acceptance on a real GPU (one H200 is enough):
#   tests/gpu/vmm_sharing/run.sh BUILD_DIR OUT_DIR [STEP...]
# Steps (default: all, in this order): expandable vmm_pair fd_late torch_mp
# cross_tenant — what each checks and its pass criterion: tests/gpu/vmm_sharing/steps.py.
# Every step runs under `timeout` (STEP_TIMEOUT, default 150 s; never past
# BUDGET_S, default 230 s from the start: a step with under 20 s left is
# skipped and says so), writes OUT/<step>.log (+ OUT/<step>/ sub-run logs)
# and one line to OUT/summary.txt; the compact report of each step and
# summary.txt are printed at the end. About 1-2 minutes on an H200.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 11 "$0" "$@"
shift 2
steps=${*:-expandable vmm_pair fd_late torch_mp cross_tenant}
export PYTHONUNBUFFERED=1
deadline=$(($(date +%s) + ${BUDGET_S:-230}))
cd "$GPU_ROOT" || exit 1

echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli || exit 1
if ! timeout 60 gcc -O2 -Wall -I"$CUDA_HOME/include" "$here/vmm_share.c" -o "$B/vmm_share" \
        -L"$CUDA_HOME/lib64/stubs" -lcuda >> "$OUT/build.log" 2>&1; then
    echo "build: vmm_share.c failed (log $OUT/build.log)"
    tail -10 "$OUT/build.log"
fi
{ date -u; nvidia-smi -L; git log --oneline -1 2> /dev/null; } > "$OUT/env.txt" 2>&1

# shellcheck disable=SC2086 # steps are words
gpu_run_steps "$here/steps.py" "${STEP_TIMEOUT:-150}" "$deadline" $steps
