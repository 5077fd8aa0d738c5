#!/usr/bin/env bash
# park_node_budget: with parking on, `cushare run` applies the node's
# budget rule (docs/parking.md, "Turning it on"): the budgets on a GPU,
# the newcomer's included, may sum to CUSHARE_PARK % of its memory, a
# budget of 0 or above the card counting as the card. Fake GPU of 16 GiB,
# CUSHARE_PARK=150 (24 GiB), one tenant running with a 12 GiB budget.
set -u
B=${CS_BUILD_DIR:?}
SCALE=${CS_TEST_SCALE:-1}
T=$B/tmp/park_node_budget
rm -rf "$T"; mkdir -p "$T/reg"
export CUSHARE_REGISTRY=$T/reg/cushare-ledgers FAKECUDA_STATE=$T/fake.state FAKECUDA_MEM=16g
export CUSHARE_PARK=150
CLI=$B/cushare
fail() { echo "FAIL: $*" >&2; exit 1; }
mkfifo "$T/in"
"$CLI" run --mem 12g --ledger "$T/a.ledger" -- "$B/park_tenant" <"$T/in" >"$T/out" 2>&1 &
TENANT=$!
exec {IN}>"$T/in"
trap 'echo q >&$IN; wait $TENANT' EXIT
for _ in $(seq $((300 * SCALE))); do grep -q '^ready' "$T/out" && break; sleep 0.1; done
grep -q '^ready' "$T/out" || fail "the first tenant did not start: $(cat "$T/out")"
# The view must list it live before the rule can count it.
for _ in $(seq $((300 * SCALE))); do
  "$CLI" status --json >"$T/node.json" && grep -q '"state":"live"' "$T/node.json" && break
  sleep 0.1
done

expect() { # RC WHAT ARGS...: `cushare run ARGS -- true` exits RC
  local want=$1 what=$2; shift 2
  "$CLI" run "$@" -- true 2>"$T/err"
  local rc=$?
  [ $rc -eq "$want" ] || fail "$what: exit $rc, expected $want ($(cat "$T/err"))"
}
expect 0 "12 + 12 GiB fit 24 GiB" --mem 12g
expect 1 "12 + 13 GiB exceed 24 GiB" --mem 13g
grep -q "CUSHARE_PARK=150 % of its 16.0 GiB" "$T/err" || fail "the refusal does not say why: $(cat "$T/err")"
expect 1 "no budget counts as the whole card (12 + 16)"
CUSHARE_PARK=175 expect 0 "a wider opt-in admits 12 + 16 GiB (28 GiB)"
CUSHARE_PARK= expect 0 "without parking the rule does not apply"
echo "PASS"
