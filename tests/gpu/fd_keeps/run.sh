#!/usr/bin/env bash
# An exported POSIX fd keeps its memory charged, on a real GPU (one is enough):
#   tests/gpu/fd_keeps/run.sh BUILD_DIR OUT_DIR
# FAKE=1 runs it on the fake driver (tests/fakecuda) instead. Writes
# OUT/fd_keeps.log and OUT/summary.txt; prints the summary. Under 2 min.
# Pass: the rounds of create 512 MiB / export / release / keep the fd that
# a 2 GiB budget admits are exactly what its free bytes allow, no warning
# says the exported descriptor could not be locked, and closing the fds
# gives everything back. Before the fix every round was admitted.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 9 "$0" "$@"
cd "$GPU_ROOT" || exit 1
echo "== build ($B)"
if [ "${FAKE:-0}" = 1 ]; then
    gpu_build "$B" "$OUT/build.log" libcushare fakecuda_driver fakecuda_nvml || exit 1
    lib=$B/fakecuda
    export LD_LIBRARY_PATH=$lib FAKECUDA_STATE=$OUT/fake.state FAKECUDA_MEM=16g
    rm -f "$FAKECUDA_STATE"
else
    gpu_build "$B" "$OUT/build.log" libcushare || exit 1
    lib=$CUDA_HOME/lib64/stubs
fi
if ! timeout 60 gcc -O2 -Wall -I"$CUDA_HOME/include" "$here/fd_keeps.c" -o "$B/fd_keeps" \
        -L"$lib" -lcuda >> "$OUT/build.log" 2>&1; then
    echo "build: fd_keeps.c failed (log $OUT/build.log)"; tail -10 "$OUT/build.log"; exit 1
fi
share=$OUT/share
rm -rf "$share" && mkdir -p "$share"
timeout 100 env LD_PRELOAD="$B/libcushare.so" CUDA_DEVICE_MEMORY_LIMIT=2g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$share/ledger" CUSHARE_SHARE_DIR="$share" \
    "$B/fd_keeps" > "$OUT/fd_keeps.log" 2>&1
rc=$?
grep '^SUMMARY' "$OUT/fd_keeps.log" > "$OUT/summary.txt" || echo "SUMMARY fd_keeps: FAIL (rc $rc, no summary)" > "$OUT/summary.txt"
if grep -q "cannot tell when an exported descriptor is closed" "$OUT/fd_keeps.log"; then
    echo "SUMMARY fd_keeps: FAIL the driver's exported descriptor could not be locked" >> "$OUT/summary.txt"
    rc=1
fi
cat "$OUT/fd_keeps.log"
cat "$OUT/summary.txt"
exit $rc
