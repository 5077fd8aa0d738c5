"""The small Llama every GPU workload of this tree builds: a transformers
LlamaForCausalLM from a LlamaConfig (hidden 2048, 32 heads, 8 KV heads,
intermediate 5632, vocab 32000; 16 layers ~0.85 B parameters), bf16 on the
GPU, nothing downloaded. Seeded weights are the same in every process, so
outputs can be compared across processes and runs."""
import os

for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_k] = "1"


def build(layers=16, seeded=True):
    """The model, eval mode, on the GPU. seeded: every weight drawn from our
    own generator (whatever transformers' init does or skips); else
    transformers' init under torch.manual_seed(0)."""
    import torch
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
    model = model.to(device="cuda", dtype=torch.bfloat16)  # whatever transformers did
    if seeded:
        gen = torch.Generator(device="cuda").manual_seed(0)
        with torch.no_grad():
            for _, p in sorted(model.named_parameters()):
                if p.dim() >= 2:
                    p.normal_(0.0, 0.02, generator=gen)
                else:
                    p.fill_(1.0)
    return model.eval()
