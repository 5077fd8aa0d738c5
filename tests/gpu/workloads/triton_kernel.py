#!/usr/bin/env python3
"""triton_kernel: two @triton.jit kernels on torch tensors: a vector add
over 16M fp32 and a row softmax over 4096 x 1024 fp32 (no autotuning).
Checksum = float64 sum of the add's output + weighted sum of the softmax
(exact; within 1e-6 counts too). Rate = (add + softmax) pairs/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m),
             mask=m)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    v = tl.load(in_ptr + row * n_cols + offs, mask=m, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    num = tl.exp(v)
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=m)


def main():
    args = common.parse_args(__doc__)
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    g = torch.Generator().manual_seed(0)
    n = 1 << 24
    x = torch.rand(n, generator=g).cuda()
    y = torch.rand(n, generator=g).cuda()
    out = torch.empty_like(x)
    mat = torch.randn(4096, 1024, generator=g).cuda()
    sm = torch.empty_like(mat)
    w = torch.arange(1024, device="cuda", dtype=torch.float64)

    def pair():
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        softmax_kernel[(4096,)](sm, mat, 1024, BLOCK=1024)

    pair()
    torch.cuda.synchronize()
    common.checksum(out.double().sum().item() + (sm.double() * w).sum().item(), tol=1e-6,
                    digits=12)

    def step():
        for _ in range(50):
            pair()
        torch.cuda.synchronize()
        return 50

    common.measure(step, args, "pairs/s")


if __name__ == "__main__":
    main()
