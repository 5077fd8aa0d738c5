#!/usr/bin/env python3
"""torch_compile: torch.compile(mode="reduce-overhead") of a small MLP
block stack (bf16, inference), which makes inductor capture CUDA graphs
(cudagraph trees). The runner points TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR at one directory for all five configurations, so only the
first pays for compilation. Checksum = sum |output| on a fixed input
(within 1e-3). Rate = compiled forward calls/s."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    args = common.parse_args(__doc__)
    import torch
    free, total = torch.cuda.mem_get_info()
    common.view(total, free)
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(1024)
            self.up = torch.nn.Linear(1024, 4096)
            self.down = torch.nn.Linear(4096, 1024)

        def forward(self, h):
            return h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))

    model = torch.nn.Sequential(*[Block() for _ in range(3)]).cuda().to(torch.bfloat16).eval()
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(1)).cuda().to(torch.bfloat16)
    compiled = torch.compile(model, mode="reduce-overhead")

    def call():
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    t = time.monotonic()
    with torch.no_grad():
        for _ in range(3):  # cudagraph trees record on the later calls
            out = call()
        torch.cuda.synchronize()
        common.note(f"compile+record {time.monotonic() - t:.1f} s")
        try:
            from torch._dynamo.utils import counters
            skips = sum(counters["inductor"].get(k, 0) for k in counters["inductor"]
                        if "cudagraph_skip" in k)
            if skips:
                common.note(f"inductor skipped cudagraphs {skips} time(s)")
        except Exception:  # counters are internal; the note is optional
            pass
        common.checksum(out.clone().double().abs().sum().item(), tol=1e-3)

        def step():
            for _ in range(50):
                call()
            torch.cuda.synchronize()
            return 50

        common.measure(step, args, "calls/s")


if __name__ == "__main__":
    main()
