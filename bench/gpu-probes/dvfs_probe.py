# Does a compute-bound kernel run at a higher clock when the GPU is busy
# only part of the time? Runs 4096^2 bf16 matmuls for 4 s and samples the
# SM clock and board power meanwhile. Run natively and under
# `cushare run --sm 50 --policy force`: a higher clock under the limit
# means each kernel takes less GPU time than it did at full load.
import sys, time, torch
from smi_sampler import sampled

label = sys.argv[1] if len(sys.argv) > 1 else "run"
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    a @ b
torch.cuda.synchronize()


def matmuls():
    end = time.time() + 4
    n = 0
    while time.time() < end:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        n += 10
    return n


n, clk, pw = sampled(matmuls, 0.25)
print(f"{label}: {n / 4:.0f} matmuls/s, SM clock median {clk:.0f} MHz, power median {pw:.0f} W")
