"""The timing every Python workload of `cushare bench limiter` shares.

A workload waits for the bench's common start (--start-mono, so the
tenants of a mix begin together), runs its step in batches with a
synchronisation after each, discards --warmup seconds and counts steps
over the next --secs: rate = steps / seconds measured.
"""
import os
import sys
import time


def add_timing_args(p):
    """--secs, --warmup and --start-mono, as the bench passes them."""
    p.add_argument("--secs", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--start-mono", type=int, default=0)


def wait_for_start(start_mono_ns):
    """Sleeps until CLOCK_MONOTONIC reaches start_mono_ns (0: no wait).
    With BENCH_READY_DIR in the environment (bench/limiter/fair.py) it
    first says it is ready there (a file <pid>.ready) and waits for the
    file `start`, which holds the start time instead: tenants whose set-up
    takes long start together without a guessed delay."""
    ready = os.environ.get("BENCH_READY_DIR")
    if ready:
        open(os.path.join(ready, f"{os.getpid()}.ready"), "w").close()
        start = os.path.join(ready, "start")
        while not os.path.exists(start):
            time.sleep(0.01)
        with open(start) as f:
            start_mono_ns = int(f.read().strip() or 0)
    if start_mono_ns:
        delay = start_mono_ns / 1e9 - time.clock_gettime(time.CLOCK_MONOTONIC)
        if delay > 0:
            time.sleep(delay)


def measure(step, batch, sync, warmup, secs):
    """Runs batches of `batch` steps, `sync()` after each, until `secs`
    have been measured after `warmup`; returns (steps counted, seconds).
    With BENCH_SLICE_MS=N in the environment it also prints to stderr, for
    diagnosis, the rate in each N ms of the measured time and when (in
    CLOCK_MONOTONIC seconds) the measurement began and ended."""
    slice_s = float(os.environ.get("BENCH_SLICE_MS", "0")) / 1000
    t0 = time.monotonic()
    measuring, t_meas, counted = False, 0.0, 0
    rates, slice_start, slice_count = [], 0.0, 0
    while True:
        for _ in range(batch):
            step()
        sync()
        t = time.monotonic()
        if not measuring and t - t0 >= warmup:
            measuring, t_meas, slice_start = True, t, t
            continue
        if measuring:
            counted += batch
            slice_count += batch
            if slice_s and t - slice_start >= slice_s:
                rates.append(slice_count / (t - slice_start))
                slice_start, slice_count = t, 0
            if t - t_meas >= secs:
                if slice_s:
                    print(f"SLICES pid={os.getpid()} from={t_meas:.3f} to={t:.3f} "
                          f"rates={','.join(f'{r:.0f}' for r in rates)}", file=sys.stderr)
                return counted, t - t_meas


def limiter_note():
    """' lim_sleeps=N lim_sleep_ms=T lim_paced=P lim_markers=M' when the
    process runs under libcushare (cushare_limiter_stats is exported),
    else '': whether pacing held this tenant, for the RESULT line."""
    import ctypes
    try:
        fn = ctypes.CDLL(None).cushare_limiter_stats
    except (OSError, AttributeError):
        return ""
    buf = (ctypes.c_uint64 * 1024)()  # larger than any version of the struct
    fn(buf)
    # version and armed share the first word; then paced, measured,
    # markers, sleeps, sleep_ns (src/limiter/limiter.h).
    return (f" lim_sleeps={buf[4]} lim_sleep_ms={buf[5] / 1e6:.1f}"
            f" lim_paced={buf[1]} lim_markers={buf[3]}")
