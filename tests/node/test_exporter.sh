#!/usr/bin/env bash
# node_exporter: `cushare exporter` serves the node view as Prometheus text:
# promtool (Debian `prometheus`) accepts it (HAMi's camelCase names draw
# only its naming lint), idle connections beyond the cap do not lock a
# scraper out for longer than the read deadline, and a real Prometheus
# server on loopback scrapes it once and answers a query about a tenant.
. "$(dirname "$0")/common.sh" exporter
for tool in promtool prometheus curl; do
  command -v $tool >/dev/null ||
    { echo "SKIP: $tool is not installed (`make deps` installs prometheus and curl)"; exit 77; }
done

tenant a 1g 25
tenant b 2g 0
wait_for 30 "2 tenants registered and live" tenants_live 2

start_exporter

has_tenants() { up && grep -q 'cushare_tenant_memory_limit_bytes{ledger="[^"]*/a\.ledger".*} 1073741824' "$T/metrics" &&
                grep -q 'cushare_tenant_sm_limit_ratio{ledger="[^"]*/a\.ledger".*} 0.25' "$T/metrics" &&
                grep -q 'vGPU_device_memory_limit_in_bytes{.*} 2147483648' "$T/metrics"; }
wait_for 20 "both tenants in the metrics ($(head -c 1500 "$T/metrics"))" has_tenants

# promtool: no parse error; lint findings only about HAMi's own names.
promtool check metrics <"$T/metrics" >"$T/promtool.out" 2>&1
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 3 ] || fail "promtool rejects the metrics (rc $rc): $(cat "$T/promtool.out")"
if grep -v "camelCase" "$T/promtool.out" | grep -q .; then
  fail "promtool lint: $(cat "$T/promtool.out")"
fi
grep -v -E '^(# (HELP|TYPE) )?(vGPU_|Device_|Host)' "$T/metrics" | promtool check metrics ||
  fail "promtool lint of cushare's own names"

# Idle connections filling the cap: a scrape still gets through once the
# read deadline (5 s) closes them.
for i in $(seq 1 20); do exec {fd}<>/dev/tcp/127.0.0.1/$PORT || fail "connect $i"; done
curl -s --max-time $((15 * SCALE)) "http://127.0.0.1:$PORT/metrics" >/dev/null ||
  fail "a scrape behind 20 idle connections was not served within 15 s"

# A real Prometheus: loopback, temporary storage, one scrape, one query.
start_prometheus
q() { curl -s --max-time 2 "http://127.0.0.1:$PPORT/api/v1/query" \
        --data-urlencode 'query=cushare_tenant_memory_limit_bytes{ledger=~".*/a.ledger"}' >"$T/query"; }
scraped() { q && grep -q '"value":\[[0-9.]*,"1073741824"\]' "$T/query"; }
wait_for 60 "Prometheus to scrape the exporter and answer ($(cat "$T/query" 2>/dev/null))" scraped
kill "$PROM"; wait "$PROM" 2>/dev/null
echo "PASS"
