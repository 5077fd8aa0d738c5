#!/usr/bin/env bash
# Which parts of the limiter fix what, on a real GPU: runs the matmul and
# element-wise workloads at 50 and 75 % and the 25 + 75 % pair under
#   time        CUSHARE_SM_SHARE=time, 1 ms bursts (the first H200 runs)
#   tput-1ms    throughput share (clock boost + fulfilment), 1 ms bursts
#   tput-4ms    the same, 4 ms bursts
#   tput-8ms    the same, 8 ms bursts
# with the limiter's decisions logged (CUSHARE_LOG_LEVEL=info), plus the
# SM clock and board power sampled every 200 ms.
#   BUILD=build-gpu OUT=/tmp/abl bench/limiter/probes/ablation.sh [CONFIG...]
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/ablation}
BUILD=${BUILD:-$ROOT/build-gpu}
SECS=${SECS:-3}
mkdir -p "$OUT"
configs=${*:-time tput-1ms tput-4ms tput-8ms}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader \
    -lms 200 > "$OUT/smi-samples.csv" 2>&1 &
smi=$!
for c in $configs; do
    case $c in
    time) env=(CUSHARE_SM_SHARE=time CUSHARE_SM_BURST_US=1000) ;;
    tput-*) ms=${c#tput-}; env=(CUSHARE_SM_SHARE=throughput CUSHARE_SM_BURST_US=$((${ms%ms} * 1000))) ;;
    *) echo "unknown config $c"; continue ;;
    esac
    echo "== $c: ${env[*]} ($(date +%T))" | tee -a "$OUT/smi-samples.csv"
    env "${env[@]}" CUSHARE_LOG_LEVEL=info "$BUILD/cushare" bench limiter --secs "$SECS" \
        --warmup 1.5 --limits 50,75 --launchbound none --launchcost none --out "$OUT/$c" \
        --workload "matmul=python3 $ROOT/bench/limiter/matmul.py" \
        --workload "elementwise=$BUILD/limiter_workload elementwise" > "$OUT/$c.log" 2>&1
    grep -vE "^cushare\[|armed" "$OUT/$c.log" | grep -E "^==|%|ratio" | head -40
    grep -E "charged at" "$OUT/$c.log" | awk 'NR % 5 == 1' | head -12
done
kill "$smi" 2>/dev/null
