#!/usr/bin/env bash
# HAMi drop-in: HAMi's monitor layout decodes the region
# cushare tenants keep, and the monitor's feedback holds them back as it
# holds HAMi-core back. Run by CTest: run.sh BUILD_DIR SOURCE_DIR.
# Needs Go (Debian golang-go, installed by `make deps`): exits 77 (CTest SKIP)
# with the reason when it is missing.
set -euo pipefail
B=$1 S=$2
if ! command -v go >/dev/null 2>&1; then
  echo "SKIP: no 'go' command: the HAMi layout test needs Go 1.19+ (apt-get install golang-go)"
  exit 77
fi
T=$B/tmp/hami
rm -rf "$T"
mkdir -p "$T/ctr" "$T/gotool"
export GOCACHE=$T/gotool/cache GOPATH=$T/gotool/path GOFLAGS=-mod=mod GOPROXY=off GO111MODULE=on
(cd "$S/tests/hami/go" && go test -c -o "$T/hami.test" .)
. "$S/tests/hami/wait.sh"

echo "== golden: our struct writes the bytes HAMi's struct decodes"
"$B/hami_golden" hex > "$T/golden.hex"
diff -u "$S/tests/hami/golden_region_v1.hex" "$T/golden.hex"
"$B/hami_golden" file "$T/golden.region"
HAMI_GOLDEN=$T/golden.region "$T/hami.test" -test.run 'TestLayoutSize|TestGolden' -test.v

echo "== live: two tenants on the fake driver, decoded as HAMi's monitor decodes"
cache=$T/ctr/0f3c-uuid.cache
tenant_env=(LD_PRELOAD="$CUSHARE_LIBRARY" FAKECUDA_STATE="$T/gpu.state" FAKECUDA_MEM=8g
  FAKECUDA_CTX_BYTES=64m CUDA_DEVICE_MEMORY_SHARED_CACHE="$cache"
  CUDA_DEVICE_MEMORY_LIMIT_0=1024m CUDA_DEVICE_SM_LIMIT=50 GPU_CORE_UTILIZATION_POLICY=force
  CUSHARE_LEDGER_TRUST=directory CUSHARE_LOG_LEVEL=warn)
env "${tenant_env[@]}" "$B/hami_tenant" "$T" 100 & p1=$!
env "${tenant_env[@]}" "$B/hami_tenant" "$T" 200 & p2=$!
trap 'touch "$T/go" "$T/stop"; kill $p1 $p2 2>/dev/null || true' EXIT
wait_files "$T/ready.$p1" "$T/ready.$p2"
HAMI_LIVE=$cache HAMI_EXPECT="$p1:$((100 << 20)),$p2:$((200 << 20))" HAMI_LIMIT=$((1 << 30)) \
  HAMI_SM=50 "$T/hami.test" -test.run 'TestLive' -test.v

echo "== feedback: the monitor's recent_kernel = -1 holds limited launches back"
HAMI_SET=$cache HAMI_RECENT_KERNEL=-1 "$T/hami.test" -test.run TestSet
touch "$T/go"
wait_files "$T/held.$p1" "$T/held.$p2"
if ls "$T"/launched.* >/dev/null 2>&1; then
  echo "FAIL: a launch returned while the monitor blocked the container"; exit 1
fi
echo "both tenants held; no launch returned"
HAMI_SET=$cache HAMI_RECENT_KERNEL=0 "$T/hami.test" -test.run TestSet
wait_files "$T/launched.$p1" "$T/launched.$p2"
echo "released by recent_kernel = 0: both launches returned"
HAMI_LIVE=$cache HAMI_EXPECT="$p1:$((100 << 20)),$p2:$((200 << 20))" HAMI_LIMIT=$((1 << 30)) \
  HAMI_SM=50 HAMI_RECENT_KERNEL_WANT=2 "$T/hami.test" -test.run 'TestLive' -test.v
touch "$T/stop"
wait $p1
wait $p2

echo "== feedback: under policy default the monitor's utilization_switch turns pacing on and off"
# One tenant alone: cushare's own rule would release its pacing (nobody
# contends); HAMi's monitor decides instead, as it does for HAMi-core.
mkdir -p "$T/sw"
rm -f "$T/stop"
cache2=$T/sw/1a2b-uuid.cache
env "${tenant_env[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$cache2" GPU_CORE_UTILIZATION_POLICY=default \
  "$B/hami_tenant" "$T/sw" 64 engaged & p3=$!
trap 'touch "$T/stop" "$T/sw/stop"; kill $p3 2>/dev/null || true' EXIT
wait_files "$T/sw/engaged.1.$p3"
echo "utilization_switch = 1 (HAMi's default): pacing engaged"
HAMI_SET=$cache2 HAMI_UTIL_SWITCH=0 "$T/hami.test" -test.run TestSet
wait_files "$T/sw/engaged.0.$p3"
echo "utilization_switch = 0: pacing released"
rm -f "$T/sw/engaged.1.$p3"
HAMI_SET=$cache2 HAMI_UTIL_SWITCH=1 "$T/hami.test" -test.run TestSet
wait_files "$T/sw/engaged.1.$p3"
echo "utilization_switch = 1 again: pacing engaged"
touch "$T/sw/stop"
wait $p3
trap - EXIT
echo "PASS"
