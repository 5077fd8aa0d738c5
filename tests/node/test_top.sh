#!/usr/bin/env bash
# node_top: `cushare top` (the node view) in a pseudo-terminal (script(1))
# with four tenants on the fake driver: limits and achieved shares shown,
# a suspended tenant flagged, a tenant SIGKILLed mid-view and a ledger
# truncated under the viewer shown as GONE (the viewer survives), keys
# (expand, sort, q) work, and the terminal is left by 'q' with status 0.
. "$(dirname "$0")/common.sh" top
command -v script >/dev/null || { echo "SKIP: script(1) (util-linux) is not installed"; exit 77; }

tenant a 1g 25
tenant b 2g 50
tenant c 512m 0
tenant d 1g 20
wait_for 30 "4 tenants registered and live" tenants_live 4
"$CLI" suspend "$T/d.ledger" >/dev/null || fail "cushare suspend"

# Achieved shares over the view's window, within tolerance of the limits
# (the fake device is shared, the runner may be loaded: 0.5x .. 1x + 0.1).
share_ok() {
  node_json || return 1
  perl -e '
    local $/; my $j = <STDIN>;
    my %lim = (a => 0.25, b => 0.50);
    for my $t (keys %lim) {
      $j =~ /"ledger":"[^"]*\/$t\.ledger".*?"share":([0-9.]+|null)/s or exit 1;
      my $s = $1; exit 1 if $s eq "null" || $s < 0.5 * $lim{$t} || $s > $lim{$t} + 0.1;
    }
    $j =~ /"ledger":"[^"]*\/d\.ledger".*?"suspended":(true|false)/s && $1 eq "true" or exit 1;
    # The share decision: a limited tenant says what it would use, what it
    # is entitled to and why it is held.
    $j =~ /"ledger":"[^"]*\/b\.ledger".*?"demand":([0-9.]+),"floor":0\.5000,"entitled":([0-9.]+),"held":"(no|contended|capped|priority)"/s or exit 1;
    # c has no compute limit: its share is the NVML per-process estimate.
    $j =~ /"ledger":"[^"]*\/c\.ledger".*?"share":([0-9.]+|null),"share_source":"(\w+)"/s or exit 1;
    exit 1 if $1 eq "null" || $1 < 0.05 || $2 ne "nvml";
    exit 0;' <"$T/node.json"
}
wait_for 60 "achieved shares near the limits, c measured through NVML, d suspended (last: $(cat "$T/node.json" 2>/dev/null | head -c 300))" share_ok

mkfifo "$T/keys"
script -qfec "$CLI top --no-scan --interval 200" /dev/null <"$T/keys" >"$T/screen" 2>&1 &
TOP=$!
PIDS+=($TOP)
exec 3<>"$T/keys"
frame() { perl -0777 -ne '@f = split /\e\[H/; print $f[-1] // ""' "$T/screen"; }
shows() { frame | grep -Eq "$1"; }
wait_for 20 "four tenants on screen" shows 'd\.ledger'
for re in 'a\.ledger +0\.0 +1024 ' 'b\.ledger +0\.0 +2048 ' 'c\.ledger +0\.0 +512 ' \
          'd\.ledger .*SUSP' 'GPU 0 ' 'THR' \
          'compute: demand [0-9]+% +floor 25% +entitled [0-9]+% +gets [0-9]+% +held: [a-z]+'; do
  wait_for 10 "screen line matching '$re' ($(frame | head -c 2000))" shows "$re"
done
# Every line fits in 80 columns.
frame | perl -ne 's/\e\[[0-9;?]*[A-Za-z]//g; s/\r//g; chomp; exit 1 if length > 80' ||
  fail "a line is wider than 80 columns: $(frame)"

kill -9 "${PIDS[2]}"
wait_for 20 "the killed tenant c shown as GONE" shows 'c\.ledger .*GONE'
truncate -s 1000 "$T/a.ledger"
wait_for 20 "the truncated ledger a shown as GONE" shows 'a\.ledger .*GONE'
kill -0 "$TOP" 2>/dev/null || fail "top died: $(tail -c 500 "$T/screen")"

printf 'k\n' >&3
wait_for 10 "a tenant expanded to its processes" shows 'pid [0-9]+ +host'
printf 's' >&3
wait_for 10 "sorted by share" shows 'sort share'
printf 'q' >&3
for i in $(seq 1 $((50 * SCALE))); do kill -0 "$TOP" 2>/dev/null || break; sleep 0.1; done
kill -0 "$TOP" 2>/dev/null && fail "top did not quit on q"
wait "$TOP" || fail "top exited with status $?"
echo "PASS"
