#!/usr/bin/env bash
# Replacing the library file under a running tenant (HAMi#753). A tenant
# (slice_probe, LD_PRELOAD=VGPU/libvgpu.so) allocates, then waits for
# HOLD/go; the file is replaced; on "go" the tenant calls into the library
# again (cuMemGetInfo, free, alloc, free).
#   install by rename, with deploy/cushare-node.yaml's own install-lib
#   command: the tenant keeps the old inode mapped and carries on (exit 0);
#   overwrite in place (what `cp new VGPU/libvgpu.so` does: O_TRUNC, then
#   write): the tenant's mapping is the file's page cache, so a file caught
#   shorter than the mapping (mid-copy, or a smaller build) takes the code
#   from under it: the tenant dies of SIGBUS at its next call.
# No timing: the replacement is complete before "go" is written.
# Run by CTest: replace.sh BUILD_DIR SOURCE_DIR. 77 (SKIP) without PyYAML.
set -euo pipefail
B=$1 S=$2
T=$B/tmp/replace
LIB=${CUSHARE_LIBRARY:-$B/libcushare.so}
rm -rf "$T"
mkdir -p "$T/vgpu" "$T/hold"
# LIBCUDA_DIR and PROBE_*_MIB as in preload.sh (the GPU script sets them).
OK=${PROBE_OK_MIB:-100} OVER=${PROBE_OVER_MIB:-200}
export LD_LIBRARY_PATH=${LIBCUDA_DIR:-$B/fakecuda} FAKECUDA_STATE=$T/gpu.state FAKECUDA_MEM=8g
export CUDA_DEVICE_MEMORY_LIMIT=${PROBE_LIMIT_MIB:-256}m CUSHARE_LOG_LEVEL=error

# The DaemonSet's install-lib command, pointed at this test's directories.
install_cmd=$(python3 - "$S/deploy/cushare-node.yaml" <<'EOF'
import sys
try:
    import yaml
except ImportError:
    print("SKIP"); sys.exit(0)
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "DaemonSet":
        for c in doc["spec"]["template"]["spec"]["initContainers"]:
            if c["name"] == "install-lib":
                print(c["command"][-1])
EOF
)
case $install_cmd in
  SKIP) echo "SKIP: python3-yaml is missing: the installer's command is read from deploy/"; exit 77 ;;
  *"mv -f"*) ;;
  *) echo "FAIL: deploy/cushare-node.yaml's install-lib does not install by rename: $install_cmd"; exit 1 ;;
esac
install_cmd=${install_cmd//\/opt\/cushare\/libcushare.so/$LIB}
install_cmd=${install_cmd//\/usr\/local\/vgpu/$T/vgpu}

# run_tenant NAME REPLACE_CMD: starts the tenant, replaces the library
# once the tenant is ready, lets it call in, and leaves its exit status in rc.
run_tenant() {
  local name=$1 replace=$2
  rm -f "$T/hold"/*
  cp "$LIB" "$T/vgpu/libvgpu.so"
  LD_PRELOAD=$T/vgpu/libvgpu.so "$B/slice_probe" libcuda.so.1 "$OK" "$OVER" "$T/hold" \
    > "$T/$name.out" 2>&1 & local pid=$!
  local end=$((SECONDS + $(awk -v s="${CS_TEST_SCALE:-1}" 'BEGIN { print int(60 * s) }')))
  until compgen -G "$T/hold/ready.*" >/dev/null; do
    if ! kill -0 $pid 2>/dev/null || [ $SECONDS -ge $end ]; then
      cat "$T/$name.out"; echo "FAIL: $name: the tenant did not get ready"; exit 1
    fi
    sleep 0.02
  done
  local before; before=$(stat -c %i "$T/vgpu/libvgpu.so")
  sh -ec "$replace"
  echo "$name: libvgpu.so inode $before -> $(stat -c %i "$T/vgpu/libvgpu.so")"
  touch "$T/hold/go"
  rc=0
  wait $pid || rc=$?
  cat "$T/$name.out"
}

echo "== install by rename (deploy/cushare-node.yaml): $install_cmd"
run_tenant rename "$install_cmd"
if [ $rc != 0 ] || ! grep -q 'called into the driver after go' "$T/rename.out"; then
  echo "FAIL: the tenant did not survive an install by rename (rc $rc)"; exit 1
fi

echo "== overwrite in place, caught mid-copy (first 4 KiB written)"
head -c 4096 "$LIB" > "$T/partial.so"
run_tenant in_place "cat '$T/partial.so' > '$T/vgpu/libvgpu.so'"
if [ $rc != $((128 + 7)) ]; then
  echo "FAIL: after an in-place overwrite the tenant should die of SIGBUS (rc $rc, want 135)"; exit 1
fi
echo "the tenant died of SIGBUS at its next call into the library"
echo "PASS"
