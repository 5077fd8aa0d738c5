#!/usr/bin/env bash
# node_names: a tenant chooses its ledger's name. One named with terminal
# escapes that clear and conceal a screen and with bytes that are not
# UTF-8, beside an honest one: root's `cushare top` prints no escape and
# still lists both, `status --json` is valid JSON, promtool accepts the
# exporter's text and a real Prometheus scrapes it (a label that is not
# UTF-8 would make it drop the whole target: every tenant's metrics).
# And `cushare status` on a FIFO planted at a ledger's path returns at
# once, refusing it.
. "$(dirname "$0")/common.sh" names
for tool in promtool prometheus curl python3; do
  command -v $tool >/dev/null ||
    { echo "SKIP: $tool is not installed (apt-get install prometheus curl python3; .ci/run does)"; exit 77; }
done

EVIL=$'x\e[2J\e[H\e[8m\xff\xfe"\\q'
tenant a 1g 0
tenant "$EVIL" 1g 0
wait_for 30 "2 tenants registered and live" tenants_live 2

python3 -m json.tool "$T/node.json" >/dev/null || fail "status --json is not valid JSON: $(head -c 600 "$T/node.json" | od -c | head)"

"$CLI" top --once --no-scan --interval 100 >"$T/top.out" 2>"$T/top.err" || fail "top failed: $(cat "$T/top.err")"
if LC_ALL=C grep -q $'\e' "$T/top.out"; then fail "top printed an escape: $(od -c "$T/top.out" | head -20)"; fi
grep -q ' a\.ledger ' "$T/top.out" || fail "top does not list the honest tenant: $(cat "$T/top.out")"
grep -q 'x?\[2J?\[H?\[8m??"\\' "$T/top.out" || fail "top does not show the hostile name made safe: $(cat -v "$T/top.out")"

start_exporter
has_both() { up && grep -q 'ledger="[^"]*/a\.ledger"' "$T/metrics" && grep -q 'ledger="[^"]*/x' "$T/metrics"; }
wait_for 20 "both tenants in the metrics" has_both
promtool check metrics <"$T/metrics" >"$T/promtool.out" 2>&1
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 3 ] || fail "promtool rejects the metrics (rc $rc): $(cat "$T/promtool.out")"
if grep -v "camelCase" "$T/promtool.out" | grep -q .; then fail "promtool: $(cat "$T/promtool.out")"; fi

start_prometheus
q() { curl -s --max-time 2 "http://127.0.0.1:$PPORT/api/v1/query" --data-urlencode "query=$1" >"$T/query"; }
# The target is up (a scrape Prometheus rejects marks it down) and the
# hostile tenant is there, its name made valid UTF-8.
scraped() { q 'up{job="cushare"}' && grep -q '"value":\[[0-9.]*,"1"\]' "$T/query" &&
            q 'cushare_tenant_memory_limit_bytes{ledger=~".*/a.ledger"}' &&
            grep -q '"value":\[[0-9.]*,"1073741824"\]' "$T/query" &&
            q 'count(cushare_tenant_memory_limit_bytes{ledger=~".*/x.*"})' &&
            grep -q '"value":\[[0-9.]*,"1"\]' "$T/query"; }
wait_for 60 "Prometheus to scrape both tenants ($(cat "$T/query" 2>/dev/null); $(grep -i 'invalid\|error' "$T/prometheus.log" | tail -2))" scraped
kill "$PROM"; wait "$PROM" 2>/dev/null
# An administrator's command never hangs on a file another party chose:
# a FIFO where a ledger should be is refused at once.
mkfifo "$T/fifo.ledger"
timeout $((20 * SCALE)) "$CLI" status "$T/fifo.ledger" >"$T/fifo.out" 2>&1
rc=$?
[ $rc -ne 124 ] || fail "cushare status hangs on a FIFO at the ledger's path"
[ $rc -ne 0 ] || fail "cushare status accepted a FIFO as a ledger: $(cat "$T/fifo.out")"
grep -q "not a regular file" "$T/fifo.out" || fail "status on a FIFO: $(cat "$T/fifo.out")"
echo "PASS"
