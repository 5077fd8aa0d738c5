#!/usr/bin/env bash
# node_park: a parked tenant as the node view shows it (docs/parking.md,
# "What an operator sees"): the exporter's park metrics move with
# `cushare park` (state 2, the bytes held in host memory, one park) and
# with the wake its next call brings (state 0, nothing held, one wake).
. "$(dirname "$0")/common.sh" park
command -v curl >/dev/null ||
  { echo "SKIP: curl is not installed (\`make deps\` installs it)"; exit 77; }

# A park_tenant (tests/park/park_tenant.c) driven through a fifo.
mkfifo "$T/in"
CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/p.ledger" CUDA_DEVICE_MEMORY_LIMIT=1g \
  LD_PRELOAD="$B/libcushare.so" "$B/park_tenant" <"$T/in" >"$T/out" 2>"$T/err" &
PIDS+=($!)
exec {IN}>"$T/in"
answers() { [ "$(grep -c '^ok' "$T/out")" -ge "$1" ]; }
ready() { grep -q '^ready' "$T/out"; }
wait_for 30 "the tenant to start ($(cat "$T/err"))" ready
echo "a 64" >&$IN
wait_for 30 "its allocation ($(cat "$T/out"))" answers 1

start_exporter
metric() { grep -q "^$1{ledger=\"[^\"]*/p\\.ledger\".*} $2\$" "$T/metrics"; }
"$CLI" park "$T/p.ledger" || fail "cushare park refused an idle tenant"
parked() { up && metric cushare_tenant_park_state 2 && metric cushare_tenant_parked_bytes 67108864 &&
           metric cushare_tenant_parks_total 1; }
wait_for 20 "the metrics to say parked ($(grep park "$T/metrics"))" parked

echo c >&$IN # its next call wakes it
wait_for 30 "the woken tenant's answer ($(cat "$T/out"))" answers 2
woken() { up && metric cushare_tenant_park_state 0 && metric cushare_tenant_parked_bytes 0 &&
          metric cushare_tenant_wakes_total 1; }
wait_for 20 "the metrics to say running again ($(grep park "$T/metrics"))" woken
echo q >&$IN
echo "PASS"
