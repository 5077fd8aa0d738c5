# Two processes of one tenant: each tries to hold HOLD_MIB for a while.
import sys, time, torch
hold = int(sys.argv[1]) << 20
try:
    t = torch.empty(hold, dtype=torch.uint8, device="cuda")
    print(f"pid-holder got {hold >> 20} MiB", flush=True)
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 4)
except torch.OutOfMemoryError as e:
    print(f"pid-holder refused {hold >> 20} MiB: {type(e).__name__}", flush=True)
