#!/usr/bin/env bash
# A tenant's own HAMi region cannot relax its pacing (docs/security.md,
# "HAMi's region"): with another process keeping the GPU busy, the tenant
# (policy default, SM limit 50) writes utilization_switch = 0 into its own
# region, as the attacker did every 50 ms. Pacing must stay engaged: 0 is
# in a file the tenant can write, so cushare's own contention detection
# decides, and it sees the other process. The watcher is waited for by its
# tick count (two whole ticks after the write), not by time. Then the
# other process stops and pacing is released, as without HAMi.
# Run by CTest: switch_hostile.sh BUILD_DIR.
set -euo pipefail
B=$1
T=$B/tmp/hami_switch_hostile
rm -rf "$T"
mkdir -p "$T/ctr" "$T/hog"
. "$(dirname "$0")/wait.sh"
export FAKECUDA_STATE=$T/gpu.state FAKECUDA_MEM=8g
cache=$T/ctr/5e6f-uuid.cache

# The other process: plain CUDA (no cushare), busy on the device.
"$B/limiter_worker" --blocks 2000 --stop "$T/hog/stop" --ready "$T/hog/ready" \
  > /dev/null 2>&1 & hog=$!
trap 'touch "$T/hog/stop" "$T/ctr/stop"; kill $hog ${p:-} 2>/dev/null || true' EXIT
wait_files "$T/hog/ready"
env LD_PRELOAD="$CUSHARE_LIBRARY" CUDA_DEVICE_MEMORY_SHARED_CACHE="$cache" \
  CUDA_DEVICE_MEMORY_LIMIT_0=1024m CUDA_DEVICE_SM_LIMIT=50 GPU_CORE_UTILIZATION_POLICY=default \
  CUSHARE_LEDGER_TRUST=directory CUSHARE_LOG_LEVEL=warn \
  "$B/hami_tenant" "$T/ctr" 64 engaged & p=$!
wait_files "$T/ctr/engaged.1.$p"
echo "pacing engaged (HAMi's initial utilization_switch = 1, a busy neighbour)"

# The tenant's own write: int32 utilization_switch at offset 2008900
# (include/cushare/hami_v1.h).
python3 - "$cache" <<'PY'
import mmap, struct, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[2008900:2008904] = struct.pack("<i", 0)
PY
touch "$T/ctr/tickmark"
wait_files "$T/ctr/ticked.$p"
if [ -e "$T/ctr/engaged.0.$p" ]; then
  echo "FAIL: the tenant's own utilization_switch = 0 released its pacing beside a busy process"
  exit 1
fi
echo "utilization_switch = 0 written by the tenant: pacing still engaged after two watcher ticks"

touch "$T/hog/stop"
wait $hog
wait_files "$T/ctr/engaged.0.$p"
echo "the neighbour stopped: pacing released by cushare's own detection"
touch "$T/ctr/stop"
wait $p
trap - EXIT
echo "PASS"
