#!/usr/bin/env python3
"""Stream-capture cases of the torch_graph model (tests/gpu/workloads/
torch_graph.py), one per process:

    capture_modes.py global|thread_local|relaxed   torch.cuda.graph(capture_error_mode=...)
    capture_modes.py multistream    fork/join: a side stream inside the capture (wait_stream both ways)
    capture_modes.py graph_pool     tensors created inside the capture (torch's graph pool,
                                    64 MiB of them), and a second graph sharing that pool
    capture_modes.py mallocasync    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: the
                                    allocations (and a free) inside the capture become graph
                                    memory nodes

Each case captures, replays three times on new inputs and compares with
eager results. Prints `CAPTURE <case> ok max_err=E` and exits 0, or
`CAPTURE <case> FAIL <exception>` and exits 1.
"""
import os
import sys

CASES = ("global", "thread_local", "relaxed", "multistream", "graph_pool", "mallocasync")
case = sys.argv[1] if len(sys.argv) > 1 else ""
if case not in CASES:
    sys.exit(f"usage: capture_modes.py {'|'.join(CASES)}")
if case == "mallocasync":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
import torch  # noqa: E402
from torch_graph import build, warm  # noqa: E402


def main():
    model, x = build(torch)
    model2, _ = build(torch, seed=1)
    static_x = x.clone()
    mode = case if case in ("global", "thread_local", "relaxed") else "global"
    MiB = 1 << 20

    def body():
        if case == "multistream":
            main_s = torch.cuda.current_stream()
            side = torch.cuda.Stream()
            side.wait_stream(main_s)
            with torch.cuda.stream(side):
                a = model(static_x)
            b = model2(static_x)
            main_s.wait_stream(side)
            return a + b
        if case in ("graph_pool", "mallocasync"):
            tmp = torch.full((32 * MiB,), 0.5, device="cuda", dtype=torch.float16)  # 64 MiB
            y = model(static_x) + tmp[: 8 * 2048].view(8, 2048)
            del tmp  # under cudaMallocAsync: a free node in the graph
            return y
        return model(static_x)

    def eager(inp):
        y = model(inp)
        if case == "multistream":
            y = y + model2(inp)
        if case in ("graph_pool", "mallocasync"):
            y = y + 0.5
        return y

    with torch.no_grad():
        warm(torch, body)
        g = torch.cuda.CUDAGraph()
        before = torch.cuda.memory_reserved() if case == "graph_pool" else 0
        with torch.cuda.graph(g, capture_error_mode=mode):
            out = body()
        extra = ""
        if case == "graph_pool":
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2, pool=g.pool()):
                out2 = out * 2
            extra = f" pool grew {(torch.cuda.memory_reserved() - before) / MiB:.0f} MiB"
        err = 0.0
        gen = torch.Generator().manual_seed(7)
        for _ in range(3):
            static_x.copy_(torch.randn(8, 2048, generator=gen).cuda().half())
            g.replay()
            if case == "graph_pool":
                g2.replay()
                err = max(err, (out2 - 2 * out).abs().max().item())
            torch.cuda.synchronize()
            err = max(err, (out.float() - eager(static_x).float()).abs().max().item())
    if err > 1e-2:
        raise RuntimeError(f"replay differs from eager: max |error| {err:.3g}")
    print(f"CAPTURE {case} ok max_err={err:.3g}{extra}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the reason is the result
        msg = " ".join(str(e).split())[:200]
        print(f"CAPTURE {case} FAIL {type(e).__name__}: {msg}", flush=True)
        sys.exit(1)
