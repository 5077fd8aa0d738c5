#!/usr/bin/env python3
"""Fair-share benchmark of the compute limiter (docs/limiter.md, "What a
share means"): is a share a floor, not a ceiling?

For each mix of tenants it runs, side by side in one run and alternating
the configurations (each repetition rotates their order):
  alone     each tenant by itself, natively (its alone speed)
  sliced    all tenants together without cushare (plain time-slicing)
  default   all under `cushare run --sm L` (policy default)
  priority  decode mixes only: the decode tenant at CUDA_TASK_PRIORITY 0,
            the others at 1 (policy default)
  force     all under `cushare run --sm L --policy force` (hard caps)
and reports, as medians over --reps repetitions with their spread
(min..max): every tenant's speed as a fraction of its alone speed, the
mix's aggregate (the sum of those fractions) against plain time-slicing's
measured in the same repetition, and the decode tenant's per-call p99
latency against alone.

Targets (worst repetition; the H200's, docs/limiter.md):
  default   aggregate >= 95 % of sliced; no tenant below its sliced
            fraction or its floor (its limit's part of the limits' sum),
            whichever is less (less --slack, default 0.03 of its alone
            speed)
  priority  the decode tenant >= 95 % of alone, p99 <= 1.25 x alone
  saturating mixes (default and force): each tenant within 2 points of
            its limit's share of the limits' sum (force: of its limit),
            together >= 97 % of the GPU (default)

A workload is a command that takes --secs S --warmup W --start-mono NS and
prints "RESULT ... rate=R ..." (p99_ms=Q too for a decode workload).

    fair.py --cushare PATH --workload NAME=CMD ... [--mix NAME] ...
            [--secs S] [--warmup W] [--reps R] [--out DIR] [--slack F]

Exit status: 0 every target met, 1 a target missed, 2 usage error.
"""
import argparse
import os
import shlex
import statistics
import shutil
import subprocess
import tempfile
import sys
import time

# name: (tenants as (workload, limit), saturating, has decode)
MIXES = {
    "decode+decode": ([("decode", 25), ("decode", 75)], False),
    "decode+hog": ([("decode", 25), ("hog", 75)], False),
    "graph x4": ([("graph", 25)] * 4, False),
    "matmul 25+75": ([("matmul", 25), ("matmul", 75)], True),
    "matmul 20/30/50": ([("matmul", 20), ("matmul", 30), ("matmul", 50)], True),
    "elementwise 25+75": ([("elementwise", 25), ("elementwise", 75)], True),
}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cushare", required=True)
    p.add_argument("--workload", action="append", default=[], metavar="NAME=CMD")
    p.add_argument("--mix", action="append", default=[], choices=list(MIXES))
    p.add_argument("--secs", type=float, default=4)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--start-delay", type=float, default=0.3,
                   help="seconds between the last tenant set up and the common start")
    p.add_argument("--setup-timeout", type=float, default=120)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--slack", type=float, default=0.03)
    p.add_argument("--budget", type=float, default=0,
                   help="seconds: start no repetition that would end after this (0: none)")
    p.add_argument("--out", default=".")
    a = p.parse_args()
    a.cmds = {}
    for w in a.workload:
        name, sep, cmd = w.partition("=")
        if not sep or not cmd:
            p.error(f"--workload {w!r}: expected NAME=COMMAND")
        a.cmds[name] = cmd
    a.mix = a.mix or [m for m in MIXES if all(w in a.cmds for w, _ in MIXES[m][0])]
    for m in a.mix:
        for w, _ in MIXES[m][0]:
            if w not in a.cmds:
                p.error(f"mix {m!r} needs --workload {w}=COMMAND")
    if a.reps < 1 or a.secs <= 0:
        p.error("--reps must be >= 1 and --secs > 0")
    return a


def result(text):
    for line in text.splitlines():
        if line.startswith("RESULT "):
            kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            return float(kv["rate"]), float(kv.get("p99_ms", "nan"))
    return None


def run_together(a, tenants, config, log):
    """Starts the tenants together in `config` (each says when it is set
    up, timing.py; then all start at once); returns [(rate, p99)]."""
    ready = tempfile.mkdtemp(prefix="fair-ready-")
    procs = []
    for i, (w, limit) in enumerate(tenants):
        cmd = shlex.split(a.cmds[w]) + ["--secs", str(a.secs), "--warmup", str(a.warmup)]
        env = dict(os.environ, BENCH_READY_DIR=ready)
        if config != "sliced" and config != "alone":
            pre = [a.cushare, "run", "--sm", str(limit)]
            if config == "force":
                pre += ["--policy", "force"]
            else:
                pre += ["--policy", "default"]
            if config == "priority":
                pre += ["--priority", "0" if w == "decode" else "1"]
            cmd = pre + ["--"] + cmd
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    deadline = time.monotonic() + a.setup_timeout
    while len([f for f in os.listdir(ready) if f.endswith(".ready")]) < len(procs):
        if time.monotonic() > deadline or any(pr.poll() is not None for pr in procs):
            break
        time.sleep(0.02)
    with open(os.path.join(ready, "start.tmp"), "w") as f:
        f.write(str(time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(a.start_delay * 1e9)))
    os.rename(os.path.join(ready, "start.tmp"), os.path.join(ready, "start"))
    out = []
    for (w, limit), pr in zip(tenants, procs):
        text, _ = pr.communicate()
        r = result(text)
        log.write(f"--- {config} {w}@{limit}: exit {pr.returncode}\n{text}\n")
        if pr.returncode or r is None:
            raise SystemExit(f"fair.py: {w} ({config}) failed; see the log")
        out.append(r)
    shutil.rmtree(ready, ignore_errors=True)
    return out


FORCE = os.environ.get("FAIR_FORCE", "1") != "0"


def configs_of(tenants, saturating):
    c = ["sliced", "default"]
    if any(w == "decode" for w, _ in tenants) and not all(w == "decode" for w, _ in tenants):
        c.append("priority")
    if saturating and FORCE:
        c.append("force")
    return c


def med(v):
    return statistics.median(v), min(v), max(v)


def fmt(v, pct=True):
    m, lo, hi = med(v)
    k = 100 if pct else 1
    return f"{m * k:6.1f} ({lo * k:.1f}..{hi * k:.1f})"


def main():
    a = parse()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "fair-bench.log"), "w")
    report = open(os.path.join(a.out, "fair-bench.txt"), "w")
    csv = open(os.path.join(a.out, "fair-bench.csv"), "w")
    csv.write("mix,rep,config,tenant,workload,limit,rate,p99_ms,alone_rate,alone_p99_ms\n")
    missed = []

    def say(s=""):
        print(s, flush=True)
        report.write(s + "\n")

    say(f"fair-share benchmark: {a.reps} repetitions, {a.secs} s measured, configurations "
        "alternated; medians (min..max)")
    # Every repetition runs each workload alone and each mix in each of
    # its configurations, in an order rotated from one repetition to the
    # next, so slow drift (clocks, a busy CPU) spreads over all of them.
    kinds = sorted({w for m in a.mix for w, _ in MIXES[m][0]})
    alone = {w: [] for w in kinds}                  # per rep: (rate, p99)
    got_all = {m: {c: [] for c in configs_of(*MIXES[m])} for m in a.mix}
    jobs = [("alone", w) for w in kinds] + \
        [(m, c) for m in a.mix for c in configs_of(*MIXES[m])]
    t_start, done = time.monotonic(), 0
    for rep in range(a.reps):
        spent = time.monotonic() - t_start
        if a.budget and done and spent / done * (done + 1) > a.budget:
            print(f"fair.py: budget of {a.budget:.0f} s: stopping after {done} repetitions",
                  file=sys.stderr)
            break
        done += 1
        k = (rep * len(jobs)) // a.reps
        for m, c in jobs[k:] + jobs[:k]:
            print(f"rep {rep + 1}/{a.reps}: {m} {c}", file=sys.stderr, flush=True)
            if m == "alone":
                alone[c].append(run_together(a, [(c, 100)], "alone", log)[0])
            else:
                got_all[m][c].append(run_together(a, MIXES[m][0], c, log))
    if done < a.reps:
        missed.append(f"only {done} of {a.reps} repetitions within the budget")
    a.reps = done
    for m in a.mix:
        tenants, saturating = MIXES[m]
        configs = configs_of(tenants, saturating)
        kinds = sorted({w for w, _ in tenants})
        got = got_all[m]
        say(f"\n== {m}: " + ", ".join(f"{w} {l}%" for w, l in tenants))
        for w in kinds:
            r = [x[0] for x in alone[w]]
            p = [x[1] for x in alone[w]]
            say(f"  {w} alone: rate {fmt(r, False)}  p99 {fmt(p, False)} ms")
        frac = {}   # config -> rep -> tenant -> fraction of its alone speed
        for c in configs:
            frac[c] = [[got[c][rep][i][0] / alone[w][rep][0] for i, (w, _) in enumerate(tenants)]
                       for rep in range(a.reps)]
            for rep in range(a.reps):
                for i, (w, l) in enumerate(tenants):
                    csv.write(f"{m},{rep},{c},{i},{w},{l},{got[c][rep][i][0]:.3f},"
                              f"{got[c][rep][i][1]:.3f},{alone[w][rep][0]:.3f},"
                              f"{alone[w][rep][1]:.3f}\n")
        say(f"  {'config':9s} " + " ".join(f"{w + '@' + str(l):>22s}" for w, l in tenants) +
            f" {'aggregate':>22s} {'vs sliced':>22s}")
        for c in configs:
            cells = [fmt([frac[c][r][i] for r in range(a.reps)]) for i in range(len(tenants))]
            agg = [sum(frac[c][r]) for r in range(a.reps)]
            vs = [sum(frac[c][r]) / sum(frac["sliced"][r]) for r in range(a.reps)]
            say(f"  {c:9s} " + " ".join(f"{x:>22s}" for x in cells) +
                f" {fmt(agg):>22s} {fmt(vs):>22s}")
        for c in configs:
            for i, (w, _) in enumerate(tenants):
                if w == "decode":
                    ratio = [got[c][r][i][1] / alone[w][r][1] for r in range(a.reps)]
                    say(f"  decode p99 vs alone ({c}, tenant {i}): {fmt(ratio, False)} x")

        def judge(ok, what):
            if not ok:
                missed.append(f"{m}: {what}")
            say(f"  {'ok  ' if ok else 'MISS'} {what}")

        worst_vs = min(sum(frac["default"][r]) / sum(frac["sliced"][r]) for r in range(a.reps))
        judge(worst_vs >= 0.95, f"default aggregate >= 95 % of sliced (worst {worst_vs:.3f})")
        # Below its time-sliced speed only where that was above its floor
        # (its limit's part of the limits' sum): saturating tenants are
        # meant to split by their limits, not as time-slicing does.
        total = sum(l for _, l in tenants)
        for i, (w, l) in enumerate(tenants):
            worst = min(frac["default"][r][i] - min(frac["sliced"][r][i], l / total)
                        for r in range(a.reps))
            judge(worst >= -a.slack, f"tenant {i} ({w} {l}%) default not below min(sliced, "
                  f"floor) (worst {worst * 100:+.1f} points of its alone speed)")
        if "priority" in configs:
            for i, (w, _) in enumerate(tenants):
                if w != "decode":
                    continue
                keep = min(frac["priority"][r][i] for r in range(a.reps))
                p99 = max(got["priority"][r][i][1] / alone[w][r][1] for r in range(a.reps))
                judge(keep >= 0.95, f"priority: decode keeps >= 95 % of alone (worst {keep:.3f})")
                judge(p99 <= 1.25, f"priority: decode p99 <= 1.25 x alone (worst {p99:.2f})")
        if saturating:
            total = sum(l for _, l in tenants)
            for c in [x for x in ("default", "force") if x in configs]:
                for i, (w, l) in enumerate(tenants):
                    want = l / total if c == "default" else l / 100
                    err = max(abs(frac[c][r][i] - want) for r in range(a.reps))
                    judge(err <= 0.02, f"{c}: tenant {i} within 2 points of {want * 100:.1f} % "
                          f"(worst error {err * 100:.1f})")
            sum_def = min(sum(frac["default"][r]) for r in range(a.reps))
            judge(sum_def >= 0.97, f"default: together >= 97 % of the GPU (worst "
                  f"{sum_def * 100:.1f} %)")
    say("")
    if missed:
        say(f"FAIL: {len(missed)} target{'s' if len(missed) != 1 else ''} missed")
        for x in missed:
            say(f"  {x}")
        return 1
    say("PASS: every target met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
