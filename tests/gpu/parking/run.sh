#!/usr/bin/env bash
# Parking on the GPU (docs/parking.md): more tenants than the card holds.
# From the repository root, after `make`, as root on the GPU machine:
#     tests/gpu/parking/run.sh
# Here, against the fake driver with C stand-ins for the LLM tenants:
#     FAKE=1 tests/gpu/parking/run.sh
# Phases: the reference run (every tenant's prompts generated alone, one
# process); the driver's own park/wake of a plain PROBE_MIB process
# (ckpt_ctl, no cushare); the same size under cushare, parked by
# `cushare park` and woken by its next call; then TENANTS tenants with
# BUDGET each (more than the card in sum), CUSHARE_PARK on, generating in
# BURSTS bursts after seeded idle gaps, nvidia-smi sampled throughout.
# Writes into $OUT (default /tmp/parking-out): summary.txt (verdicts),
# run.log, reference.jsonl, bare.txt, probe.txt, tenants.jsonl,
# status.jsonl, smi.csv, node.jsonl (the node view every 2 s during the
# tenants' phase), tenants/ (each tenant's output and errors). Exit 0 when
# every verdict PASSes. Knobs (env): TENANTS 8, BUDGET 24g, BALLAST_GIB 16,
# BURSTS 3, GAP_S "3 10", PROBE_MIB 8192, CYCLES 8, CUSHARE_PARK 150,
# IDLE_MS 2000, TENANT_S 330 (each tenant's time limit), PHASES
# "reference driver cushare tenants" (a subset re-runs part: the report
# judges what it finds), BUILD build.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
B=${BUILD:-$ROOT/build}
OUT=${OUT:-/tmp/parking-out}
FAKE=${FAKE:-0}
CLI=$B/cushare
LIB=$B/libcushare.so
if [ ! -x "$CLI" ] || [ ! -f "$LIB" ]; then
    echo "parking: no $CLI or $LIB: run make first" >&2
    exit 2
fi
mkdir -p "$OUT" && rm -rf "${OUT:?}"/*
mkdir -p "$OUT/tenants"
PHASES=" ${PHASES:-reference driver cushare tenants} "
want() { [[ $PHASES == *" $1 "* ]]; }
exec > >(tee "$OUT/run.log") 2>&1
W=$(mktemp -d /tmp/cushare-parking.XXXXXX)
PIDS=()
cleanup() {
    [ -n "${SMI:-}" ] && kill "$SMI" 2>/dev/null
    [ -n "${NODE:-}" ] && kill "$NODE" 2>/dev/null
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
trap 'echo "parking: stopped by a signal [$(date +%T)]"; exit 124' TERM INT

TENANTS=${TENANTS:-8}
BUDGET=${BUDGET:-24g}
BURSTS=${BURSTS:-3}
PROBE_MIB=${PROBE_MIB:-8192}
CYCLES=${CYCLES:-8}
export CUSHARE_PARK=${CUSHARE_PARK:-150}
if [ "$FAKE" = 1 ]; then
    export LD_LIBRARY_PATH=$B/fakecuda PATH=$ROOT/tests/gpu/selftest/bin:$PATH
    export FAKECUDA_STATE=$W/gpu.state FAKECUDA_MEM=${FAKECUDA_MEM:-100g}
    export FAKECUDA_CTX_BYTES=$((518 << 20)) FAKECUDA_CTX_EXTRA_BYTES=$((518 << 20))
    export HOLD_NO_DATA=1 # the fake keeps no data
    BALLAST_GIB=${BALLAST_GIB:-16}
    GAP_S=${GAP_S:-"0.2 0.8"}
    IDLE_MS=${IDLE_MS:-100}
    STAGGER=0.1
    LINK=(-L"$B/fakecuda" -lcuda)
else
    BALLAST_GIB=${BALLAST_GIB:-16}
    GAP_S=${GAP_S:-"3 10"}
    IDLE_MS=${IDLE_MS:-2000}
    STAGGER=2
    LINK=(-L"${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" -lcuda)
fi
export CUSHARE_PARK_IDLE_MS=$IDLE_MS CUSHARE_REGISTRY=$W/registry CUSHARE_SHARE_DIR=$W
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
cc -O2 -I"$CUDA_INC" "$HERE/hold.c" "${LINK[@]}" -o "$W/hold" || exit 1
cc -O2 -I"$CUDA_INC" "$HERE/ckpt_ctl.c" -ldl -o "$W/ckpt_ctl" || exit 1
echo "parking: FAKE=$FAKE tenants $TENANTS x $BUDGET (ballast $BALLAST_GIB GiB), bursts $BURSTS," \
     "gaps $GAP_S s, probe $PROBE_MIB MiB x $CYCLES, CUSHARE_PARK=$CUSHARE_PARK idle $IDLE_MS ms"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader

( while :; do
      nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits | head -1
      sleep 0.2
  done ) > "$OUT/smi.csv" 2>/dev/null &
SMI=$!

# ---- a holder process driven through a fifo -----------------------------
declare -A FD
start_hold() { # NAME MIB [VAR=VALUE...]: starts it, sets HOLD_PID
    local name=$1 mib=$2
    shift 2
    mkfifo "$W/$name.in"
    env "$@" "$W/hold" "$mib" < "$W/$name.in" > "$W/$name.out" 2> "$W/$name.err" &
    PIDS+=($!)
    exec {fd}> "$W/$name.in"
    FD[$name]=$fd
    for _ in $(seq 600); do grep -q '^ready' "$W/$name.out" 2>/dev/null && break; sleep 0.1; done
    HOLD_PID=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/$name.out")
    [ -n "$HOLD_PID" ] || { echo "parking: $name did not start:"; cat "$W/$name.err"; exit 1; }
}
ask() { # NAME CMD: prints its answer line
    local name=$1 n
    n=$(wc -l < "$W/$name.out")
    echo "$2" >&"${FD[$name]}"
    for _ in $(seq 1200); do
        [ "$(wc -l < "$W/$name.out")" -gt "$n" ] && { tail -1 "$W/$name.out"; return 0; }
        sleep 0.1
    done
    echo "timeout"
    return 1
}
quit_hold() { # NAME PID: asks it to exit and waits for it
    echo q >&"${FD[$1]}"
    for _ in $(seq 300); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done
    echo "parking: $1 did not exit"
}
park_field() { # LEDGER FIELD: a field of its park record
    "$CLI" status --json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['park']['$2'])"
}

# ---- 1. the reference: every tenant's prompts, alone -------------------
if want reference; then
echo "== reference run (alone) [$(date +%T)]"
if [ "$FAKE" = 1 ]; then
    "$W/hold" --reference "$TENANTS" "$BURSTS" > "$OUT/reference.jsonl"
else
    timeout 180 python3 "$HERE/llm_tenant.py" --reference "$TENANTS" "$BURSTS" \
        > "$OUT/reference.jsonl" 2> "$W/reference.err" || tail -5 "$W/reference.err"
fi
fi

# ---- 2. the driver's own park and wake beside cushare's -----------------
# A plain PROBE_MIB process cycled by the driver's checkpoint API alone
# (ckpt_ctl, no cushare) and the same size under cushare (parked by
# `cushare park`, woken by its next call), their cycles alternated so that
# whatever drifts on the host (page cache, clocks, other tenants' leftovers)
# weighs on both alike.
PL=$W/probe.ledger
if want driver || want cushare; then
echo "== $PROBE_MIB MiB, $CYCLES cycles: driver alone ($(want driver && echo on || echo off))," \
     "under cushare ($(want cushare && echo on || echo off)) [$(date +%T)]"
if want driver; then
    start_hold bare "$PROBE_MIB"
    BARE=$HOLD_PID
fi
if want cushare; then
    start_hold probe "$PROBE_MIB" LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT="$BUDGET" \
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$PL"
    PROBE=$HOLD_PID
    ask probe t > /dev/null
fi
for i in $(seq "$CYCLES"); do
    if want driver; then
        timeout 120 "$W/ckpt_ctl" "$BARE" 1 | sed "s/^cycle 0 /cycle $((i - 1)) /" >> "$OUT/bare.txt"
    fi
    if want cushare; then
        "$CLI" park "$PL" || echo "parking: cycle $i: park failed"
        echo "park_ms $(park_field "$PL" last_park_ns | awk '{ printf "%.3f", $1 / 1e6 }')" >> "$OUT/probe.txt"
        t=$(ask probe t)
        echo "wake_ms $(echo "$t" | awk '{ printf "%.3f", $2 / 1e3 }')" >> "$OUT/probe.txt"
        echo "wake_ledger_ms $(park_field "$PL" last_wake_ns | awk '{ printf "%.3f", $1 / 1e6 }')" \
            >> "$OUT/probe.txt"
    fi
done
if want driver; then
    cat "$OUT/bare.txt"
    echo "bare data after the cycles: $(ask bare v)"
    quit_hold bare "$BARE"
fi
if want cushare; then
    cat "$OUT/probe.txt"
    echo "probe data after the cycles: $(ask probe v)"
    quit_hold probe "$PROBE"
fi
fi

# ---- 3. more tenants than the card holds --------------------------------
if want tenants; then
( while :; do "$CLI" status --json 2>/dev/null; sleep 2; done ) > "$OUT/node.jsonl" &
NODE=$!
echo "== $TENANTS tenants x $BUDGET, bursty [$(date +%T)]"
read -r GA GB <<< "$GAP_S"
TPIDS=()
for i in $(seq 0 $((TENANTS - 1))); do
    if [ "$FAKE" = 1 ]; then
        cmd=("$W/hold" $((BALLAST_GIB * 1024)) --bursts "$BURSTS" --seed "$i" --gap-ms
             "$(awk -v g="$GA" 'BEGIN { print int(g * 1000) }')"
             "$(awk -v g="$GB" 'BEGIN { print int(g * 1000) }')")
    else
        cmd=(python3 "$HERE/llm_tenant.py" --seed "$i" --bursts "$BURSTS" --gap-s "$GA" "$GB"
             --ballast-gib "$BALLAST_GIB")
    fi
    ( env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT="$BUDGET" \
          CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/t$i.ledger" timeout "${TENANT_S:-330}" "${cmd[@]}" \
          > "$OUT/tenants/t$i.jsonl" 2> "$OUT/tenants/t$i.err"
      echo "{\"tenant\": $i, \"exit\": $?}" >> "$OUT/tenants/t$i.jsonl" ) &
    TPIDS+=($!)
    PIDS+=($!)
    sleep "$STAGGER"
done
for p in "${TPIDS[@]}"; do wait "$p"; done
for i in $(seq 0 $((TENANTS - 1))); do
    cat "$OUT/tenants/t$i.jsonl" >> "$OUT/tenants.jsonl"
    "$CLI" status --json "$W/t$i.ledger" | sed 's/^{/{"role":"tenant",/' >> "$OUT/status.jsonl"
    if [ -s "$OUT/tenants/t$i.err" ]; then
        echo "-- tenant $i stderr (last lines):"
        tail -5 "$OUT/tenants/t$i.err"
    fi
done
"$CLI" status --json "$PL" 2>/dev/null | sed 's/^{/{"role":"probe",/' >> "$OUT/status.jsonl"
kill "$NODE" 2>/dev/null
NODE=
fi
kill "$SMI" 2>/dev/null
SMI=

# ---- 4. verdicts ----------------------------------------------------------
echo "== summary ($OUT/summary.txt) [$(date +%T)]"
python3 "$HERE/report.py" "$OUT" "$FAKE" "$TENANTS" "$BURSTS" "$PROBE_MIB"
