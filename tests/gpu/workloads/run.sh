#!/usr/bin/env bash
# Compatibility matrix of real CUDA programs under cushare (docs/compat.md):
#   tests/gpu/workloads/run.sh BUILD_DIR OUT_DIR [ROW...]
# Rows (default: all, in this order): torch_eager torch_graph torch_compile
# hf_llama hf_llama_static torch_expandable jax_jit cupy_rawkernel
# triton_kernel nccl_ddp graph_tenants4 mps_underneath. Each runs natively,
# under `cushare run`, --mem M, --sm S --policy force and both.
# Writes OUT/matrix.csv, OUT/compat.md, OUT/logs/ (one log per run),
# OUT/build.log; results of earlier invocations in OUT are kept (merged).
# Environment: BUDGET_S (default 500) seconds this invocation may take:
# runs that would end later are recorded as skipped (so one invocation fits
# a 10-minute command, build included); CACHE_DIR (default
# OUT/cache) for the inductor/Triton/CuPy caches the configurations share.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 13 "$0" "$@"
shift 2
MATRIX_DEADLINE=$(($(date +%s) + ${BUDGET_S:-500}))
export MATRIX_DEADLINE PYTHONUNBUFFERED=1
cd "$GPU_ROOT" || exit 1

rows=() mps=0
[ $# -eq 0 ] && mps=1
for r in "$@"; do
    case $r in
    mps_underneath | mps_eager | mps_graph) mps=1 ;;
    *) rows+=("$r") ;;
    esac
done

echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli || exit 1

rc=0
if [ $# -eq 0 ] || [ ${#rows[@]} -gt 0 ]; then  # no ROW: matrix.py's default, all but MPS
    MATRIX_PRINT_TABLE=$((1 - mps)) python3 "$here/matrix.py" run "$B" "$OUT" ${rows[@]+"${rows[@]}"} || rc=1
fi
if [ $mps = 1 ]; then
    echo "== mps_underneath: private MPS daemon on GPU ${MATRIX_GPU:-0}"
    if CUDA_VISIBLE_DEVICES=${MATRIX_GPU:-0} mps_start; then
        python3 "$here/matrix.py" run "$B" "$OUT" mps_underneath || rc=1
        mps_stop "$OUT/mps-log"
    else
        echo "MPS: $MPS_ERROR"
        MATRIX_MPS_ERROR=$MPS_ERROR python3 "$here/matrix.py" run "$B" "$OUT" mps_underneath || rc=1
    fi
fi
exit $rc
