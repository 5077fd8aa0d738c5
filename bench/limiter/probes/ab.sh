#!/usr/bin/env bash
# A/B runs of a 20/30/50 mix under different settings, to find
# where a mix loses work. One device call:
#   bench/limiter/probes/ab.sh BUILD_DIR OUT_DIR [VARIANT...]
# A VARIANT is NAME=KEY=VALUE[,KEY=VALUE...]: environment for the tenants,
# except WORKLOAD (graph, the default; matmul; elementwise), WARGS (extra
# arguments of the workload, spaces as '+', e.g. WARGS=--per-sync+2000) and
# PIN=1 (every tenant on a CPU of its own: pin.sh).
# Default: base (50 ms, no lead), lead200 (200 us), p100 (100 ms), on the
# graph workload. Each runs `cushare bench limiter` at --sm 50 (LIMITS) and
# the 20/30/50 mix, RUNS times (default 2), into OUT/NAME/, with the
# limiter's once-a-second debug line in OUT/NAME.log; OUT/summary.txt has
# the mixes.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../../../tests/gpu/common.sh"
gpu_args 8 "$0" "$@"
shift 2
variants=${*:-base=CUSHARE_SM_PERIOD_US=50000 lead200=CUSHARE_SM_WINDOW_LEAD_US=200 \
    p100=CUSHARE_SM_PERIOD_US=100000}
cd "$GPU_ROOT" || exit 1
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli limiter_workload || exit 1
: > "$OUT/summary.txt"

workload() { # NAME ARGS PIN
    local pin=
    [ "$3" = 1 ] && pin="$here/pin.sh "
    case $1 in
    matmul) echo "matmul=${pin}python3 $GPU_ROOT/bench/limiter/matmul.py $2" ;;
    elementwise) echo "elementwise=$pin$B/limiter_workload elementwise $2" ;;
    *) echo "graph=${pin}python3 $GPU_ROOT/bench/limiter/graph.py $2" ;;
    esac
}

for v in $variants; do
    name=${v%%=*} envs=${v#*=} w=graph wargs="" pin=0 kv=()
    IFS=, read -r -a pairs <<< "$envs"
    for p in "${pairs[@]}"; do
        case $p in
        WORKLOAD=*) w=${p#WORKLOAD=} ;;
        WARGS=*) wargs=${p#WARGS=} wargs=${wargs//+/ } ;;
        PIN=*) pin=${p#PIN=} ;;
        *) kv+=("$p") ;;
        esac
    done
    env CUSHARE_LOG_LEVEL=debug "${kv[@]}" "$B/cushare" bench limiter --secs "${SECS:-3}" \
        --warmup "${WARMUP:-1}" --runs "${RUNS:-2}" --limits "${LIMITS:-50}" --mix 20+30+50 \
        --tolerance 2 --conserve 97 --start-delay "${START_DELAY:-6}" --launchbound none \
        --launchcost none --out "$OUT/$name" --workload "$(workload "$w" "$wargs" "$pin")" \
        > "$OUT/$name.log" 2>&1
    { echo "== $name ($envs)"; grep -E "^(native|tenant|together)" "$OUT/$name.log"; } |
        tee -a "$OUT/summary.txt"
done
