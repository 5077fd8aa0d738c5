#!/usr/bin/env python3
"""Matmul workload of `cushare bench limiter` (docs/limiter.md).

A 4096x4096 bf16 matmul on the GPU through PyTorch (cuBLAS), back to back,
GPU-bound when unlimited (~0.2 ms per product on an H200). PyTorch's CUDA
runtime resolves the driver through cuGetProcAddress, so under libcushare
every cuBLAS launch goes through the limiter's wrappers.

    matmul.py [--secs S] [--warmup W] [--n N] [--batch B] [--start-mono NS]
              [--serve]

Prints one line: RESULT workload=matmul rate=PRODUCTS_PER_S kernels=N secs=T
(and tflops=...). With --serve (bench/limiter/fair.py) it measures one
window per request (timing.serve) and, when asked, adds kernel_ms=K: the
GPU time of one product run back to back (the hog's kernel length that
bounds a neighbour's wait).
"""
import argparse

import torch

from timing import (add_serve_arg, add_timing_args, gpu_ms_per_step, limiter_note, measure,
                    serve, span, wait_for_start)


def main():
    p = argparse.ArgumentParser()
    add_timing_args(p)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--batch", type=int, default=20)
    add_serve_arg(p)
    a = p.parse_args()

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    torch.matmul(x, y, out=out)
    torch.cuda.synchronize()

    def step():
        torch.matmul(x, y, out=out)

    def window(warmup, secs, gpu=False):
        counted, took = measure(step, a.batch, torch.cuda.synchronize, warmup, secs)
        rate = counted / took
        tflops = rate * 2 * a.n ** 3 / 1e12
        kernel = (f" kernel_ms={gpu_ms_per_step(step, torch.cuda.synchronize, a.batch):.4f}"
                  if gpu else "")
        return (f"workload=matmul rate={rate:.1f} kernels={counted} secs={took:.3f} "
                f"tflops={tflops:.1f}{kernel}" + span() + limiter_note())

    if a.serve:
        serve(window)
        return
    wait_for_start(a.start_mono)
    print("RESULT " + window(a.warmup, a.secs), flush=True)


if __name__ == "__main__":
    main()
