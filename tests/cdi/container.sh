#!/usr/bin/env bash
# Applied by a real runtime: `cushare cdi` writes the
# spec of slice "t1" (256 MiB) into /etc/cdi, and a container started with
# `--device cushare.io/slice=t1` runs slice_probe on the fake driver. The
# probe sets no LD_PRELOAD and is linked against nothing CUDA: it is sliced
# only if the runtime applied the spec (library mount, /etc/ld.so.preload,
# environment, ledger directory). Sliced: its 100 MiB is granted, the next
# 200 MiB refused, and the ledger on the host, read while the probe holds
# its memory, shows its pid, the 256 MiB budget and the 100 MiB.
#
# Runtime: podman (Debian 12's podman 4.3 reads CDI specs itself) unless
# CDI_RUNTIME=crun, or when podman is missing; crun alone runs a bundle
# whose config.json got the device's edits from tests/cdi/apply_oci.py (what
# podman's CDI code does). No image, no registry: the root filesystem is an
# overlay of the host's /. Everything runs in a private mount namespace
# (/etc overlaid for /etc/cdi; a hybrid cgroup2 mount, which crun refuses,
# unmounted there). The limits this sandbox imposes are worked around, not
# hidden: rlimits are lowered to what an unprivileged root may set.
#
# Run by CTest or tests/gpu/containers/run.sh: container.sh BUILD_DIR
# SOURCE_DIR [LIBCUDA_DIR]. LIBCUDA_DIR (default BUILD_DIR/fakecuda) holds
# the libcuda.so.1 the probe loads. Exits 77 (CTest SKIP) with the reason
# when not root, without unshare, or without podman and crun.
set -euo pipefail
B=$1 S=$2 CUDA_DIR=${3:-$1/fakecuda}
T=$B/tmp/cdi-ctr
LIB=${CUSHARE_LIBRARY:-$B/libcushare.so}
# PROBE_*_MIB: the budget and the two allocations (a real context needs
# more than the fake's). CDI_DEV_BINDS: host paths bound into the container
# as they are (the GPU script's /dev/nvidia* nodes; no device cgroup here).
LIMIT=${PROBE_LIMIT_MIB:-256} OK=${PROBE_OK_MIB:-100} OVER=${PROBE_OVER_MIB:-200}
read -r -a dev_binds <<< "${CDI_DEV_BINDS:-}"
runtime=${CDI_RUNTIME:-}
if [ -z "$runtime" ]; then
  if command -v podman >/dev/null; then runtime=podman; else runtime=crun; fi
fi

if [ "$(id -u)" != 0 ]; then
  echo "SKIP: not root: running a container from a local root filesystem here needs root"
  exit 77
fi
if ! command -v "$runtime" >/dev/null; then
  echo "SKIP: no container runtime: neither podman nor crun is installed (apt-get install podman)"
  exit 77
fi
if ! err=$(unshare -m --propagation private true 2>&1); then
  echo "SKIP: unshare -m is refused here: $err"
  exit 77
fi

if [ "${4:-}" != --inside ]; then
  rm -rf "$T"
  mkdir -p "$T"/{etc-up,etc-work,root-up,root-work,rootfs,hold,bundle}
  "$B/cushare" cdi --name t1 --mem "${LIMIT}MiB" --library "$LIB" --state "$T/state" \
    --output "$T/cushare.json"
  python3 "$S/tests/cdi/validate.py" "$S/tests/cdi/cdi-schema.json" "$T/cushare.json" || {
    rc=$?; [ $rc = 77 ] && echo "(spec not schema-checked here)" || exit 1; }
  echo "== $runtime, in a private mount namespace"
  exec unshare -m --propagation private "$0" "$B" "$S" "$CUDA_DIR" --inside
fi

# Inside the namespace from here on.
if [ -f /sys/fs/cgroup/unified/cgroup.controllers ]; then
  umount /sys/fs/cgroup/unified 2>/dev/null || true
fi
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$T/etc-up,workdir=$T/etc-work" /etc
mkdir -p /etc/cdi
cp "$T/cushare.json" /etc/cdi/cushare.json
mount -t overlay overlay -o "lowerdir=/,upperdir=$T/root-up,workdir=$T/root-work" "$T/rootfs"

ctr_env=(LD_LIBRARY_PATH="$CUDA_DIR" FAKECUDA_STATE="$T/gpu.state" FAKECUDA_MEM=8g
  CUSHARE_LOG_LEVEL=error CS_TEST_SCALE="${CS_TEST_SCALE:-1}")
probe=("$B/slice_probe" libcuda.so.1 "$OK" "$OVER" "$T/hold")

# start_container [--no-device|--escape]: the probe in a container, with
# the slice (or, for the control, without it; or with the slice while the
# probe's environment drops and rewrites every slice variable).
start_container() {
  local dev=(--device cushare.io/slice=t1)
  [ "${1:-}" = --no-device ] && dev=()
  local probe=("${probe[@]}")
  [ "${1:-}" = --escape ] && probe=(/usr/bin/env -u CUDA_DEVICE_MEMORY_SHARED_CACHE
    -u CUDA_DEVICE_MEMORY_LIMIT -u CUDA_DEVICE_SM_LIMIT CUDA_DISABLE_CONTROL=true
    CUDA_DEVICE_MEMORY_LIMIT_0=100g "${probe[@]}")
  if [ "$runtime" = podman ]; then
    local e=(); for v in "${ctr_env[@]}"; do e+=(-e "$v"); done
    for d in "${dev_binds[@]}"; do e+=(-v "$d:$d"); done
    podman --root "$T/storage" --runroot "$T/run" --cgroup-manager cgroupfs \
      --events-backend file run --rm --cgroups disabled --network none \
      --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
      "${dev[@]}" -v "$T/hold:$T/hold" "${e[@]}" \
      --rootfs "$T/rootfs" "${probe[@]}"
  else
    rm -f "$T/bundle/config.json"
    (cd "$T/bundle" && crun spec)
    python3 - "$T/bundle/config.json" "$T/rootfs" "$T/hold ${CDI_DEV_BINDS:-}" "${ctr_env[@]}" \
      -- "${probe[@]}" <<'EOF'
import json, sys
path, rootfs, binds = sys.argv[1:4]
rest = sys.argv[4:]
cut = rest.index("--")
c = json.load(open(path))
c["root"] = {"path": rootfs, "readonly": False}
p = c["process"]
p["terminal"] = False
p["args"] = rest[cut + 1:]
p["env"] = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + rest[:cut]
p["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 4096, "hard": 4096}]
c["linux"].pop("resources", None)
for b in binds.split():
    c["mounts"].append({"destination": b, "source": b, "type": "bind", "options": ["rbind", "rw"]})
json.dump(c, open(path, "w"), indent=1)
EOF
    if [ ${#dev[@]} -gt 0 ]; then
      python3 "$S/tests/cdi/apply_oci.py" "$T/cushare.json" cushare.io/slice=t1 \
        "$T/bundle/config.json"
    fi
    crun --cgroup-manager=disabled run --bundle "$T/bundle" "cushare-cdi-$$"
  fi
}

echo "== control: the same container without the device is not sliced"
touch "$T/hold/go"
rc=0
start_container --no-device > "$T/control.out" 2>&1 || rc=$?
cat "$T/control.out"
if [ $rc != 1 ] || ! grep -q 'cushare=no ok=0 over=0 ' "$T/control.out"; then
  echo "FAIL: without the CDI device the probe should get $((OK + OVER)) MiB (rc $rc)"; exit 1
fi
rm -f "$T"/hold/*

echo "== --device cushare.io/slice=t1"
start_container > "$T/probe.out" 2> "$T/probe.err" & pid=$!
scale=${CS_TEST_SCALE:-1}
end=$((SECONDS + $(awk -v s="$scale" 'BEGIN { print int(120 * s) }')))
until compgen -G "$T/hold/ready.*" >/dev/null; do
  if ! kill -0 $pid 2>/dev/null || [ $SECONDS -ge $end ]; then
    cat "$T/probe.out" "$T/probe.err"; echo "FAIL: the container's probe did not get ready"; exit 1
  fi
  sleep 0.05
done
ready=("$T"/hold/ready.*)
"$B/cushare" status --json "$T/state/slices/t1/ledger" > "$T/status.json"
python3 "$S/tests/enforce/check_ledger.py" "$T/status.json" "${ready[0]##*.}" "$LIMIT" "$OK"
touch "$T/hold/go"
rc=0
wait $pid || rc=$?
cat "$T/probe.out"
if [ $rc != 0 ] || ! grep -q 'preload=- cushare=yes ok=0 over=2 ' "$T/probe.out"; then
  cat "$T/probe.err"
  echo "FAIL: the probe in the container was not sliced (rc $rc)"; exit 1
fi

echo "== --device cushare.io/slice=t1, the probe clears and rewrites its slice variables"
# The slice file the spec mounts read-only at /etc/cushare/slice.env keeps it.
rm -f "$T"/hold/*
touch "$T/hold/go"
rc=0
start_container --escape > "$T/escape.out" 2>&1 || rc=$?
cat "$T/escape.out"
if [ $rc != 0 ] || ! grep -q 'preload=- cushare=yes ok=0 over=2 ' "$T/escape.out"; then
  echo "FAIL: the probe escaped its slice by rewriting its environment (rc $rc)"; exit 1
fi
echo "PASS: $runtime applied cushare.io/slice=t1: the container's probe is sliced, even with its environment rewritten"
