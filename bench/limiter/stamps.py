"""GPU timestamps inside a captured CUDA graph, for diagnosis.

A one-thread kernel writes the GPU's %globaltimer into the next slot of a
buffer. Launched on torch's current stream while a graph is captured, it
becomes a node of that graph, so every replay stamps where it stands on
the GPU's own clock, the clock every process on the device shares. Two
stamps around the work give each replay's start and end;
bench/limiter/probes/edge_gaps.py merges the traces of a mix's tenants.

The kernel is PTX (nvcc -ptx -arch=sm_90 of the kernel in
bench/limiter/probes/edge_trace.cu) loaded through the driver with ctypes,
so the workload needs no compiler.
"""
import ctypes
import time

import torch

_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry stamp(.param .u64 buf, .param .u64 ctr, .param .u32 cap)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<9>;
    ld.param.u64 %rd2, [buf];
    ld.param.u64 %rd4, [ctr];
    ld.param.u32 %r2, [cap];
    cvta.to.global.u64 %rd5, %rd4;
    mov.u64 %rd3, %globaltimer;
    atom.global.add.u32 %r1, [%rd5], 1;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd6, %rd2;
    mul.wide.u32 %rd7, %r1, 8;
    add.s64 %rd8, %rd6, %rd7;
    st.global.u64 [%rd8], %rd3;
DONE:
    ret;
}
"""


def _check(what, rc):
    if rc:
        raise RuntimeError(f"stamps: {what} failed with CUresult {rc}")


class Stamps:
    """A buffer of `cap` GPU timestamps and the kernel that appends one."""

    def __init__(self, cap=1 << 21):
        self.cap = cap
        self.buf = torch.zeros(cap, dtype=torch.int64, device="cuda")
        self.ctr = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.launches = []
        cu = ctypes.CDLL("libcuda.so.1")
        mod, self._fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check("cuModuleLoadData", cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(_PTX)))
        _check("cuModuleGetFunction",
               cu.cuModuleGetFunction(ctypes.byref(self._fn), mod, b"stamp"))
        self._launch = cu.cuLaunchKernel
        self._launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self._args = (ctypes.c_uint64(self.buf.data_ptr()), ctypes.c_uint64(self.ctr.data_ptr()),
                      ctypes.c_uint32(cap))
        self._params = (ctypes.c_void_p * 3)(*(ctypes.addressof(v) for v in self._args))

    def stamp(self):
        """Appends a stamp on torch's current stream (a graph node if capturing)."""
        stream = torch.cuda.current_stream().cuda_stream
        _check("cuLaunchKernel", self._launch(self._fn, 1, 1, 1, 1, 1, 1, 0, stream,
                                              self._params, None))

    def reset(self):
        """Forgets the stamps so far (the next replay writes slots 0 and 1)."""
        torch.cuda.synchronize()
        self.ctr.zero_()
        torch.cuda.synchronize()
        self.launches = []

    def launched(self, replay):
        """Wraps `replay` to keep the host's CLOCK_REALTIME at each call."""
        def step():
            self.launches.append(time.clock_gettime_ns(time.CLOCK_REALTIME))
            replay()
        return step

    def write(self, path, counted):
        """edge_gaps.py's format: "# measured FIRST N", then per replay
        index, launch (host ns), start and end (GPU ns); the last `counted`
        replays were the measured ones."""
        n = min(len(self.launches), self.cap // 2)
        st = self.buf[:2 * n].cpu().tolist()
        with open(path, "w") as f:
            f.write(f"# measured {len(self.launches) - counted} {n}\n")
            for i in range(n):
                f.write(f"{i} {self.launches[i]} {st[2 * i]} {st[2 * i + 1]}\n")
