#!/usr/bin/env bash
# Node-view acceptance on a real GPU (one H200): the node view with four tenants.
#   tests/gpu/node_view/run.sh BUILD_DIR OUT_DIR [STEP...]
# Steps (default: all): top4 exporter
#   top4     starts 4 tenants running limiter_workload elementwise for 40 s:
#            A 8 GiB sm 25, B 8 GiB sm 50 (both force), C 8 GiB sm 30 then
#            `cushare suspend`ed, D unlimited; captures `cushare top --once
#            --samples 12` (12 s of history; OUT/top4.txt, 80 columns) and
#            `cushare status --json` (OUT/top4.json). PASS: 4 tenants shown,
#            A's share 0.15..0.30, B's 0.46..0.55 or under that and flagged
#            STARVED (D, unlimited, takes the rest), C suspended, D's share
#            measured through NVML.
#   exporter `cushare exporter` beside 2 tenants: OUT/metrics.txt; PASS: it
#            serves HAMi's and cushare's tenant metrics for both.
# Every step runs under `timeout` (60 s), one line per step in OUT/summary.txt.
# About 90 s on an H200.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 16 "$0" "$@"
shift 2
steps=${*:-top4 exporter}
cd "$GPU_ROOT" || exit 1
echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli limiter_workload || exit 1
{ date -u; nvidia-smi -L; git log --oneline -1 2> /dev/null; } > "$OUT/env.txt" 2>&1

W=$OUT/work
rm -rf "$W"; mkdir -p "$W/reg"; chmod 1777 "$W/reg"
export CUSHARE_REGISTRY=$W/reg/cushare-ledgers
CLI=$B/cushare

# tenant NAME MEM SM SECS: limiter_workload elementwise in its own ledger.
tenant() {
    local env=(CUDA_DEVICE_MEMORY_SHARED_CACHE="$W/$1.ledger" CUDA_DEVICE_MEMORY_LIMIT="$2")
    [ "$3" != 0 ] && env+=(CUDA_DEVICE_SM_LIMIT="$3" GPU_CORE_UTILIZATION_POLICY=force)
    env "${env[@]}" LD_PRELOAD="$B/libcushare.so" timeout -k 5 "$4" \
        "$B/limiter_workload" elementwise --secs "$4" --warmup 0 > "$W/$1.out" 2>&1 &
}

live_count() { "$CLI" status --json --no-scan 2> /dev/null | grep -o '"state":"live"' | wc -l; }
wait_live() {
    for _ in $(seq 1 200); do [ "$(live_count)" -ge "$1" ] && return 0; sleep 0.1; done
    return 1
}

step_top4() {
    tenant A 8g 25 40; tenant B 8g 50 40; tenant C 8g 30 40; tenant D 8g 0 40
    wait_live 4 || { echo "fewer than 4 tenants live"; return 1; }
    "$CLI" suspend "$W/C.ledger" || return 1
    sleep 5
    COLUMNS=80 "$CLI" top --once --samples 12 --no-scan > "$OUT/top4.txt" 2>&1
    "$CLI" status --json --no-scan > "$OUT/top4.json" 2>&1
    "$CLI" resume "$W/C.ledger"
    cat "$OUT/top4.txt"
    wait
    python3 - "$OUT/top4.json" << 'PY'
import json, sys
v = json.load(open(sys.argv[1]))
t = {x["ledger"].rsplit("/", 1)[-1][0]: x for x in v["tenants"] if x["state"] == "live"}
share = lambda k: (t[k]["devices"][0]["share"] or 0) if k in t else -1
dev = lambda k: t.get(k, {}).get("devices", [{}])[0]
# B shares the GPU with an unlimited tenant (D): under its limit it must be
# flagged STARVED, which is what the view is for.
b_ok = 0.46 <= share("B") <= 0.55 or (0.2 <= share("B") < 0.46 and dev("B").get("starved"))
ok = (len(t) == 4 and 0.15 <= share("A") <= 0.30 and b_ok and t["C"]["suspended"]
      and dev("D").get("share_source") == "nvml" and share("D") > 0.1)
print("SUMMARY top4 %s: tenants=%d A=%.3f B=%.3f (starved %s) C.suspended=%s D=%.3f (%s) "
      "D.used=%d gpu.util=%s" % (
    "PASS" if ok else "FAIL", len(t), share("A"), share("B"), dev("B").get("starved"),
    t.get("C", {}).get("suspended"), share("D"), dev("D").get("share_source"),
    dev("D").get("used", -1), [g.get("utilization") for g in v["gpus"]]))
PY
}

step_exporter() {
    tenant E 4g 30 30; tenant F 4g 0 30
    wait_live 2 || { echo "fewer than 2 tenants live"; return 1; }
    "$CLI" exporter --listen 127.0.0.1:19416 --no-scan &
    local exp=$!
    sleep 5
    curl -s --max-time 5 http://127.0.0.1:19416/metrics > "$OUT/metrics.txt"
    kill "$exp"; wait
    local n
    n=$(grep -c '^vGPU_device_memory_limit_in_bytes' "$OUT/metrics.txt")
    if [ "$n" -ge 2 ] && grep -q '^cushare_tenant_sm_share_ratio.*E\.ledger' "$OUT/metrics.txt"; then
        echo "SUMMARY exporter PASS: $n HAMi tenant rows, $(wc -l < "$OUT/metrics.txt") lines"
    else
        echo "SUMMARY exporter FAIL: $n HAMi tenant rows (see metrics.txt)"
    fi
}

: > "$OUT/summary.txt"
for step in $steps; do
    echo "== $step"
    ( export -f tenant live_count wait_live step_top4 step_exporter
      export B W CLI OUT
      timeout -k 10 60 bash -c "step_$step" ) > "$OUT/$step.log" 2>&1
    rc=$?
    line=$(grep '^SUMMARY ' "$OUT/$step.log" | tail -1 | cut -d' ' -f2-)
    [ -n "$line" ] || line="$step FAIL: no summary (exit $rc; see $step.log)"
    echo "$line" >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
