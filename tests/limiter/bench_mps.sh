#!/bin/sh
# `cushare bench limiter --mps` end to end on the fake driver and the fake
# MPS control daemon (CUSHARE_MPS_CONTROL): the pipeline, not its
# precision (limiter_mps and limiter_share_* test that; a target missed in
# a 0.5 s run on a shared CPU is printed, not failed).
#   bench_mps.sh CUSHARE WORK_DIR started|joined|usage
#   started  no daemon runs: the bench starts one, prints the limit row under
#            MPS and the side-by-side table of the mix, writes the new CSV rows
#            and limiter-share.gp, and stops the daemon at the end
#   joined   a daemon runs (`cushare mps start`): the bench joins it and
#            leaves it running
#   usage    --mps-gain without --mps, and --mps with two visible GPUs: exit 2
#            with one message, before any run
# Exit status of the bench: 0, or 1 with its FAIL verdict line.
set -u
cli=$1 dir=$2 case=$3
rm -rf "$dir" && mkdir -p "$dir" || exit 1
# The daemon's socket path must fit a unix address: a short directory.
export CUSHARE_MPS_DIR="$(mktemp -d /tmp/cs-bm.XXXXXX)" || exit 1
export FAKECUDA_STATE="$dir/gpu.state"
trap '"$cli" mps stop --force > /dev/null 2>&1; rm -rf "$CUSHARE_MPS_DIR"' EXIT
out=$dir/out.txt csv=$dir/limiter-bench.csv

fail() { cat "$out"; echo "FAIL: $*"; exit 1; }

bench() {
    nice -n -10 "$cli" bench limiter --mps --secs 0.5 --warmup 0.2 --limits 50 --mix 25+75 \
        --start-delay 0.5 --launchbound none --launchcost none --out "$dir" > "$out" 2>&1
    rc=$?
    [ $rc -le 1 ] || fail "cushare bench limiter --mps exited $rc"
    [ $rc -eq 0 ] || grep -q '^FAIL: [0-9]* targets\? missed' "$out" ||
        fail "cushare bench limiter --mps exited 1 without a verdict"
    grep -q -- '^--sm 50 (force) .*%' "$out" || fail "no time-sliced limit row"
    grep -q -- '^--sm 50 (force, MPS) .*%' "$out" || fail "no limit row under MPS"
    grep -q '^mix 25+75  *time-sliced  *concurrent  *bare MPS$' "$out" ||
        fail "no side-by-side table header"
    for row in 'tenant A --sm 25' 'tenant B --sm 75' 'together'; do
        grep -q "^$row  *[0-9.]*%  *[0-9.]*%  *[0-9.]*%$" "$out" ||
            fail "no '$row' row with a share in each of the three modes"
    done
    grep -q '^A:B ratio (concurrent) ' "$out" || fail "no concurrent A:B ratio"
    grep -q '^concurrent / time-sliced  *[0-9.]*x  (not judged' "$out" ||
        fail "no concurrent / time-sliced line (not judged without --mps-gain)"
    grep -q '^concurrent / bare MPS  *[0-9.]*x  >= 0.90x ' "$out" ||
        fail "no judged concurrent / bare MPS line"
    # The old rows as they were, then the new ones.
    for row in limit,50 pair,25 pair,75 mps_limit,50 mps_mix,25 mps_mix,75 bare_mps_mix,25 \
               bare_mps_mix,75; do
        grep -q "^elementwise,$row,[0-9.]*,[0-9.]*$" "$csv" || fail "no CSV row $row"
    done
    grep -q '^"elementwise 25+75" [0-9.]* [0-9.]* [0-9.]*$' "$dir/limiter-share.gp" ||
        fail "limiter-share.gp has no bars for the mix"
}

# The daemon's state as `cushare mps status` says it.
daemon() { "$cli" mps status | grep -o 'running\|stopped' | head -1; }

case $case in
started)
    bench
    grep -q '^-- concurrent: MPS control daemon .* started by this bench' "$out" ||
        fail "the bench did not say it started the daemon"
    grep -q '^MPS control daemon of .*: stopped' "$out" || fail "the bench did not stop it"
    [ "$(daemon)" = stopped ] || fail "the daemon the bench started still runs"
    ;;
joined)
    "$cli" mps start > "$dir/start.txt" 2>&1 || { cat "$dir/start.txt"; exit 1; }
    bench
    grep -q '^-- concurrent: MPS control daemon .* joined by this bench' "$out" ||
        fail "the bench did not join the running daemon"
    grep -q '^MPS control daemon of .*: stopped' "$out" && fail "the bench stopped a daemon it joined"
    [ "$(daemon)" = running ] || fail "the daemon the bench joined is gone"
    ;;
usage)
    "$cli" bench limiter --mps-gain 2 --out "$dir" > "$out" 2>&1
    [ $? -eq 2 ] || fail "--mps-gain without --mps: not a usage error"
    grep -q 'add --mps' "$out" || fail "the message does not name --mps"
    rm -f "$FAKECUDA_STATE"
    FAKECUDA_DEVICES=2 "$cli" bench limiter --mps --out "$dir" > "$out" 2>&1
    [ $? -eq 2 ] || fail "--mps with two visible GPUs: not a usage error"
    grep -q 'CUDA_VISIBLE_DEVICES' "$out" || fail "the message does not name CUDA_VISIBLE_DEVICES"
    grep -q '^==' "$out" && fail "the bench ran before refusing"
    [ "$(wc -l < "$out")" -eq 1 ] || fail "more than one message"
    ;;
*)
    echo "bench_mps.sh: unknown case $case (started, joined, usage)"
    exit 2
    ;;
esac
cat "$out"
echo "PASS: bench limiter --mps, $case"
