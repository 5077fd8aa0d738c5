#!/usr/bin/env bash
# Dry run of the GPU acceptance scripts on the simulated device
# (tests/fakecuda), for a machine without a GPU:
#   tests/gpu/selftest/run.sh BUILD_DIR OUT_DIR
# Runs tests/gpu/workloads/run.sh with the workloads replaced by
# workload_stub.py (one made to fail), then tests/gpu/capture_contexts/run.sh
# ctx_budget3 ctx_kill24 (the steps that are plain driver API), with
# bin/nvidia-smi and bin/nvidia-cuda-mps-control standing in for the
# real tools. Checks the plumbing (timeouts, sampling, budgets, tables,
# the MPS trap), not cushare on a GPU. ~1 minute.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
B=$(mkdir -p "${1:?BUILD_DIR}" && cd "$1" && pwd)
OUT=$(mkdir -p "${2:?OUT_DIR}" && cd "$2" && pwd)
cmake --build "$B" -j"$(nproc)" --target libcushare cushare_cli fakecuda_driver fakecuda_nvml \
    > "$OUT/selftest-build.log" 2>&1 || { tail -20 "$OUT/selftest-build.log"; exit 1; }
export PATH=$here/bin:$PATH LD_LIBRARY_PATH=$B/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKECUDA_STATE=$OUT/fakecuda.state FAKECUDA_CTX_BYTES=$((518 << 20)) FAKECUDA_MEM=141g
export FAKECUDA_DEVICES=${FAKECUDA_DEVICES:-2}
rm -f "$FAKECUDA_STATE"
fail=0

echo "== matrix with stub workloads (torch_compile made to fail)"
MATRIX_PYTHON=$here/workload_stub.py STUB_FAIL=torch_compile.py \
    "$root/tests/gpu/workloads/run.sh" "$B" "$OUT/matrix" > "$OUT/matrix.log" 2>&1
tail -25 "$OUT/matrix.log"
lines=$(($(wc -l < "$OUT/matrix/matrix.csv") - 1))
echo "matrix.csv: $lines result lines"
[ "$lines" -eq 66 ] || { echo "SELFTEST FAIL: expected 66 lines (13 rows x 5 + solo)"; fail=1; }
grep -q '^torch_compile,mem,FAIL,' "$OUT/matrix/matrix.csv" ||
    { echo "SELFTEST FAIL: the injected failure is not recorded"; fail=1; }
grep -q '^torch_eager,mem,ok,yes,.*,2048,' "$OUT/matrix/matrix.csv" ||
    { echo "SELFTEST FAIL: torch_eager --mem row not ok with budget 2048"; fail=1; }
grep -q 'quit' "$OUT/matrix.log" || { echo "SELFTEST FAIL: MPS daemon not quit"; fail=1; }

echo "== capture_contexts ctx_budget3 ctx_kill24 on the simulated device"
"$root/tests/gpu/capture_contexts/run.sh" "$B" "$OUT/capture_contexts" ctx_budget3 ctx_kill24 > "$OUT/capture_contexts.log" 2>&1
tail -4 "$OUT/capture_contexts.log"
[ "$(grep -c '' "$OUT/capture_contexts/summary.txt")" -eq 2 ] || { echo "SELFTEST FAIL: summary"; fail=1; }
[ $fail = 0 ] && echo "SELFTEST OK (plumbing; the verdicts above are the simulated device's)"
exit $fail
