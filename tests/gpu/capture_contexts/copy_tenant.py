#!/usr/bin/env python3
"""Copy-heavy tenant for memcpy_interference (tests/gpu/capture_contexts/steps.py):
a loop of 256 MiB device-to-device and host-to-device copies
(cudaMemcpyAsync through torch's copy_, pinned host memory) on one stream,
synchronised per batch. Waits for --start-mono, warms up, measures --secs.
Prints `COPY d2d_GBps=X h2d_GBps=Y` and `RATE <total GB/s> GB/s`."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
import common  # noqa: E402

MiB = 1 << 20


def main():
    args = common.parse_args(__doc__)
    import torch
    n = 256 * MiB
    src = torch.ones(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = torch.ones(n, dtype=torch.uint8).pin_memory()
    torch.cuda.synchronize()
    common.wait_start(args.start_mono)
    t_d2d = t_h2d = 0.0
    b_d2d = b_h2d = 0

    def step():
        nonlocal t_d2d, t_h2d, b_d2d, b_h2d
        t = time.monotonic()
        for _ in range(4):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        t2 = time.monotonic()
        for _ in range(2):
            dst.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        t3 = time.monotonic()
        if meter.t_meas is not None:
            t_d2d, t_h2d = t_d2d + t2 - t, t_h2d + t3 - t2
            b_d2d, b_h2d = b_d2d + 4 * n, b_h2d + 2 * n
        return 6 * n / 1e9

    meter = common.Meter(args.secs, args.warmup)
    while meter.add(step()):
        pass
    print(f"COPY d2d_GBps={b_d2d / 1e9 / max(t_d2d, 1e-9):.1f} "
          f"h2d_GBps={b_h2d / 1e9 / max(t_h2d, 1e-9):.1f}", flush=True)
    common.emit("RATE", f"{meter.rate:.6g}", "GB/s")


if __name__ == "__main__":
    main()
