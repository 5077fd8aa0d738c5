#!/usr/bin/env python3
"""torch_graph: CUDA graph capture + replay of 4 x Linear(2048), batch 8,
fp16 (the shape whose capture failed under --sm, DESIGN.md). Rate =
replays/s; checksum = sum |output| of one replay on a fixed input (exact).
--capture-mode global|thread_local|relaxed picks torch's capture mode."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def build(torch, seed=0):
    """The model and a fixed input, made on the CPU (seeded) then moved."""
    g = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(4):
        lin = torch.nn.Linear(2048, 2048)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(2048, 2048, generator=g) / 45.0)
            lin.bias.copy_(torch.randn(2048, generator=g) / 45.0)
        layers.append(lin)
    model = torch.nn.Sequential(*layers).cuda().half().eval()
    x = torch.randn(8, 2048, generator=g).cuda().half()
    return model, x


def warm(torch, fn, n=3):
    """Runs fn on a side stream first, as torch's capture recipe asks."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(n):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


def main():
    args = common.parse_args(__doc__, lambda p: (
        p.add_argument("--capture-mode", default="global"),
        p.add_argument("--batch", type=int, default=100)))
    common.wait_start(args.start_mono)
    import torch
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    model, x = build(torch)
    static_x = x.clone()
    with torch.no_grad():
        warm(torch, lambda: model(static_x))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode=args.capture_mode):
            static_y = model(static_x)
    g.replay()
    torch.cuda.synchronize()
    common.checksum(static_y.double().abs().sum().item())

    def step():
        for _ in range(args.batch):
            g.replay()
        torch.cuda.synchronize()
        return args.batch

    common.measure(step, args, "replays/s")


if __name__ == "__main__":
    main()
