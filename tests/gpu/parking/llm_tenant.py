#!/usr/bin/env python3
"""A bursty inference tenant for tests/gpu/parking/run.sh: a transformers
LlamaForCausalLM built from a LlamaConfig (~0.85 B parameters, built by
tests/gpu/workloads/llama.py), weights seeded (the same in every tenant),
bf16, nothing downloaded; plus a ballast tensor of --ballast-gib GiB with a
known pattern (the KV caches and activations of a bigger deployment).

    llm_tenant.py --seed S --bursts K --gap-s A B --ballast-gib G
        K bursts, each after an idle gap drawn (seeded by S) in [A, B] s;
        a burst sends a 16-token prompt drawn from S to the GPU (its first
        CUDA work: timed as first_op_ms, it includes the wake of a parked
        tenant) and generates 32 tokens greedily. One JSON line per burst;
        at the end the ballast is checked. An out-of-memory error is a line
        {"oom": ...} and exit 3.
    llm_tenant.py --reference T K
        the same prompts of tenants 0..T-1, bursts 0..K-1, generated one
        after another in this one process alone: the outputs to compare.
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
import llama  # noqa: E402

NEW = 32


def prompt(seed, burst):
    r = random.Random(seed * 1000 + burst)
    return [1] + [r.randrange(3, 32000) for _ in range(15)]


def gap(seed, burst, a, b):
    return random.Random(seed * 7919 + burst).uniform(a, b)


def build():
    import torch
    model = llama.build()
    if hasattr(getattr(model, "generation_config", None), "disable_compile"):
        model.generation_config.disable_compile = True
    torch.cuda.synchronize()
    return model


def generate(model, ids_list):
    import torch
    t0 = time.monotonic()
    ids = torch.tensor([ids_list], device="cuda")
    torch.cuda.synchronize()
    t1 = time.monotonic()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                             min_new_tokens=NEW, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    t2 = time.monotonic()
    return out[0, ids.shape[1]:].tolist(), (t1 - t0) * 1e3, (t2 - t1) * 1e3


def emit(obj):
    print(json.dumps(obj), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bursts", type=int, default=3)
    p.add_argument("--gap-s", type=float, nargs=2, default=(3.0, 10.0))
    p.add_argument("--ballast-gib", type=float, default=0.0)
    p.add_argument("--reference", type=int, nargs=2, default=None)
    a = p.parse_args()
    import torch
    try:
        model = build()
        if a.reference:
            tenants, k = a.reference
            for s in range(tenants):
                for b in range(k):
                    toks, _, _ = generate(model, prompt(s, b))
                    emit({"tenant": s, "burst": b, "tokens": toks})
            return 0
        n = int(a.ballast_gib * (1 << 30)) // 4
        ballast = torch.full((max(n, 1),), a.seed * 31 + 7, device="cuda", dtype=torch.int32)
        expect = int(ballast[:: max(1, n // 4096)].sum().item())
        torch.cuda.synchronize()
        emit({"tenant": a.seed, "ready": True,
              "reserved_mib": torch.cuda.memory_reserved() >> 20})
        for b in range(a.bursts):
            g = gap(a.seed, b, *a.gap_s)
            time.sleep(g)
            toks, first_ms, gen_ms = generate(model, prompt(a.seed, b))
            emit({"tenant": a.seed, "burst": b, "first_op_ms": round(first_ms, 3),
                  "gen_ms": round(gen_ms, 3), "gap_ms": round(g * 1e3), "tokens": toks})
        got = int(ballast[:: max(1, n // 4096)].sum().item())
        emit({"tenant": a.seed, "ballast_intact": got == expect})
        return 0
    except torch.cuda.OutOfMemoryError as e:
        emit({"tenant": a.seed, "oom": str(e)[:300]})
        return 3


if __name__ == "__main__":
    sys.exit(main())
