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
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--secs", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--start-mono", type=int, default=0)
    a = p.parse_args()

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    torch.matmul(x, y, out=out)
    torch.cuda.synchronize()
    if a.start_mono:
        delay = a.start_mono / 1e9 - time.clock_gettime(time.CLOCK_MONOTONIC)
        if delay > 0:
            time.sleep(delay)

    t0 = time.monotonic()
    measuring, t_meas, counted = False, 0.0, 0
    while True:
        for _ in range(a.batch):
            torch.matmul(x, y, out=out)
        torch.cuda.synchronize()
        t = time.monotonic()
        if not measuring and t - t0 >= a.warmup:
            measuring, t_meas = True, t
            continue
        if measuring:
            counted += a.batch
            if t - t_meas >= a.secs:
                rate = counted / (t - t_meas)
                tflops = rate * 2 * a.n ** 3 / 1e12
                print(f"RESULT workload=matmul rate={rate:.1f} kernels={counted} "
                      f"secs={t - t_meas:.3f} tflops={tflops:.1f}", flush=True)
                return


if __name__ == "__main__":
    main()
