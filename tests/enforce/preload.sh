#!/usr/bin/env bash
# With /etc/ld.so.preload naming libcushare.so, a tenant
# is sliced whatever it does to its environment. A private mount namespace
# stands in for the container: /etc is overlaid there (the host's /etc is
# untouched) and ld.so.preload written into the overlay. On the fake
# driver, with a 256 MiB budget (PROBE_*_MIB below), slice_probe allocates
# 100 MiB and then 200 MiB: sliced, the second is refused (exit 0); unsliced, it is granted
# (exit 1). Each case holds its memory while `cushare status --json` reads
# the tenant's ledger: its pid, the 100 MiB and the 256 MiB limit.
#   outside the namespace, no LD_PRELOAD: not sliced (the control);
#   inside: LD_PRELOAD cleared; libcuda dlopened by absolute path; an exec
#   chain through a static-PIE helper that clears LD_PRELOAD.
# Run by CTest: preload.sh BUILD_DIR SOURCE_DIR. Exits 77 (CTest SKIP)
# with the reason when not root, when unshare or the overlay is refused,
# or when the toolchain cannot link -static-pie.
set -euo pipefail
B=$1 S=$2
T=$B/tmp/enforce
LIB=${CUSHARE_LIBRARY:-$B/libcushare.so}
# LIBCUDA_DIR: where libcuda.so.1 is (default the fake driver; the GPU
# script points it at the real one); PROBE_*_MIB: the budget and the two
# allocations (a real context needs more than the fake's).
FAKE=${LIBCUDA_DIR:-$B/fakecuda}
LIMIT=${PROBE_LIMIT_MIB:-256} OK=${PROBE_OK_MIB:-100} OVER=${PROBE_OVER_MIB:-200}
probe=$B/slice_probe

if [ "$(id -u)" != 0 ]; then
  echo "SKIP: not root: a mount namespace with its own /etc/ld.so.preload needs CAP_SYS_ADMIN"
  exit 77
fi
if ! err=$(unshare -m --propagation private true 2>&1); then
  echo "SKIP: unshare -m is refused here: $err"
  exit 77
fi

if [ "${3:-}" != --inside ]; then
  rm -rf "$T"
  mkdir -p "$T/etc-up" "$T/etc-work" "$T/tenant" "$T/hold"
  chmod 0700 "$T/tenant"
  if ! err=$(cc -static-pie -O2 -o "$T/static_exec" "$S/tests/enforce/static_exec.c" 2>&1); then
    echo "SKIP: the toolchain cannot link -static-pie (glibc's rcrt1.o missing?): $err"
    exit 77
  fi
  file_type=$(od -An -tx1 -j16 -N2 "$T/static_exec" | tr -d ' ')
  if [ "$file_type" != 0300 ] || readelf -l "$T/static_exec" | grep -q INTERP; then
    echo "FAIL: $T/static_exec is not a static PIE (ET_DYN without PT_INTERP)"; exit 1
  fi
  export T LIB FAKE probe LIMIT OK OVER
  export LD_LIBRARY_PATH=$FAKE FAKECUDA_STATE=$T/gpu.state FAKECUDA_MEM=8g
  export CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/tenant/ledger CUDA_DEVICE_MEMORY_LIMIT=${LIMIT}m
  export CUSHARE_LOG_LEVEL=error
  unset LD_PRELOAD

  echo "== control: no LD_PRELOAD, no /etc/ld.so.preload: the probe is not sliced"
  set +e
  out=$("$probe" libcuda.so.1 "$OK" "$OVER"); rc=$?
  set -e
  echo "$out"
  if [ $rc != 1 ] || ! grep -q 'cushare=no ok=0 over=0' <<<"$out"; then
    echo "FAIL: without any preload the probe should get $((OK + OVER)) MiB (rc $rc)"; exit 1
  fi
  exec unshare -m --propagation private "$0" "$B" "$S" --inside
fi

# Inside the namespace from here on.
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$T/etc-up,workdir=$T/etc-work" /etc 2>"$T/ovl.err" || {
  echo "SKIP: cannot overlay /etc in the mount namespace: $(cat "$T/ovl.err")"; exit 77; }
echo "$LIB" > /etc/ld.so.preload
echo "== /etc/ld.so.preload in the namespace: $(cat /etc/ld.so.preload)"

scale=${CS_TEST_SCALE:-1}
deadline=$(awk -v s="$scale" 'BEGIN { print int(60 * s) }')

# run_case NAME CMD...: runs CMD (a slice_probe chain) holding its memory,
# checks the ledger while it holds, releases it, checks it was sliced.
run_case() {
  local name=$1; shift
  echo "== $name"
  rm -f "$T/hold"/*
  "$@" > "$T/$name.out" & local pid=$!
  local end=$((SECONDS + deadline))
  until compgen -G "$T/hold/ready.*" >/dev/null; do
    if ! kill -0 $pid 2>/dev/null || [ $SECONDS -ge $end ]; then
      cat "$T/$name.out"; echo "FAIL: $name: the probe did not get ready"; exit 1
    fi
    sleep 0.02
  done
  local ready=("$T"/hold/ready.*); local ppid=${ready[0]##*.}
  "$B/cushare" status --json "$T/tenant/ledger" > "$T/$name.json"
  python3 "$S/tests/enforce/check_ledger.py" "$T/$name.json" "$ppid" "$LIMIT" "$OK"
  touch "$T/hold/go"
  local rc=0
  wait $pid || rc=$?
  cat "$T/$name.out"
  if [ $rc != 0 ] || ! grep -q 'preload=- cushare=yes ok=0 over=2 ' "$T/$name.out"; then
    echo "FAIL: $name: not sliced (rc $rc; want the $OVER MiB refused with OUT_OF_MEMORY)"; exit 1
  fi
}

run_case cleared env -u LD_PRELOAD "$probe" libcuda.so.1 "$OK" "$OVER" "$T/hold"
run_case absolute env -u LD_PRELOAD "$probe" "$FAKE/libcuda.so.1" "$OK" "$OVER" "$T/hold"
run_case static_pie env LD_PRELOAD="$LIB" "$T/static_exec" "$probe" "$FAKE/libcuda.so.1" "$OK" "$OVER" "$T/hold"
echo "PASS"
