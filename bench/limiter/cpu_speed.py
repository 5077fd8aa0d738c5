#!/usr/bin/env python3
"""How fast each CPU of this machine runs one thread of Python, and which
CPUs slow each other down: the host's view of a virtual machine's CPUs
(its hyper-thread siblings, its other guests) is invisible from inside,
and a launch-bound decode loop runs at its CPU's speed (docs/limiter.md,
"Whose cost, and the host's").

    cpu_speed.py [--secs S] [--probe CPU] [--rounds N]

Prints, per CPU, the loop's rate alone on it (median of --rounds), then
for --probe (default: the second CPU allowed) its rate while each other
CPU runs the same loop, as a fraction of its rate alone: a sibling that
shares a physical core with it shows as a clear dip. Asserts nothing.
"""
import argparse
import multiprocessing as mp
import os
import statistics
import time


def spin(cpu, secs, out):
    os.sched_setaffinity(0, {cpu})
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(20000):
            n += 1
        t = time.perf_counter() - t0
        if t >= secs:
            break
    out.put((cpu, n / t))


def run(cpus, secs):
    """Rates of the loop run at once on each CPU of `cpus`, by CPU."""
    q = mp.Queue()
    ps = [mp.Process(target=spin, args=(c, secs, q)) for c in cpus]
    for p in ps:
        p.start()
    got = dict(q.get() for _ in ps)
    for p in ps:
        p.join()
    return got


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--secs", type=float, default=0.2)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--probe", type=int, default=None)
    a = a.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    probe = a.probe if a.probe is not None else cpus[min(1, len(cpus) - 1)]
    alone = {c: statistics.median(run([c], a.secs)[c] for _ in range(a.rounds)) for c in cpus}
    best = max(alone.values())
    print("alone, per CPU (fraction of the fastest): " +
          " ".join(f"{c}:{alone[c] / best:.2f}" for c in cpus))
    pair = {}
    for c in cpus:
        if c != probe:
            pair[c] = statistics.median(run([probe, c], a.secs)[probe] for _ in range(a.rounds))
    print(f"CPU {probe} beside each other CPU busy (fraction of it alone): " +
          " ".join(f"{c}:{pair[c] / alone[probe]:.2f}" for c in sorted(pair)))


if __name__ == "__main__":
    main()
