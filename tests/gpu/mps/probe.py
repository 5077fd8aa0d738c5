#!/usr/bin/env python3
"""Facts about a GPU under MPS that cushare's concurrent mode builds on.

    probe.py occupancy WORKLOAD   kernel nodes of a captured replay: grid,
                                  block, max active blocks per SM, occupancy
    probe.py holder STOPFILE      a context (driver API only), prints free
                                  memory, holds until STOPFILE exists
    probe.py nvml                 NVML's process lists (compute, MPS) and
                                  per-process utilisation samples
    probe.py fault KIND           KIND=illegal: a kernel writes address 0x10;
                                  KIND=spin: a kernel spins ~10 s (to be killed)
    probe.py victim SECS          graph replays, one line per 0.5 s, and what
                                  error ends them
WORKLOAD: graph (4 x Linear 2048, batch 8, fp16) or matmul (4096^2 bf16).
"""
import ctypes
import sys
import time

cu = ctypes.CDLL("libcuda.so.1")


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")


class KernelParams(ctypes.Structure):
    _fields_ = [("func", ctypes.c_void_p), ("gx", ctypes.c_uint), ("gy", ctypes.c_uint),
                ("gz", ctypes.c_uint), ("bx", ctypes.c_uint), ("by", ctypes.c_uint),
                ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("params", ctypes.c_void_p),
                ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def model_for(workload):
    import torch
    if workload == "graph":
        m = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).half().cuda().eval()
        x = torch.randn(8, 2048, device="cuda", dtype=torch.half)
        return lambda: m(x)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    return lambda: a @ b


def occupancy(workload):
    import torch
    f = model_for(workload)
    s = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        graph = ctypes.c_void_p()
        check(cu.cuStreamBeginCapture_v2(ctypes.c_void_p(s.cuda_stream), 2), "begin capture")
        f()
        check(cu.cuStreamEndCapture(ctypes.c_void_p(s.cuda_stream), ctypes.byref(graph)), "end capture")
    dev = ctypes.c_int()
    check(cu.cuCtxGetDevice(ctypes.byref(dev)), "ctx device")
    sms, mps = ctypes.c_int(), ctypes.c_int()
    check(cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev), "sm count")
    r = cu.cuDeviceGetAttribute(ctypes.byref(mps), 133, dev)
    n = ctypes.c_size_t(0)
    check(cu.cuGraphGetNodes(graph, None, ctypes.byref(n)), "nodes")
    nodes = (ctypes.c_void_p * n.value)()
    check(cu.cuGraphGetNodes(graph, nodes, ctypes.byref(n)), "nodes")
    print(f"OCC workload={workload} sms={sms.value} mps_enabled={mps.value if r == 0 else 'err%d' % r} "
          f"nodes={n.value}")
    for nd in nodes:
        t = ctypes.c_int()
        check(cu.cuGraphNodeGetType(ctypes.c_void_p(nd), ctypes.byref(t)), "type")
        if t.value != 0:
            print(f"OCC node type={t.value}")
            continue
        p = KernelParams()
        check(cu.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(nd), ctypes.byref(p)), "params")
        fn = ctypes.c_void_p(p.func)
        if not p.func and p.kern:
            check(cu.cuKernelGetFunction(ctypes.byref(fn), ctypes.c_void_p(p.kern)), "kernel fn")
        name = ctypes.c_char_p()
        if hasattr(cu, "cuFuncGetName") and cu.cuFuncGetName(ctypes.byref(name), fn) == 0:
            nm = name.value.decode()[:60]
        else:
            nm = "?"
        bs = p.bx * p.by * p.bz
        per = ctypes.c_int()
        check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(per), fn, bs,
                                                             ctypes.c_size_t(p.smem)), "occupancy")
        blocks = p.gx * p.gy * p.gz
        occ = min(1.0, blocks / max(1, sms.value * per.value))
        print(f"OCC kernel grid={blocks} block={bs} smem={p.smem} per_sm={per.value} "
              f"occupancy={occ:.3f} sms_touched={min(blocks, sms.value)} name={nm}")


def holder():
    check(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "device")
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    check(cu.cuCtxSetCurrent(ctx), "set current")
    free, total, mps = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_int()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "mem info")
    cu.cuDeviceGetAttribute(ctypes.byref(mps), 133, dev)
    print(f"HOLD free_mib={free.value >> 20} total_mib={total.value >> 20} mps={mps.value}", flush=True)
    import os
    for _ in range(1200):
        if os.path.exists(sys.argv[2]):
            return
        time.sleep(0.05)


class ProcInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint),
                ("ci", ctypes.c_uint)]


class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("ts", ctypes.c_ulonglong), ("sm", ctypes.c_uint),
                ("mem", ctypes.c_uint), ("enc", ctypes.c_uint), ("dec", ctypes.c_uint)]


def nvml():
    ml = ctypes.CDLL("libnvidia-ml.so.1")
    check(ml.nvmlInit_v2(), "nvmlInit")
    h = ctypes.c_void_p()
    check(ml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)), "handle")
    for fn in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3"):
        n = ctypes.c_uint(64)
        arr = (ProcInfo * 64)()
        r = getattr(ml, fn)(h, ctypes.byref(n), arr)
        rows = [(arr[i].pid, arr[i].used >> 20) for i in range(n.value)] if r == 0 else []
        print(f"NVML {fn} rc={r} procs={rows}")
    time.sleep(1.5)
    n = ctypes.c_uint(64)
    arr = (Sample * 64)()
    last = ctypes.c_ulonglong(int((time.time() - 1.0) * 1e6))
    r = ml.nvmlDeviceGetProcessUtilization(h, arr, ctypes.byref(n), last)
    rows = sorted({(arr[i].pid, arr[i].sm) for i in range(n.value)}) if r == 0 else []
    print(f"NVML process_util rc={r} samples={n.value} pid_sm={rows[:24]}")


def fault(kind):
    import cupy
    src = {"illegal": 'extern "C" __global__ void k(){ *(volatile int*)0x10 = 1; }',
           "spin": 'extern "C" __global__ void k(){ long long t = clock64();'
                   ' while (clock64() - t < 20000000000ll) {} }'}[kind]
    k = cupy.RawKernel(src, "k")
    print(f"FAULT {kind} launching", flush=True)
    try:
        k((1,), (1,), ())
        cupy.cuda.runtime.deviceSynchronize()
        print(f"FAULT {kind} returned ok", flush=True)
    except Exception as e:  # the error the faulting client itself sees
        print(f"FAULT {kind} error {e}", flush=True)


def victim(secs):
    import torch
    f = model_for("graph")
    s = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        f()
    t0 = time.monotonic()
    done, last = 0, t0
    print("VICTIM ready", flush=True)
    try:
        while time.monotonic() - t0 < secs:
            for _ in range(100):
                g.replay()
            torch.cuda.synchronize()
            done += 100
            if time.monotonic() - last >= 0.5:
                last = time.monotonic()
                print(f"VICTIM t={last - t0:.1f} replays={done}", flush=True)
        print(f"VICTIM survived replays={done}", flush=True)
    except Exception as e:
        print(f"VICTIM error at t={time.monotonic() - t0:.2f} after {done}: {e}", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    {"occupancy": lambda: occupancy(sys.argv[2]), "holder": holder, "nvml": nvml,
     "fault": lambda: fault(sys.argv[2]), "victim": lambda: victim(float(sys.argv[2]))}[cmd]()
