#!/usr/bin/env python3
"""Is bench/limiter/graph.py bound by its CPU or by the GPU, and
does it run at one speed on every CPU? One native process (no cushare):

- launch: host microseconds per replay call while the GPU is held busy by
  a sleep kernel, so the calls never wait for the GPU;
- gpu: GPU microseconds per replay when replays are queued back to back
  (CUDA events around 100 queued replays);
- then, pinned to each CPU in turn (PASSES times), the workload's own loop
  (replays, a synchronisation every 200) for SECS, and a pure-Python loop
  as the CPU's speed without the GPU.

If launch is close to gpu the workload is bound by whichever is slower at
the moment, and a slower CPU makes a slower tenant.
    graph_probe.py [--secs S] [--passes P]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
from graph import capture  # noqa: E402
from timing import measure  # noqa: E402


def launch_and_gpu_us(g, n=100):
    """(host us per replay call, GPU us per replay) with the GPU kept busy."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(60_000_000)  # ~30 ms: the calls below never wait
    start.record()
    t = time.perf_counter()
    for _ in range(n):
        g.replay()
    host = (time.perf_counter() - t) / n * 1e6
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) * 1000 / n


def loop_rate(g, secs, per_sync=200):
    """Replays per second in graph.py's own loop (timing.measure), after a
    0.2 s warm-up."""
    counted, measured = measure(g.replay, per_sync, torch.cuda.synchronize, 0.2, secs)
    return counted / measured


def python_mops():
    """Millions of simple bytecode-loop iterations a second on this CPU."""
    t = time.perf_counter()
    x = 0
    for i in range(2_000_000):
        x += i
    return 2.0 / (time.perf_counter() - t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--secs", type=float, default=0.5)
    p.add_argument("--passes", type=int, default=2)
    a = p.parse_args()
    g = capture()
    for _ in range(3):
        launch_and_gpu_us(g)
    pairs = [launch_and_gpu_us(g) for _ in range(5)]
    print("launch us/replay: " + " ".join(f"{h:.2f}" for h, _ in pairs))
    print("gpu us/replay:    " + " ".join(f"{d:.2f}" for _, d in pairs))
    print(f"native loop: {loop_rate(g, 1.0):.0f} replays/s (unpinned)")
    cpus = sorted(os.sched_getaffinity(0))
    for pas in range(a.passes):
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            rate = loop_rate(g, a.secs)
            h, d = launch_and_gpu_us(g)
            print(f"pass {pas} cpu {cpu:2d}: loop {rate:.0f} replays/s, launch {h:.2f} us, "
                  f"gpu {d:.2f} us, python {python_mops():.1f} M/s", flush=True)
    os.sched_setaffinity(0, cpus)


if __name__ == "__main__":
    main()
