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

for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[k] = "1"

# 16 fixed token ids; none is the config's EOS (2), so nothing stops early.
PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203, 29889, 13, 1576,
          338]
NEW = 32


def main():
    args = common.parse_args(__doc__, lambda p: (p.add_argument("--static", action="store_true"),
                                                 p.add_argument("--compile", action="store_true")))
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=2048, tie_word_embeddings=False)
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    model = model.to(device="cuda", dtype=torch.bfloat16)  # whatever transformers did
    # Our own seeded init, whatever transformers' init does or skips.
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                p.normal_(0.0, 0.02, generator=gen)
            else:
                p.fill_(1.0)
    model.eval()
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
