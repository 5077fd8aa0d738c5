#!/usr/bin/env python3
"""hf_llama: transformers LlamaForCausalLM from a LlamaConfig (~0.85 B
parameters: hidden 2048, 16 layers, 32 heads, 8 KV heads, intermediate
5632, vocab 32000), seeded random weights, bf16 on the GPU, nothing
downloaded. Greedy generate of 32 new tokens from a fixed prompt of 16
token ids; --static uses cache_implementation="static". With a static
cache, recent transformers torch.compile the decoder on their own (minutes
per configuration); that is switched off (generation_config.disable_compile)
unless --compile: the torch_compile row covers inductor and CUDA graphs.
Checksum = the generated ids (exact). Rate = generated tokens/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama  # noqa: E402

# 16 fixed token ids; none is the config's EOS (2), so nothing stops early.
PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203, 29889, 13, 1576,
          338]
NEW = 32


def main():
    args = common.parse_args(__doc__, lambda p: (p.add_argument("--static", action="store_true"),
                                                 p.add_argument("--compile", action="store_true")))
    import torch
    import transformers
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    model = llama.build()
    n = sum(p.numel() for p in model.parameters())
    common.note(f"transformers {transformers.__version__}, {n / 1e9:.2f} B params, "
                f"{'static' if args.static else 'dynamic'} cache")
    ids = torch.tensor([PROMPT], device="cuda")
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
              do_sample=False, pad_token_id=0)
    if args.static:
        kw["cache_implementation"] = "static"
        if not args.compile:
            if hasattr(getattr(model, "generation_config", None), "disable_compile"):
                model.generation_config.disable_compile = True
            else:
                common.note("this transformers has no disable_compile: generate may compile")

    def generate():
        with torch.no_grad():
            out = model.generate(ids, **kw)
        torch.cuda.synchronize()
        return out[0, ids.shape[1]:].tolist()

    tokens = generate()
    common.checksum(",".join(map(str, tokens)))
    try:
        from torch._dynamo.utils import counters
        graphs = counters["stats"].get("unique_graphs", 0)
        if graphs:
            common.note(f"generate compiled {graphs} graph(s)")
    except Exception:  # internal counters; the note is optional
        pass
    common.measure(lambda: len(generate()), args, "tokens/s")


if __name__ == "__main__":
    main()
