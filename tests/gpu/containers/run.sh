#!/usr/bin/env bash
# Containers and interposition on a real GPU (one H200; root; no network):
#   tests/gpu/containers/run.sh BUILD_DIR OUT_DIR [STEP...]
# Steps (default all): spec preload cdi_podman cdi_crun replace. Each runs
# one of the CTest scripts against the real libcuda.so.1 instead of the
# fake, with a 2 GiB budget, 512 MiB granted then 2048 MiB refused (a real
# context is ~500 MiB and is charged to the budget):
#   spec        tests/cdi/spec.sh: `cushare cdi` output valid against the CDI
#               schema (needs python3 jsonschema), broken specs refused, bad
#               input exit 2;
#   preload     tests/enforce/preload.sh: /etc/ld.so.preload in a mount
#               namespace; LD_PRELOAD cleared, libcuda by absolute path, a
#               static-PIE exec chain: each sliced (over-budget cuMemAlloc
#               refused, the ledger lists the probe); the control unsliced;
#   cdi_podman  tests/cdi/container.sh with podman: --device
#               cushare.io/slice=t1 applied by podman's CDI code; the probe in
#               the container sliced, the same container without it not;
#   cdi_crun    the same with crun and tests/cdi/apply_oci.py;
#   replace     tests/enforce/replace.sh: install by rename keeps a tenant
#               alive, an in-place overwrite kills it with SIGBUS.
# A step PASSes when its script prints PASS and exits 0; exit 77 is a SKIP
# with the script's reason (no podman, no crun, no jsonschema ...). Every
# step under `timeout` (STEP_TIMEOUT, default 90 s); one line per step in
# OUT/summary.txt. Under a minute in all.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/common.sh
. "$here/../common.sh"
gpu_args 24 "$0" "$@"
shift 2
steps=${*:-spec preload cdi_podman cdi_crun replace}
cd "$GPU_ROOT" || exit 1

echo "== build ($B)"
gpu_build "$B" "$OUT/build.log" libcushare cushare_cli slice_probe || exit 1
libcuda=${LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ { print $NF; exit }')}
if [ -z "$libcuda" ]; then
    echo "no libcuda.so.1 in ldconfig's cache: is the NVIDIA driver installed?"
    exit 1
fi
{ date -u; nvidia-smi -L; git log --oneline -1 2> /dev/null; echo "libcuda: $libcuda";
  command -v podman crun; podman --version; crun --version | head -1; } > "$OUT/env.txt" 2>&1
export LIBCUDA_DIR=${libcuda%/*} CUSHARE_LIBRARY=$B/libcushare.so
export PROBE_LIMIT_MIB=${PROBE_LIMIT_MIB:-2048} PROBE_OK_MIB=${PROBE_OK_MIB:-512} PROBE_OVER_MIB=${PROBE_OVER_MIB:-2048}
binds=""
for d in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia[0-9]*; do
    [ -e "$d" ] && binds="$binds $d"
done
export CDI_DEV_BINDS=$binds

: > "$OUT/summary.txt"
for step in $steps; do
    case $step in
        spec) cmd=(tests/cdi/spec.sh "$B" "$GPU_ROOT") ;;
        preload) cmd=(tests/enforce/preload.sh "$B" "$GPU_ROOT") ;;
        cdi_podman) cmd=(env CDI_RUNTIME=podman tests/cdi/container.sh "$B" "$GPU_ROOT" "$LIBCUDA_DIR") ;;
        cdi_crun) cmd=(env CDI_RUNTIME=crun tests/cdi/container.sh "$B" "$GPU_ROOT" "$LIBCUDA_DIR") ;;
        replace) cmd=(tests/enforce/replace.sh "$B" "$GPU_ROOT") ;;
        *) echo "$step FAIL: unknown step" >> "$OUT/summary.txt"; continue ;;
    esac
    echo "== $step (log $OUT/$step.log)"
    start=$(date +%s)
    timeout -k 10 "${STEP_TIMEOUT:-90}" "${cmd[@]}" > "$OUT/$step.log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    case $rc in
        0) line="$step PASS: $(grep -E '^(PASS|ledger:|probe .*cushare=yes)' "$OUT/$step.log" | head -2 | tr '\n' ' ')" ;;
        77) line="$step SKIP: $(grep -m1 '^SKIP' "$OUT/$step.log")" ;;
        124|137) line="$step FAIL: timed out" ;;
        *) line="$step FAIL: exit $rc: $(grep -m1 'FAIL' "$OUT/$step.log")" ;;
    esac
    echo "$line [$took s]" | cut -c1-400 >> "$OUT/summary.txt"
    tail -5 "$OUT/$step.log"
done
echo
cat "$OUT/summary.txt"
