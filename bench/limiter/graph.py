#!/usr/bin/env python3
"""CUDA-graph replay workload of `cushare bench limiter` (docs/limiter.md).

The shape of a small inference service: 4 x Linear(2048, 2048) at batch 8
in fp16, captured once with torch.cuda.graph and replayed back to back
(~22 us per replay on an H200, 45k replays/s). Every replay is one
cuGraphLaunch, so the limiter paces and measures it as one unit.

    graph.py [--secs S] [--warmup W] [--layers L] [--width D] [--batch-size B]
             [--per-sync K] [--start-mono NS] [--trace FILE] [--serve]

Prints one line: RESULT workload=graph rate=REPLAYS_PER_S kernels=N secs=T
gpu_us=U, U the GPU time of a replay when replays run back to back, measured
after the run in this process. The same graph can run up to ~5 % slower in
one process than in the next, with or without cushare, by where its memory
landed (its 32 MiB of weights are near the size of the H200's 50 MiB L2;
bench/limiter/probes/placement.sh); `cushare bench limiter` uses U to tell
that apart from what sharing costs.
With --serve (bench/limiter/fair.py) it measures one window per request
(timing.serve), adding kernel_ms=U/1000 only when asked.
With --trace (diagnosis) the graph also stamps the GPU's clock
before and after its work (stamps.py) and FILE gets every replay's launch,
start and end in bench/limiter/probes/edge_gaps.py's format.
"""
import argparse

import torch

from timing import (add_serve_arg, add_timing_args, gpu_ms_per_step, limiter_note, measure,
                    serve, span, wait_for_start)


def capture(layers=4, width=2048, batch_size=8, stamps=None):
    """The model captured as one graph, replayed once; with `stamps`, the
    graph stamps the GPU's clock before and after the model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    model = model.half().cuda().eval()
    x = torch.randn(batch_size, width, device="cuda", dtype=torch.half)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):  # warm cuBLAS up outside the capture
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        if stamps:
            stamps.stamp()
        model(x)
        if stamps:
            stamps.stamp()
    g.replay()
    torch.cuda.synchronize()
    return g


def gpu_us_per_replay(replay, n=100, tries=20):
    """GPU microseconds per replay queued back to back (timing.gpu_ms_per_step)."""
    return gpu_ms_per_step(replay, torch.cuda.synchronize, n, tries) * 1000


def main():
    p = argparse.ArgumentParser()
    add_timing_args(p)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--per-sync", type=int, default=200)
    p.add_argument("--trace")
    add_serve_arg(p)
    a = p.parse_args()
    if a.serve and a.trace:
        p.error("--trace takes one run: leave out --serve")
    stamps = None
    if a.trace:
        from stamps import Stamps
        stamps = Stamps()

    g = capture(a.layers, a.width, a.batch_size, stamps)
    step = g.replay
    if stamps:
        stamps.reset()
        step = stamps.launched(g.replay)
    if a.serve:
        def window(warmup, secs, gpu=False):
            counted, took = measure(step, a.per_sync, torch.cuda.synchronize, warmup, secs)
            kernel = f" kernel_ms={gpu_us_per_replay(g.replay) / 1000:.4f}" if gpu else ""
            return (f"workload=graph rate={counted / took:.1f} kernels={counted} "
                    f"secs={took:.3f}{kernel}" + span() + limiter_note())
        serve(window)
        return
    wait_for_start(a.start_mono)

    counted, secs = measure(step, a.per_sync, torch.cuda.synchronize, a.warmup, a.secs)
    gpu_us = gpu_us_per_replay(g.replay)
    print(f"RESULT workload=graph rate={counted / secs:.1f} kernels={counted} secs={secs:.3f} "
          f"gpu_us={gpu_us:.3f}", flush=True)
    if stamps:
        stamps.write(a.trace, counted)


if __name__ == "__main__":
    main()
