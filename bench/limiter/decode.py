#!/usr/bin/env python3
"""LLM decode workload of the fair-share benchmark (bench/limiter/fair.py,
docs/limiter.md "What a share means").

A ~1 B Llama built from a config (no download: random weights, seeded),
bf16, Hugging Face `generate` with a batch of 32 prompts of 128 tokens and
32 new tokens per call (greedy, exactly 32), in a loop. Launch-bound: the
GPU idles between its small kernels while Python prepares the next.

    decode.py [--secs S] [--warmup W] [--start-mono NS] [--batch-size B]
              [--prompt P] [--new N] [--layers L]

Prints one line: RESULT workload=decode rate=TOKENS_PER_S kernels=CALLS
secs=T calls=C p50_ms=P p99_ms=Q (per-call latency percentiles).
"""
import argparse
import time

import torch

from timing import add_timing_args, limiter_note, wait_for_start


def build(layers):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=2048, tie_word_embeddings=False)
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    return model.to(device="cuda", dtype=torch.bfloat16).eval()


def main():
    p = argparse.ArgumentParser()
    add_timing_args(p)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--layers", type=int, default=16)
    a = p.parse_args()
    model = build(a.layers)
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, 32000, (a.batch_size, a.prompt), device="cuda", generator=g)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=a.new, min_new_tokens=a.new,
              do_sample=False, pad_token_id=0)

    def call():
        with torch.no_grad():
            model.generate(ids, **kw)
        torch.cuda.synchronize()

    call()  # first call: allocations, kernels chosen
    wait_for_start(a.start_mono)
    t0 = time.monotonic()
    lat, t_meas, measuring = [], 0.0, False
    while True:
        c0 = time.monotonic()
        call()
        t = time.monotonic()
        if not measuring and t - t0 >= a.warmup:
            measuring, t_meas = True, t
            continue
        if measuring:
            lat.append((t - c0) * 1e3)
            if t - t_meas >= a.secs:
                break
    secs = t - t_meas
    lat.sort()
    p50 = lat[int(0.5 * (len(lat) - 1) + 0.5)]
    p99 = lat[int(0.99 * (len(lat) - 1) + 0.5)]
    tokens = len(lat) * a.batch_size * a.new
    print(f"RESULT workload=decode rate={tokens / secs:.1f} kernels={len(lat)} secs={secs:.3f} "
          f"calls={len(lat)} p50_ms={p50:.3f} p99_ms={p99:.3f}" + limiter_note(), flush=True)


if __name__ == "__main__":
    main()
