#!/usr/bin/env python3
"""torch_expandable: PyTorch's allocator with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, i.e. the VMM path
(cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease): a varying set of
tensors of 8..256 MiB is allocated, filled and freed, with a bf16 matmul
per cycle and torch.cuda.empty_cache() every 8 cycles (gives physical
memory back). At most ~1.2 GiB is live. Checksum = sum over 40 fixed
cycles of sum |matmul| (within 1e-3). Rate = cycles/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
MiB = 1 << 20
LIVE_MAX = 1200 * MiB


def main():
    args = common.parse_args(__doc__)
    import torch
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1024, 1024, generator=g).cuda().to(torch.bfloat16)
    b = torch.randn(1024, 1024, generator=g).cuda().to(torch.bfloat16)
    live, state = [], {"i": 0, "seed": 12345, "bytes": 0}

    def cycle():
        i = state["i"]
        state["i"] += 1
        acc = 0.0
        for _ in range(3):
            state["seed"] = (state["seed"] * 1103515245 + 12345) % (1 << 31)
            size = (8 << (state["seed"] % 6)) * MiB  # 8, 16, ..., 256 MiB
            t = torch.empty(size // 2, dtype=torch.bfloat16, device="cuda")
            t.fill_(float(i % 7))
            live.append(t)
            state["bytes"] += size
            while state["bytes"] > LIVE_MAX:
                state["bytes"] -= live.pop(0).numel() * 2
        c = (a * (1 + i % 5)) @ b
        acc += c.float().abs().sum()
        if i % 8 == 7:
            torch.cuda.empty_cache()
        return acc

    total_sum = 0.0
    for _ in range(40):
        total_sum += float(cycle())
    common.checksum(total_sum, tol=1e-3)
    common.note(f"max reserved {torch.cuda.max_memory_reserved() / MiB:.0f} MiB")

    def step():
        for _ in range(4):
            cycle()
        torch.cuda.synchronize()
        return 4

    common.measure(step, args, "cycles/s")


if __name__ == "__main__":
    main()
