#!/usr/bin/env python3
"""Merges edge_trace.cu traces of the tenants of one mix into one GPU
timeline and says where the GPU stood idle.

    edge_gaps.py [--label NAME] [--timeline CSV] TRACE...

Every TRACE is one tenant's (or, alone, the native baseline's). Over the
time all of them were measuring, it prints one SUMMARY line and details:
- idle: GPU time no replay ran, in % of the span;
- switches: gaps where the next replay is another tenant's (a window
  edge), with their length and how late that tenant's launch came after
  the previous tenant's last replay ended ("late"; negative: its work was
  already queued, so the gap is the GPU's own switch);
- same-tenant gaps (a tenant's synchronisation or its own launch
  latency), by size;
- per tenant, how long its replays took on the GPU and how long they
  waited in the queue after their launch;
- overlaps: a replay that ran across another tenant's (the GPU
  time-sliced them mid-replay).
Launch times are host CLOCK_REALTIME, stamps the GPU's %globaltimer; the
two are aligned on the quickest launch of all (zero latency), so "late"
is relative to that.
"""
import argparse
import os
import statistics


def load(path):
    """(launch_ns, start_ns, end_ns) of the measured replays."""
    rows, first = [], 0
    with open(path) as f:
        for line in f:
            if line.startswith("# measured"):
                first = int(line.split()[2])
                continue
            i, launch, start, end = (int(v) for v in line.split())
            if i >= first and start and end >= start:
                rows.append((launch, start, end))
    return rows


def pct(xs, q):
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else 0


def us(ns):
    return ns / 1000.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="")
    p.add_argument("--timeline", help="write the first 150 ms of the merged timeline here "
                   "(CSV: tenant,start_us,end_us,launch_us from the span's start)")
    p.add_argument("traces", nargs="+")
    a = p.parse_args()
    tenants = {os.path.basename(t).rsplit(".", 1)[0]: load(t) for t in a.traces}
    tenants = {k: v for k, v in tenants.items() if v}
    if not tenants:
        print(f"SUMMARY {a.label}: no measured replays in {' '.join(a.traces)}")
        return 1
    lo = max(r[0][1] for r in tenants.values())
    hi = min(r[-1][2] for r in tenants.values())
    if hi <= lo:
        print(f"SUMMARY {a.label}: the traces do not overlap in time")
        return 1
    offset = min(s - l for r in tenants.values() for l, s, _ in r)
    iv = sorted((s, e, name, l + offset) for name, r in tenants.items() for l, s, e in r
                if s >= lo and e <= hi)
    span = hi - lo
    if a.timeline:
        with open(a.timeline, "w") as f:
            f.write("tenant,start_us,end_us,launch_us\n")
            for s, e, name, launch in iv:
                if s - lo > 150e6:
                    break
                f.write(f"{name},{us(s - lo):.2f},{us(e - lo):.2f},{us(launch - lo):.2f}\n")
    busy_end, owner = lo, None
    idle = 0
    switch, late, same = [], [], {}
    overlap_n, overlap_ns = 0, 0
    for s, e, name, launch in iv:
        if s >= busy_end:
            gap = s - busy_end
            idle += gap
            if owner is not None and name != owner:
                switch.append(gap)
                late.append(launch - busy_end)
            elif owner is not None and gap:
                same.setdefault(name, []).append(gap)
        elif owner is not None and name != owner:
            overlap_n += 1
            overlap_ns += min(e, busy_end) - s
        if e > busy_end:
            busy_end, owner = e, name
    secs = span / 1e9
    qlate = [g for g, l in zip(switch, late) if l <= 0]
    llate = [(g, l) for g, l in zip(switch, late) if l > 0]
    print(f"SUMMARY {a.label}: idle {100 * idle / span:.2f} % of {secs:.2f} s; "
          f"{len(switch) / secs:.1f} switches/s, mean gap {us(statistics.mean(switch or [0])):.0f} us "
          f"(p50 {us(pct(switch, .5)):.0f}, p90 {us(pct(switch, .9)):.0f}) = "
          f"{100 * sum(switch) / span:.2f} % of the span")
    print(f"  switches with the next work already queued: {len(qlate)}, mean gap "
          f"{us(statistics.mean(qlate or [0])):.0f} us (p90 {us(pct(qlate, .9)):.0f})")
    print(f"  switches where the next tenant launched after the GPU went idle: {len(llate)}, "
          f"mean gap {us(statistics.mean([g for g, _ in llate] or [0])):.0f} us, mean lateness "
          f"{us(statistics.mean([l for _, l in llate] or [0])):.0f} us (p90 "
          f"{us(pct([l for _, l in llate], .9)):.0f})")
    for name in sorted(tenants):
        g = same.get(name, [])
        small = sum(x for x in g if x < 50000)
        big = [x for x in g if x >= 50000]
        mine = [x for x in iv if x[2] == name]
        dur = [e - s for s, e, _, _ in mine]
        queued = [s - launch for s, _, _, launch in mine]
        print(f"  {name}: {len(mine)} replays, same-tenant gaps "
              f"{100 * sum(g) / span:.2f} % ({len(g)}: <50 us {100 * small / span:.2f} %, "
              f">=50 us {len(big)} of mean {us(statistics.mean(big or [0])):.0f} us)")
        print(f"    on the GPU: mean {us(statistics.mean(dur or [0])):.2f} us a replay (p50 "
              f"{us(pct(dur, .5)):.2f}, p90 {us(pct(dur, .9)):.2f}); launch to start p50 "
              f"{us(pct(queued, .5)):.0f} us, p90 {us(pct(queued, .9)):.0f} us")
    print(f"  overlaps (a replay run across another tenant's): {overlap_n}, "
          f"{100 * overlap_ns / span:.2f} % of the span")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
