#!/usr/bin/env python3
"""LLM decode workload of the fair-share benchmark (bench/limiter/fair.py,
docs/limiter.md "What a share means").

A ~1 B Llama built from a config (no download: random weights, seeded),
bf16, Hugging Face `generate` with a batch of 32 prompts of 128 tokens and
32 new tokens per call (greedy, exactly 32), in a loop. Launch-bound: the
GPU idles between its small kernels while Python prepares the next.

    decode.py [--secs S] [--warmup W] [--start-mono NS] [--batch-size B]
              [--prompt P] [--new N] [--layers L] [--serve]

Prints one line: RESULT workload=decode rate=TOKENS_PER_S kernels=CALLS
secs=T calls=C p50_ms=P p99_ms=Q step_p99_ms=R cpu_pct=U: the rate counts
the tokens made within the window step by step, P and Q are
percentiles of the latency of a call (one `generate`), R of the time
between two tokens of a call (a decode step; generate synchronises after
each), U the CPU time of the process over the window in percent of one
CPU (a launch-bound loop keeps one busy: less is time it waited, for the
GPU or for a CPU the host gave to others). With
--serve (fair.py) the model is loaded once and one such line is printed
per window asked for (timing.serve).
"""
import argparse
import os
import sys
import time

import torch

from timing import (add_serve_arg, add_timing_args, in_window, limiter_note, serve,
                    wait_for_start)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "gpu", "workloads"))
import llama  # noqa: E402


def step_clock(batch):
    """A stopping criterion that never stops and notes the time at each
    decode step (generate calls it once per new token)."""
    import transformers
    from transformers import StoppingCriteria
    # From 4.39 on a criterion answers per sequence; before, one bool.
    per_row = tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 39)
    never = torch.zeros(batch, dtype=torch.bool, device="cuda") if per_row else False

    class StepClock(StoppingCriteria):
        def __init__(self):
            self.t = []

        def __call__(self, input_ids, scores, **kwargs):
            self.t.append(time.monotonic())
            return never
    return StepClock()


def percentile(v, q):
    v = sorted(v)
    return v[int(q * (len(v) - 1) + 0.5)] if v else float("nan")


def main():
    p = argparse.ArgumentParser()
    add_timing_args(p)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--layers", type=int, default=16)
    add_serve_arg(p)
    a = p.parse_args()
    from transformers import StoppingCriteriaList
    model = llama.build(a.layers, seeded=False)
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, 32000, (a.batch_size, a.prompt), device="cuda", generator=g)
    clock = step_clock(a.batch_size)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=a.new, min_new_tokens=a.new,
              do_sample=False, pad_token_id=0, stopping_criteria=StoppingCriteriaList([clock]))

    def call():
        """One generate; the times its tokens were made (one per step)."""
        clock.t.clear()
        with torch.no_grad():
            model.generate(ids, **kw)
        torch.cuda.synchronize()
        return list(clock.t)

    def window(warmup, secs, gpu=False):
        """Tokens made in [start + warmup, + secs), counted by step: a call
        is a fifth of the window, and whole calls would stretch the window
        past the other tenants' by up to one at either edge. A call's
        latency counts when it ends inside the window."""
        lo = time.monotonic() + warmup
        hi = lo + secs
        lat, steps, made, cpu0, c_meas = [], [], 0, None, 0.0
        while True:
            c0 = time.monotonic()
            stamps = call()
            t = time.monotonic()
            if t < lo:
                continue
            if cpu0 is None:
                cpu0, c_meas = time.process_time(), t
            inside = in_window(stamps, lo, hi)
            made += len(inside)
            steps += [(b - a_) * 1e3 for a_, b in zip(inside, inside[1:])]
            if t < hi:
                lat.append((t - c0) * 1e3)
            else:
                break
        cpu = time.process_time() - cpu0
        tokens = made * a.batch_size
        return (f"workload=decode rate={tokens / secs:.1f} kernels={len(lat)} secs={secs:.3f} "
                f"calls={len(lat)} p50_ms={percentile(lat, 0.5):.3f} "
                f"p99_ms={percentile(lat, 0.99):.3f} "
                f"step_p99_ms={percentile(steps, 0.99):.3f} "
                f"cpu_pct={100 * cpu / max(t - c_meas, 1e-9):.1f} "
                f"from={lo:.6f} to={hi:.6f}"
                + limiter_note())

    call()  # first call: allocations, kernels chosen
    if a.serve:
        serve(window)
        return
    wait_for_start(a.start_mono)
    print("RESULT " + window(a.warmup, a.secs), flush=True)


if __name__ == "__main__":
    main()
