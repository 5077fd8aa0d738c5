# Does a compute-bound kernel run at a higher clock when the GPU is busy
# only part of the time? Runs 4096^2 bf16 matmuls for 4 s and samples the
# SM clock and board power meanwhile. Run natively and under
# `cushare run --sm 50 --policy force`: a higher clock under the limit
# means each kernel takes less GPU time than it did at full load.
import os, subprocess, sys, threading, time, statistics, torch

label = sys.argv[1] if len(sys.argv) > 1 else "run"
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    a @ b
torch.cuda.synchronize()
samples = []
stop = False

def sample():
    while not stop:
        # the first visible device (an index; a UUID works for -i as well)
        dev = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
        out = subprocess.run(["nvidia-smi", "-i", dev, "--query-gpu=clocks.sm,power.draw",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout.strip()
        if out:
            c, p = out.split(",")
            samples.append((float(c), float(p)))
        time.sleep(0.25)

t = threading.Thread(target=sample)
t.start()
end = time.time() + 4
n = 0
while time.time() < end:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    n += 10
stop = True
t.join()
clk = statistics.median(c for c, _ in samples) if samples else float("nan")
pw = statistics.median(p for _, p in samples) if samples else float("nan")
print(f"{label}: {n / 4:.0f} matmuls/s, SM clock median {clk:.0f} MHz, power median {pw:.0f} W")
