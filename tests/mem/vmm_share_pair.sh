#!/bin/sh
# mem_vmm_share_pair: tests/gpu/vmm_sharing/vmm_share.c, the H200 program, on the
# fake driver: a creator shares 64 MiB with an importer over a unix socket
# and exits first; the importer's tenant view must still count them until it
# releases them. Then the `late` variant: a creator that lets go of
# everything before sending the fd and exits; the fd alone keeps the memory
# (as on the driver), the import succeeds and is charged to the importer
# until it releases it.
#   vmm_share_pair.sh VMM_SHARE_BINARY WORK_DIR
set -u
bin=$1 dir=$2
mkdir -p "$dir" || exit 1
sock=$dir/vmm_share.sock
out=$dir/vmm_share.out
rm -f "$sock"
"$bin" creator "$sock" 64 > "$out.creator" 2>&1 &
cpid=$!
"$bin" importer "$sock" 64 > "$out" 2>&1
irc=$?
wait $cpid
crc=$?
cat "$out.creator" "$out"
[ $crc = 0 ] || { echo "FAIL: creator exited $crc"; exit 1; }
[ $irc = 0 ] || { echo "FAIL: importer exited $irc"; exit 1; }
grep -q '^IMPORTER PASS' "$out" || { echo "FAIL: no IMPORTER PASS line"; exit 1; }

"$bin" creator "$sock" 64 late > "$out.creator" 2>&1 &
cpid=$!
"$bin" importer "$sock" 64 > "$out" 2>&1
irc=$?
wait $cpid
cat "$out.creator" "$out"
[ $irc = 0 ] || { echo "FAIL: late import: importer exited $irc"; exit 1; }
grep -q '^IMPORTER import CUDA_SUCCESS' "$out" || { echo "FAIL: late import refused"; exit 1; }
grep -q '^IMPORTER PASS' "$out" || { echo "FAIL: late import: no IMPORTER PASS line"; exit 1; }
echo "creator exits first: the importer's view keeps the 64 MiB until it releases them"
echo "late: the fd alone kept the memory; the importer's view counted it until released"
