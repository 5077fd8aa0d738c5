#!/usr/bin/env python3
"""Matmul workload of `cushare bench limiter` (docs/limiter.md).

A 4096x4096 bf16 matmul on the GPU through PyTorch (cuBLAS), back to back,
GPU-bound when unlimited (~0.2 ms per product on an H200). PyTorch's CUDA
runtime resolves the driver through cuGetProcAddress, so under libcushare
every cuBLAS launch goes through the limiter's wrappers.

    matmul.py [--secs S] [--warmup W] [--n N] [--batch B] [--start-mono NS]

Prints one line: RESULT workload=matmul rate=PRODUCTS_PER_S kernels=N secs=T
(and tflops=...).
"""
import argparse

import torch

from timing import add_timing_args, limiter_note, measure, wait_for_start


def main():
    p = argparse.ArgumentParser()
    add_timing_args(p)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--batch", type=int, default=20)
    a = p.parse_args()

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    torch.matmul(x, y, out=out)
    torch.cuda.synchronize()
    wait_for_start(a.start_mono)

    counted, secs = measure(lambda: torch.matmul(x, y, out=out), a.batch,
                            torch.cuda.synchronize, a.warmup, a.secs)
    rate = counted / secs
    tflops = rate * 2 * a.n ** 3 / 1e12
    print(f"RESULT workload=matmul rate={rate:.1f} kernels={counted} "
          f"secs={secs:.3f} tflops={tflops:.1f}" + limiter_note(), flush=True)


if __name__ == "__main__":
    main()
