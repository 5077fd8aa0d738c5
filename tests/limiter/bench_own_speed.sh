#!/bin/sh
# `cushare bench limiter`'s "together, own speed" row (docs/limiter.md,
# "Own speed"): with a stub workload whose rate and gpu_us follow its
# limit, the row must hold each tenant's share scaled by its gpu_us over
# the native run's, and must be absent when the workload says no gpu_us.
#   bench_own_speed.sh CUSHARE WORK_DIR
# The stub: native and unlimited 1000 steps/s at 10 us a step; at --sm L
# 10*L steps/s (share L) at 10 + L/25 us (integer division). So the 25+75
# mix is 100 % together and 25*1.1 + 75*1.3 = 27.5 + 97.5 = 125 % at own
# speed, and 20+30+50 is 20*1.0 + 30*1.1 + 50*1.2 = 20 + 33 + 60 = 113 %.
set -u
cli=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" || exit 1
unset CUDA_DEVICE_SM_LIMIT
stub=$dir/stub.sh
cat > "$stub" << 'STUB'
#!/bin/sh
lim=${CUDA_DEVICE_SM_LIMIT:-0}
rate=1000 us=10
[ "$lim" -gt 0 ] && rate=$((lim * 10)) us=$((10 + lim / 25))
case " $* " in
*" --no-gpu-us "*) echo "RESULT workload=stub rate=$rate" ;;
*) echo "RESULT workload=stub rate=$rate gpu_us=$us" ;;
esac
STUB
chmod +x "$stub"

fail() { cat "$dir/out.txt"; echo "FAIL: $*"; exit 1; }

bench() { # WORKLOAD_ARGS
    "$cli" bench limiter --secs 0.1 --warmup 0 --limits none --mix 25+75 --mix 20+30+50 \
        --runs 2 --start-delay 0 --launchbound none --launchcost none --out "$dir" \
        --workload "stub=$stub $1" > "$dir/out.txt" 2>&1
    rc=$?
    [ $rc -le 1 ] || fail "cushare bench limiter exited $rc"
}

bench ""
grep -q '^together  .* 100.0% .*runs: 100.0 100.0' "$dir/out.txt" || fail "no 'together' row at 100 %"
grep -q '^together, own speed  *125.0%  *100%  *125.0% of limits  runs: 125.0 125.0  tenants: 27.5 + 97.5  (not judged)$' \
    "$dir/out.txt" || fail "25+75: no 'together, own speed' row at 125 %"
grep -q '^together, own speed  *113.0%  *100%  *113.0% of limits  runs: 113.0 113.0  tenants: 20.0 + 33.0 + 60.0  (not judged)$' \
    "$dir/out.txt" || fail "20+30+50: no 'together, own speed' row at 113 %"

cp "$dir/out.txt" "$dir/out-gpu-us.txt"
bench --no-gpu-us
grep -q '^together  .* 100.0%' "$dir/out.txt" || fail "no 'together' row without gpu_us"
! grep -q 'own speed' "$dir/out.txt" || fail "an own-speed row though the workload said no gpu_us"
echo "PASS"
