#!/usr/bin/env bash
# node_mps: the node view says which processes are MPS clients (docs/mps.md,
# docs/node.md). Tenant m runs under `cushare run --mps`, a client of the
# fake MPS control daemon (CUSHARE_MPS_CONTROL) that the fake NVML lists in
# nvmlDeviceGetMPSComputeRunningProcesses_v3; tenant a is time-sliced beside
# it. `status --json` gives m's process "mode":"mps" and a's "time-sliced",
# `top --once` flags m's row MPS and not a's, the exporter's
# cushare_process_mps is 1 for m's process and 0 for a's; with that NVML
# call failing nobody is marked and nothing is said. The daemon is stopped
# at the end (and at exit).
. "$(dirname "$0")/common.sh" mps
command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }
# A short directory: the daemon's socket path must fit a unix address.
export CUSHARE_MPS_DIR=$(mktemp -d /tmp/cushare-node-mps.XXXXXX)
stop_daemon() { "$CLI" mps stop --force >"$T/mps-stop.out" 2>&1; }
trap 'cleanup; stop_daemon; rm -rf "$CUSHARE_MPS_DIR"' EXIT

tenant a 1g 0
"$CLI" run --mps --exec --mem 1g --ledger "$T/m.ledger" -- "$B/limiter_worker" --secs 120 \
    --blocks 2000 --sync 1 >"$T/m.out" 2>&1 &
M=$!
PIDS+=($M)
A=${PIDS[0]}

# proc JSON PID MODE: the node JSON lists process PID with that mode.
proc() { grep -Eq "\"pid\":$1,\"host_pid\":[0-9]+,\"alive\":true,\"suspended\":(true|false),\"mode\":\"$2\"" "$T/node.json"; }
modes() { node_json && proc "$M" mps && proc "$A" time-sliced; }
wait_for 30 "m's process as mps, a's as time-sliced ($(cat "$T/node.json" 2>/dev/null | head -c 1500))" modes
[ -s "$T/node.err" ] && fail "status --json said: $(cat "$T/node.err")"

# top: m's row flagged MPS, a's not; every line within 80 columns.
top_m() { "$CLI" top --once --no-scan --interval 200 >"$T/top" 2>&1 && grep -Eq "^  m\.ledger .* $1 " "$T/top"; }
top_m MPS || fail "m's row is not flagged MPS: $(cat "$T/top")"
grep -E '^  a\.ledger ' "$T/top" | grep -q MPS && fail "a's row is flagged MPS: $(cat "$T/top")"
perl -ne 'chomp; exit 1 if length > 80' "$T/top" || fail "a line is wider than 80 columns: $(cat "$T/top")"

# exporter: the gauge, 1 for m's process and 0 for a's.
start_exporter
gauge() { grep -Eq "^cushare_process_mps\{ledger=\"[^\"]*/$1\.ledger\",.*,pid=\"$2\",host_pid=\"[0-9]+\"\} $3\$" "$T/metrics"; }
scraped() { up && gauge m "$M" 1 && gauge a "$A" 0; }
wait_for 20 "cushare_process_mps 1 for m, 0 for a ($(grep -A6 cushare_process_mps "$T/metrics"))" scraped
grep -q '^# TYPE cushare_process_mps gauge$' "$T/metrics" || fail "no TYPE line for cushare_process_mps"
if command -v promtool >/dev/null; then
  grep -v -E '^(# (HELP|TYPE) )?(vGPU_|Device_|Host)' "$T/metrics" | promtool check metrics ||
    fail "promtool rejects cushare's metrics"
fi

# Suspended as well: both flags fit the column.
"$CLI" suspend "$T/m.ledger" >/dev/null || fail "cushare suspend"
wait_for 20 "m's row flagged SUSP MPS ($(cat "$T/top"))" top_m 'SUSP MPS'

# NVML's MPS list failing: display only, so nobody is marked and no error.
FAKECUDA_FAIL_nvmlDeviceGetMPSComputeRunningProcesses_v3=3 node_json || fail "status --json failed"
proc "$M" time-sliced || fail "m marked without NVML's MPS list: $(head -c 1500 "$T/node.json")"
[ -s "$T/node.err" ] && fail "status --json said: $(cat "$T/node.err")"

stop_daemon || fail "mps stop --force: $(cat "$T/mps-stop.out")"
echo "PASS"
