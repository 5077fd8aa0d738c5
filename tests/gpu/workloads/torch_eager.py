#!/usr/bin/env python3
"""torch_eager: training steps of a small MLP (fp32 weights, bf16
autocast, AdamW) on fixed data. Checksum = loss after 30 steps from a
seeded start (exact; within 1e-3 counts too, in case cuBLAS picks another
kernel). Rate = training steps/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    args = common.parse_args(__doc__)
    import torch
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 1024)).cuda()
    x = torch.randn(512, 1024, generator=g).cuda()
    target = torch.randn(512, 1024, generator=g).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(30):
        loss = train_step()
    common.checksum(loss.item(), tol=1e-3)

    def step():
        for _ in range(10):
            train_step()
        torch.cuda.synchronize()
        return 10

    common.measure(step, args, "steps/s")


if __name__ == "__main__":
    main()
