#!/usr/bin/env bash
# Fair-share acceptance of the compute limiter (docs/limiter.md, "What a
# share means"): a share is a floor under contention, idle capacity goes to
# whoever can use it, priority protects latency, force still caps. Runs
# bench/limiter/fair.py (three repetitions, configurations alternated,
# medians with their spread) over these mixes:
#   decode+decode      two HF decode loops (~1 B Llama, bf16, batch 32,
#                      prompt 128, 32 new tokens per call) at 25 and 75
#   decode+hog         a decode loop (25) beside an 8192^2 bf16 matmul (75);
#                      also with the decode at a higher CUDA_TASK_PRIORITY
#   graph x4           four small CUDA-graph tenants at 25 each
#   matmul 25+75       4096^2 bf16 matmuls, saturating
#   matmul 20/30/50    the same, three tenants
# Each configuration (alone, no limiter = plain time-slicing, default,
# priority, force) is measured in the same run.
#
# Run from the repository root after `make` (uses ./build):
#   OUT=/some/dir tests/gpu/limiter/fair.sh          on the GPU machine
#   FAKE=1 OUT=/tmp/fair tests/gpu/limiter/fair.sh   on the fake driver
# Optional: NODE_TRACE=1 (node.jsonl: the node view every 0.5 s), REPS (3), SECS (2.5), WARMUP (1), BUDGET (420 s), MIXES ("a,b":
# names above), FAIR_FORCE=0 (leave out the force runs of the saturating
# mixes: tests/gpu/limiter/run.sh judges caps too).
# Everything lands in $OUT: fair-bench.txt (the table and verdicts),
# fair-bench.csv (every run), fair-bench.log (every tenant's output),
# nvidia-smi.txt, summary.txt (PASS/FAIL and the missed targets).
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/limiter-fair}
BUILD=${BUILD:-$ROOT/build}
REPS=${REPS:-3}
SECS=${SECS:-2.5}
WARMUP=${WARMUP:-1}
BUDGET=${BUDGET:-420}     # seconds of benchmark: no repetition starts that would end later
mkdir -p "$OUT"
T0=$(date +%s)

for f in "$BUILD/cushare" "$BUILD/limiter_workload"; do
    [ -x "$f" ] || { echo "FAIL: $f missing: run make first" | tee "$OUT/summary.txt"; exit 1; }
done

W=()
if [ -n "${FAKE:-}" ]; then
    # The fake driver: a shared simulated GPU whose context switches cost
    # 50 us; stand-ins for the GPU workloads (decode: 32 small kernels per
    # call with CPU gaps between them, about a third of the GPU).
    export LD_LIBRARY_PATH="$BUILD/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    mkdir -p "$OUT/tmp"
    rm -f "$OUT/tmp/gpu.state"
    export FAKECUDA_STATE="$OUT/tmp/gpu.state" FAKECUDA_NS_PER_BLOCK=40
    export FAKECUDA_UTIL_WINDOW_MS=300 FAKECUDA_CTX_SWITCH_US=50
    export CUSHARE_BOARD="$OUT/tmp/board"   # the fakes' UUIDs are everyone's
    LW="$BUILD/limiter_workload"
    W+=(--workload "decode=$LW decode" --workload "hog=$LW hog --n 8388608")
    W+=(--workload "matmul=$LW elementwise --n 4194304 --batch 16")
    W+=(--workload "graph=$LW decode --batch 8 --gap-us 400")
    echo "fake driver (tests/fakecuda): stand-in workloads" > "$OUT/nvidia-smi.txt"
else
    { nvidia-smi; nvidia-smi -q -d COMPUTE,CLOCK; } > "$OUT/nvidia-smi.txt" 2>&1 || true
    PY="python3 $ROOT/bench/limiter"
    W+=(--workload "decode=$PY/decode.py" --workload "hog=$PY/matmul.py --n 8192 --batch 4")
    W+=(--workload "matmul=$PY/matmul.py" --workload "graph=$PY/graph.py --width 1024")
fi

M=()
IFS=, read -r -a want <<< "${MIXES:-decode+decode,decode+hog,graph x4,matmul 25+75,matmul 20/30/50}"
for m in "${want[@]}"; do M+=(--mix "$m"); done

# NODE_TRACE=1: the node view (every tenant's share decision) every 0.5 s.
if [ "${NODE_TRACE:-0}" = 1 ]; then
    ( while :; do "$BUILD/cushare" status --json 2>/dev/null; sleep 0.5; done ) > "$OUT/node.jsonl" &
    TRACE=$!
    trap 'kill $TRACE 2>/dev/null' EXIT
fi
python3 "$ROOT/bench/limiter/fair.py" --cushare "$BUILD/cushare" "${W[@]}" "${M[@]}" \
    --reps "$REPS" --secs "$SECS" --warmup "$WARMUP" --budget "$BUDGET" --out "$OUT"
rc=$?
{
    if [ $rc -eq 0 ]; then echo "PASS: fair-share targets met"
    elif [ $rc -eq 1 ]; then echo "FAIL: fair-share targets missed"
    else echo "FAIL: fair.py exited $rc (see fair-bench.log)"; fi
    sed -n '/^FAIL:\|^PASS:/,$p' "$OUT/fair-bench.txt" 2>/dev/null | tail -n +2
    grep -E '^==|aggregate|^  (sliced|default|priority|force)|p99' "$OUT/fair-bench.txt" 2>/dev/null
    echo "elapsed $(( $(date +%s) - T0 )) s"
} > "$OUT/summary.txt"
rm -rf "$OUT/tmp"
cat "$OUT/summary.txt"
exit $rc
