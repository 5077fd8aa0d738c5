# Does the length of the on/off period decide how much a duty-cycled,
# compute-bound workload gains from the GPU's power headroom?
# Runs 4096^2 bf16 matmuls natively: first unlimited, then busy for D of
# every P milliseconds (host-timed: launch until D ms have passed, syncing
# every few kernels, then sleep P-D). Prints throughput as a share of the
# unlimited rate with the SM clock and power seen meanwhile.
#   python3 bench/gpu-probes/dvfs_period.py [SECONDS]
import sys, time, torch
from smi_sampler import sampled

secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(50):
    a @ b
torch.cuda.synchronize()


def run(duty, period_ms):
    on = period_ms * duty / 1000.0
    off = period_ms * (1 - duty) / 1000.0
    end = time.time() + secs
    n = 0
    t0 = time.time()
    while time.time() < end:
        busy_until = time.time() + on
        while time.time() < busy_until:
            for _ in range(2):
                a @ b
            torch.cuda.synchronize()
            n += 2
        if off > 0:
            time.sleep(off)
    torch.cuda.synchronize()
    return n / (time.time() - t0)


full, fclk, fpw = sampled(lambda: run(1.0, 100))
print(f"unlimited: {full:.0f} matmuls/s, SM {fclk:.0f} MHz, {fpw:.0f} W")
for duty in (0.5, 0.75):
    for period in (2, 10, 50, 200, 1000):
        r, clk, pw = sampled(lambda: run(duty, period))
        print(f"duty {duty:.2f} period {period:5d} ms: {100 * r / full:5.1f} % of unlimited,"
              f" SM {clk:.0f} MHz, {pw:.0f} W")
