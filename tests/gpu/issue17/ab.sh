#!/usr/bin/env bash
# Issue 17: which window settings conserve the most work for the graph-replay
# workload (the one mix that missed 97 %). One device call:
#   tests/gpu/issue17/ab.sh BUILD_DIR OUT_DIR [VARIANT...]
# A VARIANT is NAME=ENV[,ENV...], e.g. lead4=CUSHARE_SM_WINDOW_LEAD_PCT=4;
# default: base (50 ms, no lead), lead4, p100 (100 ms), p100lead2. Each runs
# `cushare bench limiter` on the graph workload at --sm 50 and the 20/30/50
# mix, RUNS times (default 2), into OUT/NAME/; OUT/summary.txt has the mix.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 8 "$0" "$@"
shift 2
variants=${*:-base=CUSHARE_SM_PERIOD_US=50000 lead4=CUSHARE_SM_WINDOW_LEAD_PCT=4 \
    p100=CUSHARE_SM_PERIOD_US=100000 p100lead2=CUSHARE_SM_PERIOD_US=100000,CUSHARE_SM_WINDOW_LEAD_PCT=2}
cd "$GPU_ROOT" || exit 1
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli || exit 1
: > "$OUT/summary.txt"
for v in $variants; do
    name=${v%%=*} envs=${v#*=}
    IFS=, read -r -a kv <<< "$envs"
    env "${kv[@]}" "$B/cushare" bench limiter --secs "${SECS:-3}" --warmup "${WARMUP:-1}" \
        --runs "${RUNS:-2}" --limits 50 --mix 20+30+50 --tolerance 2 --conserve 97 \
        --start-delay "${START_DELAY:-6}" --launchbound none --launchcost none --out "$OUT/$name" \
        --workload "graph=python3 $GPU_ROOT/bench/limiter/graph.py" > "$OUT/$name.log" 2>&1
    { echo "== $name ($envs)"; grep -E "tenant|together" "$OUT/$name.log"; } | tee -a "$OUT/summary.txt"
done
