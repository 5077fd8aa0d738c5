#!/usr/bin/env python3
"""Stand-in for `python3 -u WORKLOAD.py ARGS...` in dry runs of the matrix
(tests/gpu/selftest/run.sh sets MATRIX_PYTHON to this file). On the
simulated device (tests/fakecuda) it does what the runner looks at: takes
a context and 300 MiB through libcuda.so.1 (so cushare's budget, view and
nvidia-smi see them), prints VIEW, RATE (scaled by the SM limit in the
environment), CHECKSUM and NOTE lines. STUB_FAIL=<workload file name> makes
that workload fail. TEST TOOL only."""
import ctypes
import os
import sys
import time

args = [a for a in sys.argv[1:] if a != "-u"]
script = os.path.basename(args[0]) if args else "?"
cu = ctypes.CDLL("libcuda.so.1")


def ck(r, what):
    if r:
        print(f"stub {script}: {what} failed: CUresult {r}", flush=True)
        sys.exit(1)


ck(cu.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
ck(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
print(f"VIEW {total.value >> 20} {free.value >> 20}", flush=True)
ptr = ctypes.c_uint64()
ck(cu.cuMemAlloc_v2(ctypes.byref(ptr), 300 << 20), "cuMemAlloc")
if os.environ.get("STUB_FAIL") == script:
    raise RuntimeError(f"stub failure of {script} (STUB_FAIL)")
time.sleep(0.8)
sm = float(os.environ.get("CUDA_DEVICE_SM_LIMIT", "100"))
print(f"NOTE stub for {script} {' '.join(args[1:])}".rstrip(), flush=True)
print(f"RATE {1000 * sm / 100:.6g} units/s", flush=True)
print("CHECKSUM 42" + (" TOL 0.001" if script == "jax_jit.py" else ""), flush=True)
