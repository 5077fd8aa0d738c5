#!/usr/bin/env bash
# Compute-limiter acceptance on a real GPU (the H200 machine). Run from the
# repository root; everything it produces lands in $OUT:
#   nvidia-smi.txt        the device and its compute mode
#   build.txt             configure and build log
#   bench-limiter.txt     the table of `cushare bench limiter` (also on stdout)
#   limiter-bench.csv     the numbers; limiter-bench.png the plot (gnuplot)
#   summary.txt           PASS/FAIL and the missed targets
#
#   tests/gpu/limiter/run.sh             full run: 6 s per measurement (~5 min)
#   QUICK=1 tests/gpu/limiter/run.sh     3 s per measurement (~3 min)
#
# Targets (docs/limiter.md): 4096^2 bf16 matmul and 16M-element fp32
# element-wise kernels within +-5 points of each limit 10/25/50/75 (force);
# tenants at 25 % and 75 % side by side at a 1:3 ratio within 10 %; no
# limit costs <= 1 % of throughput and <= 1 % per empty-kernel launch; a
# launch-bound workload at a 25 % limit keeps >= 97 % of its rate.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/limiter}
BUILD=${BUILD:-$ROOT/build-gpu}
SECS=${SECS:-6}
WARMUP=${WARMUP:-1.5}
if [ -n "${QUICK:-}" ]; then SECS=3; WARMUP=1; fi
mkdir -p "$OUT"

{ nvidia-smi; nvidia-smi -q -d COMPUTE,CLOCK; } > "$OUT/nvidia-smi.txt" 2>&1 || true

echo "== build ($BUILD)"
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$BUILD" -j"$(nproc)" --target libcushare cushare_cli cushare_bench limiter_workload; } \
       > "$OUT/build.txt" 2>&1; then
    tail -30 "$OUT/build.txt"
    echo "FAIL: build (see $OUT/build.txt)" | tee "$OUT/summary.txt"
    exit 1
fi

# The element-wise kernels are PTX compiled for sm_90 (bench/limiter/
# kernels.cu); regenerate them with this machine's nvcc when it has one,
# in a scratch copy so the tree is not touched.
if command -v nvcc > /dev/null 2>&1; then
    scratch=$(mktemp -d)
    cp bench/limiter/kernels.cu bench/limiter/gen_ptx.sh "$scratch/"
    if (cd "$scratch" && ./gen_ptx.sh) >> "$OUT/build.txt" 2>&1 &&
       ! cmp -s "$scratch/kernels_ptx.h" bench/limiter/kernels_ptx.h; then
        echo "note: nvcc here generates different PTX than the checked-in kernels_ptx.h" \
            | tee -a "$OUT/build.txt"
    fi
    rm -rf "$scratch"
fi

workloads=(--workload "elementwise=$BUILD/limiter_workload elementwise")
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
        > /dev/null 2>&1; then
    workloads=(--workload "matmul=python3 $ROOT/bench/limiter/matmul.py" "${workloads[@]}")
else
    echo "note: PyTorch with CUDA not importable: the matmul workload is skipped" \
        | tee -a "$OUT/build.txt"
fi

echo "== cushare bench limiter"
"$BUILD/cushare" bench limiter --secs "$SECS" --warmup "$WARMUP" --out "$OUT" \
    "${workloads[@]}" 2>&1 | tee "$OUT/bench-limiter.txt"
status=${PIPESTATUS[0]}
{
    grep -E "^(== |.*MISSED)" "$OUT/bench-limiter.txt" || true
    tail -1 "$OUT/bench-limiter.txt"
} > "$OUT/summary.txt"
echo "== summary (exit $status)"
cat "$OUT/summary.txt"
exit "$status"
