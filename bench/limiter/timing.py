"""The timing every Python workload of `cushare bench limiter` shares.

A workload waits for the bench's common start (--start-mono, so the
tenants of a mix begin together), runs its step in batches with a
synchronisation after each, discards --warmup seconds and counts steps
over the next --secs: rate = steps / seconds measured. With --serve it
does that once per window fair.py asks for, set up once (serve).
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
    """Sleeps until CLOCK_MONOTONIC reaches start_mono_ns (0: no wait), so
    the tenants of a mix begin together."""
    if start_mono_ns:
        delay = start_mono_ns / 1e9 - time.clock_gettime(time.CLOCK_MONOTONIC)
        if delay > 0:
            time.sleep(delay)


def add_serve_arg(p):
    """--serve, as bench/limiter/fair.py passes it (serve below)."""
    p.add_argument("--serve", action="store_true",
                   help="stay up and measure one window per 'go' line on stdin")


def serve(window):
    """A warm tenant (bench/limiter/fair.py): set up once, it measures many
    windows, so a model that takes seconds to load is loaded once per run,
    not once per measurement. Prints READY, then for each line
    "go START_NS WARMUP SECS [gpu]" on stdin sleeps until CLOCK_MONOTONIC
    reaches START_NS, calls window(warmup, secs, gpu) and prints
    "RESULT " and the fields it returns. "quit" or the end of stdin ends
    it; a line it cannot read gets "ERROR ..." and is otherwise ignored.
    With `gpu` the window also reports the GPU time of one step, measured
    after the window (fair.py asks for it only when the tenant runs alone)."""
    print("READY", flush=True)
    for line in sys.stdin:
        f = line.split()
        if f[:1] == ["quit"]:
            return
        try:
            if f[0] != "go" or len(f) < 4:
                raise ValueError(line.strip())
            start, warmup, secs = int(f[1]), float(f[2]), float(f[3])
        except (IndexError, ValueError):
            print(f"ERROR expected 'go START_NS WARMUP SECS [gpu]', got {line.strip()!r}",
                  flush=True)
            continue
        wait_for_start(start)
        print("RESULT " + window(warmup, secs, "gpu" in f[4:]), flush=True)


def gpu_ms_per_step(step, sync, n, tries=5):
    """GPU milliseconds per step queued back to back: the least of `tries`
    batches of n timed by CUDA events (a batch the limiter paused or the
    GPU switched away from only takes longer)."""
    import torch
    best = float("inf")
    for _ in range(tries):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(n):
            step()
        end.record()
        end.synchronize()
        best = min(best, begin.elapsed_time(end) / n)
    sync()
    return best


_span = [0.0, 0.0]   # the interval the latest measure() counted


def span():
    """' from=S to=E': the CLOCK_MONOTONIC seconds the latest measure()
    counted over, for the RESULT line (fair.py checks that the tenants of
    a window were measured at the same time)."""
    return f" from={_span[0]:.6f} to={_span[1]:.6f}"


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
                _span[:] = [t_meas, t]
                return counted, t - t_meas


def in_window(stamps, lo, hi):
    """The times of `stamps` that fall in [lo, hi): a workload whose unit
    of work (a decode call) is long beside the window counts its steps by
    when each ended, so that its window is [lo, hi) exactly, as the other
    tenants' are, rather than whole calls past either edge."""
    return [t for t in stamps if lo <= t < hi]


_noted = [0, 0, 0, 0]   # the counters limiter_note last reported


def limiter_note():
    """' lim_sleeps=N lim_sleep_ms=T lim_paced=P lim_markers=M' when the
    process runs under libcushare (cushare_limiter_stats is exported),
    else '': whether pacing held this tenant, for the RESULT line. Each
    call reports what happened since the previous one (a served tenant's
    window, serve above)."""
    import ctypes
    try:
        fn = ctypes.CDLL(None).cushare_limiter_stats
    except (OSError, AttributeError):
        return ""
    buf = (ctypes.c_uint64 * 1024)()  # larger than any version of the struct
    fn(buf)
    # version and armed share the first word; then paced, measured,
    # markers, sleeps, sleep_ns (src/limiter/limiter.h).
    now = [buf[4], buf[5], buf[1], buf[3]]
    d = [n - p for n, p in zip(now, _noted)]
    _noted[:] = now
    return (f" lim_sleeps={d[0]} lim_sleep_ms={d[1] / 1e6:.1f}"
            f" lim_paced={d[2]} lim_markers={d[3]}")
