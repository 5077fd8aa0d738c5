# Shared by the node tests: tenants on the fake driver, registered in a
# private registry, and waits on conditions with CS_TEST_SCALE deadlines.
set -u
B=${CS_BUILD_DIR:?}
SCALE=${CS_TEST_SCALE:-1}
T=$B/tmp/node_$1
rm -rf "$T"; mkdir -p "$T/reg"; chmod 1777 "$T/reg"
export CUSHARE_REGISTRY=$T/reg/cushare-ledgers
export CUSHARE_BOARD=$T/reg/cushare-board
export FAKECUDA_STATE=$T/fake.state
export FAKECUDA_NS_PER_BLOCK=1000
CLI=$B/cushare
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# tenant NAME MEM SM [POLICY]: a limiter_worker launching for 120 s.
tenant() {
  local env=(CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/$1.ledger" CUDA_DEVICE_MEMORY_LIMIT="$2")
  [ "$3" != 0 ] && env+=(CUDA_DEVICE_SM_LIMIT="$3" GPU_CORE_UTILIZATION_POLICY=force)
  env "${env[@]}" LD_PRELOAD="$B/libcushare.so" "$B/limiter_worker" --secs 120 --blocks 2000 \
      --sync 1 >"$T/$1.out" 2>&1 &
  PIDS+=($!)
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local limit=$(( $1 * SCALE )) what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s waiting for: $what"
    sleep 0.1
  done
}

node_json() { "$CLI" status --json --no-scan >"$T/node.json" 2>"$T/node.err"; }
tenants_live() { node_json && [ "$(grep -o '"state":"live"' "$T/node.json" | wc -l)" -ge "$1" ]; }

# start_exporter: `cushare exporter` on a free loopback port (PORT, its pid
# EXP); up fetches /metrics into $T/metrics. Fails the test when it does not
# serve. A taken port is said at once, so another is tried. Served means
# ours said so: another test's exporter on a port we also drew would
# answer `up` while ours exits.
up() { curl -s --max-time 2 "http://127.0.0.1:$PORT/metrics" >"$T/metrics"; }
ours_up() { grep -q '^cushare: exporter: serving' "$T/exporter.err" && kill -0 $EXP 2>/dev/null && up; }
start_exporter() {
  for try in 1 2 3 4 5 6 7 8; do
    PORT=$(( 20000 + (RANDOM % 20000) ))
    "$CLI" exporter --listen 127.0.0.1:$PORT --no-scan --interval 200 2>"$T/exporter.err" &
    EXP=$!
    PIDS+=($EXP)
    for i in $(seq 1 $((50 * SCALE))); do ours_up && break; kill -0 $EXP 2>/dev/null || break; sleep 0.1; done
    ours_up && return 0
  done
  fail "exporter did not serve: $(cat "$T/exporter.err")"
}

# start_prometheus: a real Prometheus scraping the exporter at PORT every
# second: loopback (port PPORT), temporary storage, its pid PROM. Started
# means it said it is ready and still runs: a port another test holds makes
# it exit on the bind error, so another port is drawn.
prom_ready() { grep -q 'Server is ready to receive web requests' "$T/prometheus.log" && kill -0 $PROM 2>/dev/null; }
start_prometheus() {
  cat >"$T/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: cushare
    static_configs: [{targets: ["127.0.0.1:$PORT"]}]
YML
  for try in 1 2 3 4 5 6 7 8; do
    PPORT=$(( 20000 + (RANDOM % 20000) ))
    [ "$PPORT" != "$PORT" ] || continue
    rm -rf "$T/tsdb"
    prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
      --web.listen-address=127.0.0.1:$PPORT >"$T/prometheus.log" 2>&1 &
    PROM=$!
    PIDS+=($PROM)
    for i in $(seq 1 $((300 * SCALE))); do prom_ready && break; kill -0 $PROM 2>/dev/null || break; sleep 0.1; done
    prom_ready && return 0
    kill -9 $PROM 2>/dev/null
  done
  fail "Prometheus did not start: $(tail -3 "$T/prometheus.log")"
}
