"""What bench/limiter/fair.py makes of its measurements: pure functions
over the rates it collected, so tests/bench/fair_report_test.py checks the
arithmetic and the verdicts without a GPU.

Data, per repetition r (every configuration of a repetition ran in the
same pass, so a tenant is compared with plain time-slicing of the same
repetition):
  alone[w][r]      {"rate", "p99_ms", ...} of workload w running alone
  got[c][r][i]     the same for tenant i of the mix in configuration c
A tenant's speed and latency are taken against its workload's alone
figures as the median over the repetitions: a lone decode loop's speed
moves by a quarter between windows of one run, and one lone window beside
each repetition would carry that into every fraction. Targets are judged
on the worst run (docs/limiter.md, "Floors, work conservation and
priority"): a run is `group` consecutive repetitions and its figure the
median of theirs (group 1: a run is a repetition), so a window that a
noisy CPU slowed moves no verdict unless most of its run's are slowed.
"""
import math
import statistics

# Every target as the acceptance words it, in the order the summary lists them.
TARGETS = [
    ("reps", "every repetition ran (within the time budget)"),
    ("aggregate", "default: every mix's aggregate >= 95 % of plain time-slicing's"),
    ("no-loss", "default: no tenant below what plain time-slicing gives it "
                "(saturating mixes: below its floor)"),
    ("prio-speed", "priority: the decode tenant keeps >= 95 % of its alone speed"),
    ("prio-p99", "priority: the decode tenant's p99 call latency <= 1.25 x alone"),
    ("split", "saturating, default: each tenant within 2 points of its limits' split"),
    ("together", "saturating, default: together >= 97 % of the GPU"),
    ("force", "force: each tenant within 2 points of its cap"),
]


def spread(v):
    """(median, min, max) of a non-empty list."""
    return statistics.median(v), min(v), max(v)


def fmt(v, scale=100.0, digits=1):
    """'median (min..max)' of v times scale; 'n/a' when v is empty or holds a NaN."""
    if not v or any(math.isnan(x) for x in v):
        return "n/a"
    m, lo, hi = spread(v)
    return f"{m * scale:.{digits}f} ({lo * scale:.{digits}f}..{hi * scale:.{digits}f})"


def host_line(results):
    """What the host did to a tenant over its windows: the steal over its
    CPUs and, where its workload reports it, how busy its process kept a
    CPU, each 'median (min..max)' in percent."""
    nan = math.nan
    line = "steal % " + fmt([x.get("steal_pct", nan) for x in results], 1)
    cpu = [x.get("cpu_pct", nan) for x in results]
    if cpu and not any(math.isnan(x) for x in cpu):
        line += ", cpu % " + fmt(cpu, 1, 0)
    tog = [x.get("together_pct", nan) for x in results]
    if tog and not any(math.isnan(x) for x in tog):
        line += ", measured with the others % " + fmt(tog, 1, 0)
    return line


TOGETHER_PCT = 90  # a window whose tenants measured apart compares nothing


def apart(got_c, reps, n):
    """' [not measured together: ...]' when some tenant of a window of
    this configuration measured under TOGETHER_PCT % of its interval while
    all the others did (one was held through their window and measured
    after it, alone), else ''."""
    tog = [got_c[r][i].get("together_pct", math.nan) for r in range(reps) for i in range(n)]
    worst = min((x for x in tog if not math.isnan(x)), default=100.0)
    return f" [not measured together: {worst:.0f} %]" if worst < TOGETHER_PCT else ""


def runs(v, group=1):
    """Per run of `group` consecutive repetitions, the median of v over
    them; a last run with fewer repetitions is left out (none is left out
    when there are fewer repetitions than one run)."""
    if group <= 1:
        return list(v)
    n = max(len(v) // group, 1)
    return [statistics.median(v[k * group:(k + 1) * group]) for k in range(n)]


def alone_ref(alone, w, reps, key="rate"):
    """Workload w's alone `key` as the median over the repetitions (NaN
    when a repetition lacks it)."""
    v = [alone[w][r].get(key, math.nan) for r in range(reps)]
    return math.nan if any(math.isnan(x) for x in v) else statistics.median(v)


def fractions(tenants, alone, got_c, reps):
    """Per repetition, each tenant's rate over its alone rate (the median
    over the repetitions)."""
    ref = [alone_ref(alone, w, reps) for w, _ in tenants]
    return [[got_c[r][i]["rate"] / ref[i] for i in range(len(tenants))] for r in range(reps)]


def ratio(tenants, alone, got_c, reps, i, key):
    """Per repetition, tenant i's `key` (a latency) over its alone value
    (the median over the repetitions)."""
    ref = alone_ref(alone, tenants[i][0], reps, key)
    return [got_c[r][i].get(key, math.nan) / ref for r in range(reps)]


def floor_of(tenants, i):
    """Tenant i's floor: its limit's part of the limits' sum."""
    return tenants[i][1] / sum(lim for _, lim in tenants)


AGAIN = "sliced-2"   # time-slicing measured again in its own window (fair.py --again)


def against_sliced(frac, c, tenants, saturating, reps, group):
    """Configuration c against time-slicing, per run of `group`
    repetitions, worst run: (its aggregate over sliced's, and per tenant
    its fraction of alone minus sliced's). Saturating tenants are meant to
    split by their limits, not as time-slicing does: below their sliced
    speed only down to their floor."""
    agg = min(runs([sum(frac[c][r]) / sum(frac["sliced"][r]) for r in range(reps)], group))
    each = []
    for i in range(len(tenants)):
        bar = [min(frac["sliced"][r][i], floor_of(tenants, i)) if saturating
               else frac["sliced"][r][i] for r in range(reps)]
        each.append(min(runs([frac[c][r][i] - bar[r] for r in range(reps)], group)))
    return agg, each


def judge_mix(name, tenants, saturating, configs, alone, got, reps, slack=0.03, judged=True,
              group=1):
    """The table of one mix and its verdicts: (lines, [(target, ok, what)]);
    with judged False only the table (a point of the priority sweep).
    Every figure is per run of `group` repetitions (runs())."""
    lines, verdicts = [], []
    R = lambda v: runs(v, group)  # noqa: E731

    def judge(key, ok, what):
        if judged:
            verdicts.append((key, ok, f"{name}: {what}"))
            lines.append(f"  {'ok  ' if ok else 'MISS'} {what}")

    frac = {c: fractions(tenants, alone, got[c], reps) for c in configs}
    # Fails closed: a figure measured apart from the others says nothing
    # about sharing.
    sep = {c: apart(got[c], reps, len(tenants)) for c in configs}
    head = " ".join(f"{w + '@' + str(lim):>20s}" for w, lim in tenants)
    lines.append(f"  % of alone {head} {'aggregate':>20s} {'vs sliced':>20s}")
    for c in configs:
        cells = [fmt(R([frac[c][r][i] for r in range(reps)])) for i in range(len(tenants))]
        agg = R([sum(frac[c][r]) for r in range(reps)])
        vs = R([sum(frac[c][r]) / sum(frac["sliced"][r]) for r in range(reps)])
        lines.append(f"  {c:10s} " + " ".join(f"{x:>20s}" for x in cells) +
                     f" {fmt(agg):>20s} {fmt(vs):>20s}")
    for i, (w, _) in enumerate(tenants):
        if w != "decode":
            continue
        for c in configs:
            call = R(ratio(tenants, alone, got[c], reps, i, "p99_ms"))
            step = R(ratio(tenants, alone, got[c], reps, i, "step_p99_ms"))
            lines.append(f"  decode {i} p99 vs alone, {c:8s}: call {fmt(call, 1, 2)} x"
                         f"   step {fmt(step, 1, 2)} x")
    # Time-slicing measured twice (--again), with the arithmetic default is
    # judged by: how far apart two measurements of one configuration read
    # on this machine. A default verdict the A/A reading misses as well is
    # marked: it is below the machine's resolution (the verdict stands).
    aa = against_sliced(frac, AGAIN, tenants, saturating, reps, group) \
        if AGAIN in configs else None
    unresolved = " [A/A misses it too]"
    if aa:
        lines.append(f"  A/A, {AGAIN} against sliced as default is judged: aggregate worst "
                     f"{aa[0] * 100:.1f} %; " + ", ".join(
                         f"tenant {i} worst {x * 100:+.1f} points" for i, x in enumerate(aa[1])))
    if "default" in configs:
        agg, each = against_sliced(frac, "default", tenants, saturating, reps, group)
        apart_d = sep["default"] or sep["sliced"]
        judge("aggregate", agg >= 0.95 and not apart_d, f"default aggregate >= 95 % of sliced "
              f"(worst {agg * 100:.1f} %)" + (unresolved if aa and aa[0] < 0.95 else "") + apart_d)
        for i, (w, lim) in enumerate(tenants):
            judge("no-loss", each[i] >= -slack and not apart_d,
                  f"tenant {i} ({w} {lim}%) default not below "
                  f"{'min(sliced, floor)' if saturating else 'sliced'} "
                  f"(worst {each[i] * 100:+.1f} points of its alone speed, "
                  f"slack {slack * 100:.0f})" + (unresolved if aa and aa[1][i] < -slack else "")
                  + apart_d)
    if "priority" in configs:
        for i, (w, _) in enumerate(tenants):
            if w != "decode":
                continue
            keep = min(R([frac["priority"][r][i] for r in range(reps)]))
            p99 = max(R(ratio(tenants, alone, got["priority"], reps, i, "p99_ms")))
            judge("prio-speed", keep >= 0.95,
                  f"priority: decode keeps >= 95 % of alone (worst {keep * 100:.1f} %)")
            judge("prio-p99", p99 <= 1.25, f"priority: decode p99 <= 1.25 x alone "
                  f"(worst {p99:.2f} x)")
    if saturating:
        total = sum(lim for _, lim in tenants)
        for c in [x for x in ("default", "force") if x in configs]:
            for i, (w, lim) in enumerate(tenants):
                want = lim / total if c == "default" else lim / 100
                err = max(abs(x - want) for x in R([frac[c][r][i] for r in range(reps)]))
                judge("split" if c == "default" else "force", err <= 0.02 and not sep[c],
                      f"{c}: tenant {i} within 2 points of {want * 100:.1f} % "
                      f"(worst error {err * 100:.1f})" + sep[c])
        if "default" in configs:
            together = min(R([sum(frac["default"][r]) for r in range(reps)]))
            judge("together", together >= 0.97 and not sep["default"],
                  f"default: together >= 97 % of the GPU (worst {together * 100:.1f} %)"
                  + sep["default"])
    return lines, verdicts


def sweep_lines(points, reps, group=1):
    """The priority bound: per hog, its kernel length and what the decode
    tenant keeps beside it, time-sliced and at a higher priority, per run
    of `group` repetitions. `points` is a list of (hog, tenants, alone,
    got) with tenants = [decode, hog]."""
    R = lambda v: runs(v, group)  # noqa: E731
    lines = [f"  {'hog':10s} {'kernel ms':>16s} {'decode % sliced':>20s} "
             f"{'decode % priority':>20s} {'p99 x sliced':>18s} {'p99 x priority':>18s} "
             f"{'step p99 x prio':>18s} {'hog % priority':>20s}"]
    for hog, tenants, alone, got in points:
        kernel = [alone[hog][r].get("kernel_ms", math.nan) for r in range(reps)]
        fs = fractions(tenants, alone, got["sliced"], reps)
        fp = fractions(tenants, alone, got["priority"], reps)
        lines.append(
            f"  {hog:10s} {fmt(kernel, 1, 3):>16s} {fmt(R([f[0] for f in fs])):>20s} "
            f"{fmt(R([f[0] for f in fp])):>20s} "
            f"{fmt(R(ratio(tenants, alone, got['sliced'], reps, 0, 'p99_ms')), 1, 2):>18s} "
            f"{fmt(R(ratio(tenants, alone, got['priority'], reps, 0, 'p99_ms')), 1, 2):>18s} "
            f"{fmt(R(ratio(tenants, alone, got['priority'], reps, 0, 'step_p99_ms')), 1, 2):>18s} "
            f"{fmt(R([f[1] for f in fp])):>20s}")
    return lines


def summary_lines(verdicts):
    """Per target, in TARGETS order: PASS or MISS over every mix it was
    judged on, then each missed verdict. Targets judged nowhere say so."""
    lines = []
    for key, wording in TARGETS:
        mine = [(ok, what) for k, ok, what in verdicts if k == key]
        if not mine:
            lines.append(f"n/a  {wording} (not measured in this run)")
            continue
        bad = [what for ok, what in mine if not ok]
        lines.append(f"{'MISS' if bad else 'PASS'} {wording} "
                     f"({len(mine) - len(bad)} of {len(mine)} met)")
        lines += [f"       {what}" for what in bad]
    return lines
