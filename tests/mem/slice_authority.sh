#!/usr/bin/env bash
# The slice file wins over a ledger the tenant wrote (docs/security.md,
# "Limits"). The slice file (1 GiB) is mounted at /etc/cushare/slice.env in
# a private mount namespace (an overlay of /etc), as a CDI spec mounts it
# into a container. The tenant first creates the slice's ledger itself,
# outside the slice, with a 16 GiB limit, and keeps it open; the sliced
# process must still be refused past 1 GiB, and the header must say 1 GiB
# again. Then the tenant edits the live header to 16 GiB: still refused.
# Run by CTest: slice_authority.sh BUILD_DIR. Needs root and unshare:
# exits 77 (CTest SKIP) with the reason otherwise.
set -euo pipefail
B=$1
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
  echo "SKIP: needs root and unshare(1) to mount a slice file in a private mount namespace"
  exit 77
fi
T=$B/tmp/slice_authority
rm -rf "$T"
mkdir -p "$T/up" "$T/work" "$T/hold"
ledger=$T/slice.ledger
scale=${CS_TEST_SCALE:-1}
deadline=$(awk -v s="$scale" 'BEGIN { print int(60 * s) }')
export FAKECUDA_STATE=$T/fake FAKECUDA_MEM=32g LD_PRELOAD=$CUSHARE_LIBRARY
cat > "$T/slice.env" <<EOT
CUDA_DEVICE_MEMORY_LIMIT=1g
CUDA_DEVICE_MEMORY_SHARED_CACHE=$ledger
EOT

# The tenant, outside the slice, makes the ledger with 16 GiB and keeps it.
CUDA_DEVICE_MEMORY_LIMIT=16g CUDA_DEVICE_MEMORY_SHARED_CACHE=$ledger \
  "$B/slice_probe" libcuda.so.1 1 1 "$T/hold" > "$T/creator.out" & creator=$!
trap 'touch "$T/hold/go"; kill $creator 2>/dev/null || true' EXIT
end=$((SECONDS + deadline))
until ls "$T/hold"/ready.* >/dev/null 2>&1; do
  if [ $SECONDS -ge $end ]; then echo "FAIL: the creator did not start"; exit 1; fi
  sleep 0.02
done
echo "the tenant made $ledger with a 16 GiB limit and holds it"

# The sliced process: 512 MiB must fit, 2 GiB more must be refused.
sliced() {
  unshare -m --propagation private sh -c '
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/up,workdir=$1/work" /etc &&
    mkdir -p /etc/cushare && cp "$1/slice.env" /etc/cushare/slice.env &&
    exec "$2/slice_probe" libcuda.so.1 512 2048' sh "$T" "$B"
}
set +e
out=$(sliced 2>"$T/sliced.err"); rc=$?
set -e
echo "$out"; cat "$T/sliced.err"
if [ $rc -ne 0 ]; then echo "FAIL: under the slice file (1 GiB), 2.5 GiB were granted (rc $rc)"; exit 1; fi
# include/cushare/ledger.h: limit[0] is the u64 at offset 56.
limit=$(python3 -c 'import struct,sys; f=open(sys.argv[1],"rb"); f.seek(56); print(struct.unpack("<Q", f.read(8))[0])' "$ledger")
echo "ledger header limit now: $limit"
[ "$limit" = $((1 << 30)) ] || { echo "FAIL: the header still says $limit"; exit 1; }

echo "== the tenant edits the live header back to 16 GiB"
python3 - "$ledger" <<'PY'
import mmap, struct, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[56:64] = struct.pack("<Q", 16 << 30)  # limit[0], include/cushare/ledger.h
PY
set +e
out=$(sliced 2>"$T/sliced2.err"); rc=$?
set -e
echo "$out"
if [ $rc -ne 0 ]; then echo "FAIL: after the header edit, 2.5 GiB were granted (rc $rc)"; exit 1; fi
touch "$T/hold/go"
wait $creator || true
trap - EXIT
echo "PASS"
