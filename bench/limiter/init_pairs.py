#!/usr/bin/env python3
"""The start-up ratio of `cushare bench init --baseline --repeat K` text
output, judged on pairs: each run's cuInit p99 under cushare over the
baseline run of the same pair, leaving out the first pair (the first
cuInit of a sitting reads apart from the rest).

    init_pairs.py INIT_TXT

Prints the median ratio, then every pair's: "1.012 1.001 1.019 ...".
Prints nothing (exit 1) when no pair after the first is complete."""
import re
import statistics
import sys


def pair_ratios(lines):
    p99, run = {}, None
    for line in lines:
        m = re.match(r"run (\d+) (baseline|cushare):", line)
        if m:
            run = (int(m.group(1)), m.group(2))
        m = re.match(r"\s+cuInit latency \(ms\).* p99 ([0-9.]+)", line)
        if m and run:
            p99[run] = float(m.group(1))
    return [p99[(k, "cushare")] / p99[(k, "baseline")]
            for k in sorted({k for k, _ in p99})
            if k > 1 and (k, "cushare") in p99 and (k, "baseline") in p99]


def main():
    with open(sys.argv[1]) as f:
        r = pair_ratios(f)
    if not r:
        return 1
    print(f"{statistics.median(r):.3f} " + " ".join(f"{x:.3f}" for x in r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
