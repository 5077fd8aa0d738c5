#!/usr/bin/env bash
# What NVML lists for MPS clients (node view, docs/mps.md): starts a private
# MPS control daemon on GPU 0, runs one CUDA client (a driver-API context
# that sleeps), and prints nvmlDeviceGetComputeRunningProcesses_v3 and
# nvmlDeviceGetMPSComputeRunningProcesses_v3 with the client's pid, then the
# same without MPS. With CUSHARE=PATH_TO_cushare, also what the node view
# (`cushare status --json`) makes of the MPS client.
#   [CUSHARE=build/cushare] bench/gpu-probes/mps/nvml_mps.sh
set -u
d=$(mktemp -d /tmp/nvml-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
client() { # CLIENT: a context that lives 8 s and writes "ready" to $1 once it has one
    python3 - "$1" > /dev/null << 'PY' &
import ctypes, sys, time
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
p = ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 20) == 0
with open(sys.argv[1], "w") as f:
    f.write("ready")
time.sleep(8)
PY
    CLIENT=$!
    for _ in $(seq 150); do [ -s "$1" ] && return; sleep 0.1; done
    echo "  the client had no context after 15 s"
}
lists() { # what NVML says now
    python3 - "$1" << 'PY'
import ctypes, sys
nv = ctypes.CDLL("libnvidia-ml.so.1")
class Info(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
assert nv.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3"):
    arr = (Info * 64)()
    n = ctypes.c_uint(64)
    rc = getattr(nv, name)(h, ctypes.byref(n), arr)
    print(f"  {name}: rc {rc}, {n.value} entries:",
          ", ".join(f"pid {arr[i].pid} ({arr[i].usedGpuMemory >> 20} MiB)" for i in range(n.value)))
print(f"  (client pid {sys.argv[1]})")
PY
}
echo "== with MPS"
nvidia-cuda-mps-control -d
sleep 1
client "$d/ready-mps"
lists "$CLIENT"
if [ -n "${CUSHARE:-}" ]; then
    echo "  cushare status --json (the node view):"
    "$CUSHARE" status --json 2>&1 | sed 's/^/    /' | head -60
fi
echo "  server: $(pgrep -f nvidia-cuda-mps-server | tr '\n' ' ')"
wait "$CLIENT"
echo quit | nvidia-cuda-mps-control
sleep 1
echo "== without MPS"
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
client "$d/ready-plain"
lists "$CLIENT"
wait "$CLIENT"
rm -rf "$d"
