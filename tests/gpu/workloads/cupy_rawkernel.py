#!/usr/bin/env python3
"""cupy_rawkernel: a CuPy RawKernel (NVRTC-compiled saxpy, y = a*x + y over
16M fp32). Checksum = float64 host sum of y after 10 kernels on fixed
inputs (exact). Rate = kernels/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SRC = r'''
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
'''


def main():
    args = common.parse_args(__doc__)
    import cupy as cp
    import numpy as np
    free, total = cp.cuda.runtime.memGetInfo()
    common.view(total, free)
    saxpy = cp.RawKernel(SRC, "saxpy")
    n = 1 << 24
    x = (cp.arange(n, dtype=cp.float32) % 1000) * cp.float32(1e-3)
    y = cp.ones(n, dtype=cp.float32)
    grid, block = ((n + 255) // 256,), (256,)
    kargs = (np.float32(0.5), x, y, np.uint32(n))
    for _ in range(10):
        saxpy(grid, block, kargs)
    common.checksum(float(cp.asnumpy(y).astype(np.float64).sum()), digits=12)

    def step():
        for _ in range(100):
            saxpy(grid, block, kargs)
        cp.cuda.Device().synchronize()
        return 100

    common.measure(step, args, "kernels/s")


if __name__ == "__main__":
    main()
