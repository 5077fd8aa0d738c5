"""What every workload of tests/gpu/workloads (and tests/gpu/capture_contexts)
shares: its command line, its timing and the lines it prints. A workload
prints, and the runner (harness.py) parses:

    RATE <float> <unit>            throughput over --secs after --warmup
    CHECKSUM <token> [TOL <rel>]   output of a fixed amount of work on fixed
                                   inputs; equal tokens = same output; with
                                   TOL, floats within that relative error
                                   also count as the same (nondeterministic
                                   reductions, timing-based autotuning)
    VIEW <total MiB> <free MiB>    device memory the framework reports
    NOTE <text>                    anything worth a line in the table

No GPU framework is imported here: each workload imports its own.
"""
import argparse
import os
import time


def parse_args(doc, extra=None):
    """--secs/--warmup (the measured window), --barrier DIR --tenants N
    (tenants started together measure the same window) and --start-mono NS
    (wait until CLOCK_MONOTONIC reaches NS before warming up)."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--secs", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--barrier", default=None)
    p.add_argument("--tenants", type=int, default=1)
    p.add_argument("--start-mono", type=int, default=0)
    if extra:
        extra(p)
    return p.parse_args()


def emit(kind, *fields):
    print(kind, *fields, flush=True)


def checksum(value, tol=None, digits=7):
    """A float rounded to `digits` significant digits, or any token."""
    tok = f"{value:.{digits}g}" if isinstance(value, float) else str(value)
    if tol is None:
        emit("CHECKSUM", tok)
    else:
        emit("CHECKSUM", tok, "TOL", f"{tol:g}")


def view(total_bytes, free_bytes):
    emit("VIEW", total_bytes >> 20, free_bytes >> 20)


def note(text):
    emit("NOTE", text)


def wait_start(start_mono_ns):
    """Sleep until CLOCK_MONOTONIC reaches start_mono_ns (0: no wait)."""
    if start_mono_ns:
        delay = start_mono_ns / 1e9 - time.clock_gettime(time.CLOCK_MONOTONIC)
        if delay > 0:
            time.sleep(delay)
        else:
            note(f"started {-delay:.2f} s after the common start time")


def barrier(directory, n, timeout=60.0):
    """Tenant rendezvous: announce readiness in directory, wait for n."""
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, f"ready.{os.getpid()}"), "w").close()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sum(1 for f in os.listdir(directory) if f.startswith("ready.")) >= n:
            return True
        time.sleep(0.005)
    note(f"barrier: fewer than {n} tenants ready after {timeout:g} s, measuring anyway")
    return False


class Meter:
    """Counts units during `secs` of wall time after `warmup` s. Call
    add(units) after each synchronised batch; it says whether to go on.
    on_measure() runs once between warm-up and measurement (a barrier)."""

    def __init__(self, secs, warmup, on_measure=None):
        self.secs, self.warmup, self.on_measure = secs, warmup, on_measure
        self.t0 = time.monotonic()
        self.t_meas = None
        self.units = 0
        self.elapsed = 0.0

    def add(self, units):
        t = time.monotonic()
        if self.t_meas is None:
            if t - self.t0 >= self.warmup:
                if self.on_measure:
                    self.on_measure()
                self.t_meas = time.monotonic()
            return True
        self.units += units
        self.elapsed = t - self.t_meas
        return self.elapsed < self.secs

    @property
    def rate(self):
        return self.units / self.elapsed if self.elapsed > 0 else 0.0


def measure(step, args, unit):
    """Runs step() (one synchronised batch, returns the units it did) through
    warm-up and the measured window of args; prints and returns the rate."""
    on = (lambda: barrier(args.barrier, args.tenants)) if args.barrier else None
    m = Meter(args.secs, args.warmup, on)
    while m.add(step()):
        pass
    emit("RATE", f"{m.rate:.6g}", unit)
    return m.rate
