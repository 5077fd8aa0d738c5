#!/usr/bin/env bash
# MPS acceptance on a real GPU (one H200): cushare over MPS.
#   tests/gpu/mps/run.sh BUILD_DIR OUT_DIR [STEP...]
# Steps (default: sanity ctx faults bench):
#   sanity  four graph-replay tenants (bench/limiter/graph.py) at --sm 25 side
#           by side, time-sliced (cushare run), concurrent (cushare run --mps)
#           and bare MPS (no cushare): replays/s each and together. OUT/sanity/.
#   ctx     what an MPS client's context costs and what cushare charges for
#           it: a driver-API context under `cushare run --mps --mem 4G`, the
#           view it gets (cuMemGetInfo), `cushare status`, nvidia-smi's
#           per-process memory. OUT/ctx.txt.
#   faults  two tenants of one daemon, both under cushare: one replays graphs,
#           the other (a) writes to address 0x10, (b) is SIGKILLed inside a
#           10 s kernel. What the other sees, the daemon's state after
#           (`cushare mps status`), a new client, and both ledgers' accounting
#           (`cushare status`: no process left, nothing charged). OUT/faults.txt.
#   bench   `cushare bench limiter --mps`: matmul and element-wise at
#           10/25/50/75 % and 25+75, time-sliced vs concurrent (+-5 pp, 1:3
#           +-10 %); graph replay 4 x 25 % and 3 x 25 % (concurrent >= 2x
#           time-sliced, >= 90 % of bare MPS). OUT/bench-*/.
#   turns   the 25+75 pairs and graph 4 x 25 % again with GPU-filling clients
#           taking turns (TURNS, default filling, the library's default; off:
#           never): the pairs at 1:3 +-10 %, the graph tenants still side by
#           side. OUT/bench-turns-*/.
# SECS (default 3), WARMUP (1), START_DELAY (6), RUNS (1).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 21 "$0" "$@"
shift 2
steps=${*:-sanity ctx faults bench}
cd "$GPU_ROOT" || exit 1
echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli cushare_bench limiter_workload || exit 1
{ date -u; nvidia-smi -L; git log --oneline -1 2> /dev/null; } > "$OUT/env.txt" 2>&1
CLI=$B/cushare
P="python3 $here/probe.py"
G="$GPU_ROOT/bench/limiter/graph.py"
W=$OUT/work
rm -rf "$W"; mkdir -p "$W"
export CUSHARE_MPS_DIR=/tmp/cs-mps-$$
SECS=${SECS:-3} WARMUP=${WARMUP:-1}
: > "$OUT/summary.txt"
trap '"$CLI" mps stop --force > /dev/null 2>&1; rm -rf "$CUSHARE_MPS_DIR"' EXIT

mono_in() { python3 -c "import time;print(time.clock_gettime_ns(time.CLOCK_MONOTONIC)+$1*1000000000)"; }

# graphs MODE N: N graph tenants started together; prints the sum.
graphs() {
    local mode=$1 n=$2 i start pre=() dir=$OUT/sanity/$1-$2
    mkdir -p "$dir"
    start=$(mono_in "${START_DELAY:-6}")
    for i in $(seq "$n"); do
        case $mode in
        timesliced) pre=("$CLI" run --sm 25 --policy force --ledger "$W/g$i.ledger" --) ;;
        concurrent) pre=("$CLI" run --mps --sm 25 --policy force --ledger "$W/g$i.ledger" --) ;;
        bare) pre=(env "$(mps_env PIPE)" "$(mps_env LOG)") ;;
        esac
        "${pre[@]}" python3 "$G" --secs "$SECS" --warmup "$WARMUP" --start-mono "$start" \
            > "$dir/t$i.out" 2>&1 &
    done
    wait
    python3 - "$mode" "$n" "$dir"/t*.out << 'PY'
import re, sys
r = [float(m.group(1)) for f in sys.argv[3:] for m in re.finditer(r"rate=([0-9.]+)", open(f).read())]
print(f"{sys.argv[1]} x{sys.argv[2]}: n={len(r)} together {sum(r):.0f} replays/s, each {[round(x) for x in r]}")
PY
}

# mps_env PIPE|LOG: CUDA_MPS_{PIPE,LOG}_DIRECTORY=... of the running daemon.
mps_env() {
    "$CLI" mps status --json | python3 -c "
import json, sys
g = json.load(sys.stdin)['gpus'][0]
print('CUDA_MPS_${1}_DIRECTORY=' + g['${1,,}'])"
}

step_sanity() {
    "$CLI" mps start || return 1
    { graphs native 1; graphs timesliced 4; graphs concurrent 4; graphs bare 4; } | tee "$OUT/sanity.txt"
    # What the limiter read: the device's mode and the exec's occupancy.
    CUSHARE_LOG_LEVEL=debug "$CLI" run --mps --sm 25 --policy force --ledger "$W/dbg.ledger" -- \
        python3 "$G" --secs 1 --warmup 0.5 2>&1 | grep -E "MPS clients|holds|RESULT" | head -8 |
        tee -a "$OUT/sanity.txt"
}

step_ctx() {
    "$CLI" mps start > /dev/null || return 1
    local stop=$W/ctx.stop before
    before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
    "$CLI" run --mps --mem 4G --ledger "$W/ctx.ledger" -- $P holder "$stop" > "$W/ctx.out" 2>&1 &
    for _ in $(seq 200); do grep -q HOLD "$W/ctx.out" && break; sleep 0.05; done
    {
        echo "device memory used before: $before MiB, with the client: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB"
        echo "the client's view: $(grep HOLD "$W/ctx.out")"
        nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
        "$CLI" status "$W/ctx.ledger"
    } 2>&1 | tee "$OUT/ctx.txt"
    touch "$stop"
    wait
}

# fault KIND: a victim replaying graphs and a faulting tenant, both under cushare --mps.
fault() {
    local kind=$1 vp fp
    "$CLI" run --mps --sm 50 --policy force --ledger "$W/v-$kind.ledger" -- $P victim 10 \
        > "$W/victim-$kind.out" 2>&1 &
    vp=$!
    for _ in $(seq 300); do grep -q "VICTIM t=" "$W/victim-$kind.out" && break; sleep 0.05; done
    "$CLI" run --mps --sm 50 --policy force --ledger "$W/f-$kind.ledger" -- $P fault \
        "$([ "$kind" = kill ] && echo spin || echo illegal)" > "$W/fault-$kind.out" 2>&1 &
    fp=$!
    if [ "$kind" = kill ]; then
        for _ in $(seq 300); do grep -q "launching" "$W/fault-$kind.out" && break; sleep 0.05; done
        sleep 1
        pkill -9 -f "probe.py fault spin"
    fi
    wait "$fp"
    echo "fault ($kind) tenant: exit $?; $(grep FAULT "$W/fault-$kind.out" | tail -2 | tr '\n' ' ')"
    wait "$vp"
    echo "victim: exit $?; $(grep -E "VICTIM (error|survived)" "$W/victim-$kind.out")"
    grep -E "VICTIM t=" "$W/victim-$kind.out" | tail -2 | sed 's/^/  /'
    echo "daemon after: $("$CLI" mps status 2>&1 | tr '\n' ' ')"
    touch "$W/after-$kind.stop"
    echo "new client: $("$CLI" run --mps --mem 2G --ledger "$W/n-$kind.ledger" -- $P holder "$W/after-$kind.stop" 2>&1 | tail -1)"
    for l in v f n; do
        echo "ledger $l-$kind:"
        "$CLI" status "$W/$l-$kind.ledger" 2>&1 | sed -n '2p;5,8p' | sed 's/^/  /'
    done
}

step_faults() {
    "$CLI" mps start > /dev/null || return 1
    { fault illegal; fault kill; } 2>&1 | tee "$OUT/faults.txt"
}

bench() {
    local name=$1
    shift
    "$CLI" bench limiter --mps --secs "$SECS" --warmup "$WARMUP" --runs "${RUNS:-1}" \
        --start-delay "${START_DELAY:-6}" --launchbound none --launchcost none \
        --out "$OUT/bench-$name" "$@" > "$OUT/bench-$name.log" 2>&1
    local rc=$?
    cat "$OUT/bench-$name.log"
    echo "bench-$name $([ $rc = 0 ] && echo PASS || echo FAIL): $(tail -1 "$OUT/bench-$name.log")" >> "$OUT/summary.txt"
}

step_bench() {
    bench full --limits 10,25,50,75 --mix 25+75 --tolerance 5 --conserve 95 \
        --workload "matmul=python3 $GPU_ROOT/bench/limiter/matmul.py" \
        --workload "elementwise=$B/limiter_workload elementwise"
    bench graph --limits none --mix 25+25+25+25 --mix 25+25+25 --mps-gain 2 --tolerance 5 --conserve 90 \
        --workload "graph=python3 $G"
}

step_turns() {
    CUSHARE_MPS_TURNS=${TURNS:-filling} bench turns-pairs --limits none --mix 25+75 --tolerance 5 \
        --conserve 95 --workload "matmul=python3 $GPU_ROOT/bench/limiter/matmul.py" \
        --workload "elementwise=$B/limiter_workload elementwise"
    CUSHARE_MPS_TURNS=${TURNS:-filling} bench turns-graph --limits none --mix 25+25+25+25 --mps-gain 2 \
        --tolerance 5 --conserve 90 --workload "graph=python3 $G"
}

for s in $steps; do
    echo "== $s"
    "step_$s" || echo "$s FAIL" >> "$OUT/summary.txt"
done
"$CLI" mps stop --force
echo "== summary"
cat "$OUT/summary.txt"
