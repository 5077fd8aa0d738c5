#!/usr/bin/env bash
# Exploration on one GPU: the facts cushare's concurrent (MPS) mode
# builds on. bench/gpu-probes/mps/explore.sh BUILD_DIR OUT_DIR
#   occupancy of the graph-replay and matmul kernels; what a context costs
#   with and without MPS and what NVML lists; throughput of graph tenants
#   under bare MPS at thread percentage 100 and 25; cushare's charge of an MPS
#   client's context; what a faulting or killed client does to another.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../../../tests/gpu/common.sh"
gpu_args 8 "$0" "$@"
cd "$GPU_ROOT" || exit 1
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli limiter_workload || exit 1
P="python3 $here/../../../tests/gpu/mps/probe.py"
G="python3 $GPU_ROOT/bench/limiter/graph.py"
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
apps() { nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader; }

# holders K LABEL [PREFIX...]: K context holders one after another, memory after each
holders() {
    local k=$1 label=$2 i stop=$OUT/stop.$2
    shift 2
    rm -f "$stop"
    echo "== holders $label: used before $(used) MiB"
    for i in $(seq "$k"); do
        "$@" $P holder "$stop" > "$OUT/hold.$label.$i" 2>&1 &
        for _ in $(seq 200); do grep -q HOLD "$OUT/hold.$label.$i" && break; sleep 0.05; done
        echo "$label client $i: $(cat "$OUT/hold.$label.$i" | tail -1); used $(used) MiB"
    done
    apps | sed "s/^/$label app: /"
    $P nvml | sed "s/^/$label /"
    touch "$stop"
    wait
}

# tenants N LABEL [ENV...]: N graph replay tenants started together
tenants() {
    local n=$1 label=$2 i start
    shift 2
    start=$(python3 -c "import time;print(time.clock_gettime_ns(time.CLOCK_MONOTONIC)+6000000000)")
    for i in $(seq "$n"); do
        env "$@" $G --secs 3 --warmup 1 --start-mono "$start" > "$OUT/t.$label.$i" 2>&1 &
    done
    wait
    python3 - "$label" "$OUT"/t."$label".* <<'PY'
import re, sys
rates = [float(m.group(1)) for f in sys.argv[2:] for m in re.finditer(r"rate=([0-9.]+)", open(f).read())]
print(f"TENANTS {sys.argv[1]}: n={len(rates)} total={sum(rates):.0f} each={[round(r) for r in rates]}")
PY
}

echo "== occupancy (no MPS)"
$P occupancy graph 2>&1 | tail -40
$P occupancy matmul 2>&1 | tail -20
holders 2 plain
tenants 1 plain1
tenants 4 plain4

mps_start || { echo "MPS: $MPS_ERROR"; exit 1; }
$P occupancy graph 2>&1 | grep "OCC workload"
holders 3 mps
holders 1 mps-cushare "$B/cushare" run --mem 4G --ledger "$OUT/mps.ledger" --
"$B/cushare" status "$OUT/mps.ledger" 2>&1 | head -20
tenants 1 mps1
tenants 4 mps4
tenants 4 mps4-t25 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25
tenants 1 mps1-t25 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25
echo "== NVML while two tenants run"
tenants 2 mps2 & sleep 7; $P nvml; wait

echo "== fault: illegal address in one client while another replays"
$P victim 8 > "$OUT/victim1" 2>&1 & vp=$!
sleep 3; $P fault illegal 2>&1 | tail -3; wait $vp; tail -4 "$OUT/victim1"
echo "server list after: $(echo get_server_list | nvidia-cuda-mps-control 2>&1 | tr '\n' ' ')"
rm -f "$OUT/stop.after"; touch "$OUT/stop.after"; $P holder "$OUT/stop.after" 2>&1 | tail -2
echo "== fault: SIGKILL of a client mid-kernel"
$P victim 8 > "$OUT/victim2" 2>&1 & vp=$!
sleep 3; $P fault spin > "$OUT/spin" 2>&1 & sp=$!
sleep 2; kill -9 $sp; wait $vp; tail -4 "$OUT/victim2"; cat "$OUT/spin"
echo "server list after: $(echo get_server_list | nvidia-cuda-mps-control 2>&1 | tr '\n' ' ')"
touch "$OUT/stop.after2"; $P holder "$OUT/stop.after2" 2>&1 | tail -2
mps_stop "$OUT/mps-log"
echo "== done"
