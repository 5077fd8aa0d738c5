"""Median SM clock and board power of the first visible GPU while a
function runs (nvidia-smi sampled every 0.2 s): shared by the DVFS probes
in tests/gpu."""
import os
import statistics
import subprocess
import threading
import time


def sampled(fn, period=0.2):
    """Runs fn(); returns (fn's result, median SM MHz, median W)."""
    dev = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            out = subprocess.run(["nvidia-smi", "-i", dev, "--query-gpu=clocks.sm,power.draw",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.strip()
            if out:
                c, p = out.splitlines()[0].split(",")
                samples.append((float(c), float(p)))
            time.sleep(period)

    t = threading.Thread(target=sample)
    t.start()
    try:
        result = fn()
    finally:
        stop.set()
        t.join()
    clk = statistics.median(c for c, _ in samples) if samples else float("nan")
    pw = statistics.median(p for _, p in samples) if samples else float("nan")
    return result, clk, pw
