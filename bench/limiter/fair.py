#!/usr/bin/env python3
"""Fair-share benchmark of the compute limiter (docs/limiter.md, "What a
share means"): is a share a floor, not a ceiling?

For each mix of tenants it measures, side by side in one run and
alternating the configurations (each repetition rotates their order):
  alone     each workload by itself, natively (its alone speed)
  sliced    all tenants together without cushare (plain time-slicing)
  default   all under `cushare run --sm L` (policy default)
  priority  decode mixes only: the decode tenant at CUDA_TASK_PRIORITY 0,
            the others at 1 (policy default)
  force     saturating mixes: all under `cushare run --sm L --policy force`
  sliced-2  with --again: time-slicing once more, in a window of its own
            (not judged: the A/A measurement, how far two measurements of
            one configuration read apart on this machine)
  default-I --split MIX (non-saturating mixes): tenant I alone under
            `cushare run --sm L`, the others native (not judged: it tells
            whose cushare costs a tenant what default costs it)
and reports, as medians over --reps repetitions with their spread
(min..max): every tenant's speed as a fraction of its alone speed, the
mix's aggregate (the sum of those fractions) against plain time-slicing's
measured in the same repetition, and the decode tenant's p99 call (and
step) latency against alone. Verdicts are on the worst run: --group G
takes G consecutive repetitions as one run, whose figures are the medians
of theirs (G 1, the default: a run is one repetition; a lone decode
loop's speed moves by a quarter between windows, so one slow window
decides a verdict of G 1). fair_report.py holds the arithmetic and the
targets.

--sweep HOG (repeatable) adds the priority bound: the decode tenant at a
higher priority beside hog workload HOG, time-sliced and prioritised, with
HOG's kernel length measured alone: a hog kernel already on the GPU is
not preempted, so the decode's wait is bounded below by it. The mix
decode+hog stands for the sweep point `hog` when both run.

Every tenant is a warm process (--serve, timing.py): all of them are set
up at once, then each measures one window per configuration and
repetition it takes part in, so a model is loaded once per run. Between
windows the GPU rests --settle seconds, so the board and NVML forget the
tenants of the previous window before the next one starts. --fresh starts each window's tenants for it
instead (slow: to check that the idle tenants change nothing).

Every window also notes how much of its tenants' CPUs the hypervisor
took (steal, from /proc/stat over the tenant's CPUs) and, where the
workload reports it (cpu_pct), how busy its process kept a CPU: a launch-
bound loop's speed follows its CPU, so a slow window with much steal is
the host's, not the limiter's (fair-bench.csv; a host line per configuration).

A workload is a command that takes --secs S --warmup W --serve and then
answers timing.serve's requests with "RESULT ... rate=R ..." (p99_ms=Q
and step_p99_ms too for a decode workload, kernel_ms when asked).

    fair.py --cushare PATH --workload NAME=CMD ... [--mix NAME] ...
            [--sweep HOG] ... [--secs S] [--warmup W] [--settle S] [--reps R]
            [--group G] [--budget S] [--out DIR] [--slack F] [--split MIX] ...
            [--again]

Exit status: 0 every target met, 1 a target missed, 2 usage error, 3 a
tenant failed (named on stderr; its output is in fair-bench.log).
"""
import argparse
import os
import queue
import shlex
import subprocess
import sys
import threading
import time

import fair_report

# name: (tenants as (workload, limit), saturating)
MIXES = {
    "decode+decode": ([("decode", 25), ("decode", 75)], False),
    "decode+hog": ([("decode", 25), ("hog", 75)], False),
    "graph x4": ([("graph", 25)] * 4, False),
    "matmul 25+75": ([("matmul", 25), ("matmul", 75)], True),
    "matmul 20/30/50": ([("matmul", 20), ("matmul", 30), ("matmul", 50)], True),
    "elementwise 25+75": ([("elementwise", 25), ("elementwise", 75)], True),
}
FORCE = os.environ.get("FAIR_FORCE", "1") != "0"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cushare", required=True)
    p.add_argument("--workload", action="append", default=[], metavar="NAME=CMD")
    p.add_argument("--mix", action="append", default=[], choices=list(MIXES))
    p.add_argument("--sweep", action="append", default=[], metavar="HOG",
                   help="a hog workload beside which the prioritised decode is measured")
    p.add_argument("--secs", type=float, default=3)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--settle", type=float, default=1.0,
                   help="seconds the GPU rests between windows")
    p.add_argument("--start-delay", type=float, default=0.2,
                   help="seconds between asking the tenants of a window and their common start")
    p.add_argument("--setup-timeout", type=float, default=300)
    p.add_argument("--fresh", action="store_true",
                   help="start the tenants of each window for it (no idle tenants beside it; "
                        "each window pays the set-up)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--group", type=int, default=1,
                   help="repetitions per run: verdicts on the worst run's medians (--reps must "
                        "be a multiple)")
    p.add_argument("--slack", type=float, default=0.03)
    p.add_argument("--budget", type=float, default=0,
                   help="seconds from the start: begin no repetition that would end later (0: none)")
    p.add_argument("--pin", action="store_true",
                   help="give each tenant of a mix physical cores of its own (tenant i of every "
                        "configuration the same ones; a workload alone those of tenant 0)")
    p.add_argument("--split", action="append", default=[], metavar="MIX",
                   help="a non-saturating mix that also runs each tenant alone under cushare "
                        "beside native others (configurations default-0, default-1, ...; not "
                        "judged)")
    p.add_argument("--again", action="store_true",
                   help="every mix also measures time-slicing a second time, in a window of its "
                        "own (configuration sliced-2; not judged)")
    p.add_argument("--out", default=".")
    a = p.parse_args(argv)
    a.cmds = {}
    for w in a.workload:
        name, sep, cmd = w.partition("=")
        if not sep or not cmd:
            p.error(f"--workload {w!r}: expected NAME=COMMAND")
        a.cmds[name] = cmd
    if not a.mix and not a.sweep:
        a.mix = [m for m in MIXES if all(w in a.cmds for w, _ in MIXES[m][0])]
    for m in a.mix:
        for w, _ in MIXES[m][0]:
            if w not in a.cmds:
                p.error(f"mix {m!r} needs --workload {w}=COMMAND")
    for h in a.sweep:
        for w in ("decode", h):
            if w not in a.cmds:
                p.error(f"--sweep {h}: needs --workload {w}=COMMAND")
    for m in a.split:
        if m not in a.mix or MIXES[m][1]:
            p.error(f"--split {m!r}: must name a non-saturating mix given with --mix")
    if a.reps < 1 or a.secs <= 0 or a.warmup < 0 or a.settle < 0:
        p.error("--reps must be >= 1, --secs > 0, --warmup and --settle >= 0")
    if a.group < 1 or a.reps % a.group:
        p.error(f"--group {a.group}: must be >= 1 and divide --reps {a.reps} "
                f"(a run is --group repetitions)")
    return a


def mixes_of(a):
    """{mix name: (tenants, saturating, configs)}, sweep points included."""
    out = {}
    for m in a.mix:
        tenants, saturating = MIXES[m]
        configs = ["sliced", "default"] + ([fair_report.AGAIN] if a.again else [])
        ws = {w for w, _ in tenants}
        if "decode" in ws and len(ws) > 1:
            configs.append("priority")
        if saturating and FORCE:
            configs.append("force")
        if m in a.split:
            configs += [f"default-{i}" for i in range(len(tenants))]
        out[m] = (tenants, saturating, configs)
    for h in a.sweep:
        if sweep_mix(a, h) not in out:
            out[sweep_mix(a, h)] = ([("decode", 25), (h, 75)], False, ["sliced", "priority"])
    return out


def tenant_config(config, i):
    """How tenant i runs in a configuration: default-I runs tenant I under
    cushare (policy default) and every other one natively."""
    if config == fair_report.AGAIN:
        return "sliced"
    if config.startswith("default-"):
        return "default" if config == f"default-{i}" else "sliced"
    return config


def sweep_mix(a, hog):
    return "decode+hog" if hog == "hog" and "decode+hog" in a.mix else f"priority sweep {hog}"


def physical_cores():
    """The CPUs we may run on, grouped by physical core (a core's hyper-
    threads together), in CPU order."""
    cores = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                sib = f.read().strip()
        except OSError:
            sib = str(cpu)
        cores.setdefault(sib, set()).add(cpu)
    return sorted(cores.values(), key=min)


def core_slots(n, cores):
    """n disjoint CPU sets of whole cores from `cores` (physical_cores),
    leaving the first core to the harness, as many cores a set as there
    are for all n; [] when there are fewer than n + 1 cores."""
    cores = cores[1:]
    per = len(cores) // n if n > 0 else 0
    if per < 1:
        return []
    return [set().union(*cores[i * per:(i + 1) * per]) for i in range(n)]


class TenantFailed(Exception):
    """A tenant died, said ERROR or did not answer in time: no verdict."""


class Tenant:
    """One warm workload process: its output is read by a thread (so a
    chatty library never fills the pipe), logged, and its READY / RESULT /
    ERROR lines queued for the caller."""

    def __init__(self, a, label, workload, limit, config, log, log_lock, cpus=None):
        cmd = shlex.split(a.cmds[workload]) + ["--serve"]
        # Who it is, for its own log lines (and the stub workloads of the test).
        env = dict(os.environ, FAIR_TENANT=label, FAIR_CONFIG=config)
        if config not in ("alone", "sliced"):
            pre = [a.cushare, "run", "--sm", str(limit), "--policy",
                   "force" if config == "force" else "default"]
            if config == "priority":
                pre += ["--priority", "0" if workload == "decode" else "1"]
            cmd = pre + ["--"] + cmd
        self.label, self.lines = label, queue.Queue()
        self.cpus = sorted(cpus) if cpus else sorted(os.sched_getaffinity(0))
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                                     preexec_fn=pin)
        self.log, self.log_lock = log, log_lock
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.log_lock:
                self.log.write(f"[{self.label}] {line}")
            if line.split()[:1] in (["READY"], ["RESULT"], ["ERROR"]):
                self.lines.put(line)
        self.lines.put(None)

    def expect(self, word, deadline):
        """The next READY/RESULT/ERROR line, which must start with `word`."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TenantFailed(f"{self.label}: no {word} in time")
        if line is None:
            raise TenantFailed(f"{self.label}: exited ({self.proc.wait()}) before {word}")
        if not line.startswith(word):
            raise TenantFailed(f"{self.label}: {line.strip()}")
        return line

    def ask(self, start_ns, warmup, secs, gpu):
        self.proc.stdin.write(f"go {start_ns} {warmup} {secs}{' gpu' if gpu else ''}\n")
        self.proc.stdin.flush()

    def stop(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fields(line):
    """RESULT key=value fields, numbers as floats."""
    kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
    out = {}
    for k, v in kv.items():
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def cpu_ticks(path="/proc/stat"):
    """{cpu: (all ticks, steal ticks)} from /proc/stat; {} where it cannot
    be read (not Linux)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                v = line.split()
                if v and v[0].startswith("cpu") and v[0][3:].isdigit():
                    n = [int(x) for x in v[1:]]
                    out[int(v[0][3:])] = (sum(n[:8]), n[7] if len(n) > 7 else 0)
    except (OSError, ValueError):
        return {}
    return out


def steal_pct(before, after, cpus):
    """Percent of the time of `cpus` between two cpu_ticks() the hypervisor
    gave to others (NaN when unknown)."""
    d_all = sum(after[c][0] - before[c][0] for c in cpus if c in before and c in after)
    d_st = sum(after[c][1] - before[c][1] for c in cpus if c in before and c in after)
    return 100.0 * d_st / d_all if d_all > 0 else float("nan")


def window(a, group, gpu=False):
    """One measurement of the tenants in `group`, started together after
    the GPU rested --settle seconds; returns their RESULT fields, with the
    steal over each tenant's CPUs (steal_pct)."""
    time.sleep(a.settle)
    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(a.start_delay * 1e9)
    before = cpu_ticks()
    for t in group:
        t.ask(start, a.warmup, a.secs, gpu)
    deadline = time.monotonic() + a.start_delay + a.warmup + a.secs + 120
    got = [fields(t.expect("RESULT", deadline)) for t in group]
    after = cpu_ticks()
    for t, g in zip(group, got):
        g["steal_pct"] = steal_pct(before, after, t.cpus)
    together(got)
    return got


def together(got):
    """Sets each result's together_pct: the part of its measured interval
    (from..to, CLOCK_MONOTONIC s) during which every tenant of the window
    was measuring (NaN when a tenant did not say). A tenant held through
    the others' whole window measures after it, alone."""
    nan = float("nan")
    try:
        lo = max(g["from"] for g in got)
        hi = min(g["to"] for g in got)
    except KeyError:
        lo = hi = None
    for g in got:
        own = g.get("to", 0) - g.get("from", 0)
        g["together_pct"] = nan if lo is None or own <= 0 else 100.0 * max(0.0, hi - lo) / own


def main(argv=None):
    a = parse(argv)
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "fair-bench.log"), "w")
    log_lock = threading.Lock()
    report = open(os.path.join(a.out, "fair-bench.txt"), "w")
    t_start = time.monotonic()

    def say(s=""):
        print(s, flush=True)
        report.write(s + "\n")

    mixes = mixes_of(a)
    kinds = sorted({w for m in mixes.values() for w, _ in m[0]})
    say(f"fair-share benchmark: {a.reps} repetitions, {a.secs} s measured after {a.warmup} s, "
        f"{a.settle} s rest between windows, configurations alternated; medians (min..max)"
        + (f" of {a.reps // a.group} run{'s' if a.reps > a.group else ''}, "
           f"each the median of {a.group} repetitions"
           if a.group > 1 else ""))
    slots = core_slots(max(len(t) for t, _, _ in mixes.values()), physical_cores()) if a.pin else []
    if a.pin:
        say("tenants pinned: " + ("; ".join(f"tenant {i} on CPUs "
                                             f"{','.join(map(str, sorted(c)))}"
                                             for i, c in enumerate(slots))
                                  if slots else "no (fewer cores than tenants of a mix)"))

    def spawn(key):
        m, c = key
        if m == "alone":
            return [Tenant(a, f"alone {c}", c, 100, "alone", log, log_lock,
                           slots[0] if slots else None)]
        return [Tenant(a, f"{m} {c} {i}:{w}@{lim}", w, lim, tenant_config(c, i), log, log_lock,
                       slots[i] if slots else None)
                for i, (w, lim) in enumerate(mixes[m][0])]

    def ready(groups):
        deadline = time.monotonic() + a.setup_timeout
        for group in groups:
            for t in group:
                t.expect("READY", deadline)

    jobs = [("alone", w) for w in kinds] + [(m, c) for m in mixes for c in mixes[m][2]]
    # Warm: every tenant of every window, started now and set up together;
    # --fresh: the tenants of each window only, started for it.
    tenants = {}
    alone = {w: [] for w in kinds}
    got = {m: {c: [] for c in mixes[m][2]} for m in mixes}
    done = 0
    try:
        if not a.fresh:
            for key in jobs:
                tenants[key] = spawn(key)
            ready(tenants.values())
        setup_s = time.monotonic() - t_start
        say(f"{sum(len(g) for g in tenants.values())} tenants set up in {setup_s:.0f} s")
        for rep in range(a.reps):
            spent = time.monotonic() - t_start
            per_rep = (spent - setup_s) / done if done else 0
            if a.budget and done and spent + per_rep > a.budget:
                print(f"fair.py: budget of {a.budget:.0f} s: stopping after {done} repetitions",
                      file=sys.stderr)
                break
            k = (rep * len(jobs)) // a.reps
            for key in jobs[k:] + jobs[:k]:
                m, c = key
                print(f"rep {rep + 1}/{a.reps}: {m} {c}", file=sys.stderr, flush=True)
                if a.fresh:
                    tenants[key] = spawn(key)
                    ready([tenants[key]])
                result = window(a, tenants[key], gpu=m == "alone")
                if a.fresh:
                    for t in tenants.pop(key):
                        t.stop()
                if m == "alone":
                    alone[c].append(result[0])
                else:
                    got[m][c].append(result)
            done += 1
    finally:
        for group in tenants.values():
            for t in group:
                t.stop()
    return finish(a, say, mixes, alone, got, done, time.monotonic() - t_start)


def finish(a, say, mixes, alone, got, done, took):
    """The tables, the CSV and the verdicts; returns the exit status."""
    csv = open(os.path.join(a.out, "fair-bench.csv"), "w")
    csv.write("mix,rep,config,tenant,workload,limit,rate,p99_ms,step_p99_ms,"
              "alone_rate,alone_p99_ms,alone_step_p99_ms,steal_pct,cpu_pct,"
              "alone_steal_pct,alone_cpu_pct,together_pct\n")
    nan = float("nan")
    for m, (tenants, _, configs) in mixes.items():
        for c in configs:
            for r in range(done):
                for i, (w, lim) in enumerate(tenants):
                    g, al = got[m][c][r][i], alone[w][r]
                    csv.write(f"{m},{r},{c},{i},{w},{lim},{g['rate']:.3f},"
                              f"{g.get('p99_ms', nan):.3f},{g.get('step_p99_ms', nan):.3f},"
                              f"{al['rate']:.3f},{al.get('p99_ms', nan):.3f},"
                              f"{al.get('step_p99_ms', nan):.3f},"
                              f"{g.get('steal_pct', nan):.2f},{g.get('cpu_pct', nan):.1f},"
                              f"{al.get('steal_pct', nan):.2f},{al.get('cpu_pct', nan):.1f},"
                              f"{g.get('together_pct', nan):.1f}\n")
    verdicts = [("reps", done == a.reps, f"{done} of {a.reps} repetitions ran"
                 + (f" within the budget of {a.budget:.0f} s" if a.budget else ""))]
    for w in sorted(alone):
        r = [x["rate"] for x in alone[w][:done]]
        p = [x.get("p99_ms", nan) for x in alone[w][:done]]
        k = [x.get("kernel_ms", nan) for x in alone[w][:done]]
        say(f"{w} alone: rate {fair_report.fmt(r, 1)}  p99 {fair_report.fmt(p, 1, 2)} ms  "
            f"kernel {fair_report.fmt(k, 1, 3)} ms")
        say(f"  {w} alone, host: " + fair_report.host_line(alone[w][:done]))
    sweep = []
    for m, (tenants, saturating, configs) in mixes.items():
        say(f"\n== {m}: " + ", ".join(f"{w} {lim}%" for w, lim in tenants))
        if done:
            # A sweep point shows the bound; only decode+hog is judged.
            lines, v = fair_report.judge_mix(m, tenants, saturating, configs, alone, got[m], done,
                                             a.slack, judged=not m.startswith("priority sweep"),
                                             group=a.group)
            for x in lines:
                say(x)
            for c in configs:
                say(f"  host, {c:9s}: " + "; ".join(
                    f"tenant {i} " + fair_report.host_line([got[m][c][r][i] for r in range(done)])
                    for i in range(len(tenants))))
            verdicts += v
    for h in a.sweep:
        tenants = mixes[sweep_mix(a, h)][0]
        sweep.append((h, tenants, alone, got[sweep_mix(a, h)]))
    if sweep and done:
        say("\n== priority bound: decode (25, priority 0) beside hogs of several kernel lengths "
            "(priority 1); medians (min..max) of % of alone and x alone")
        for x in fair_report.sweep_lines(sweep, done, a.group):
            say(x)
    say("\n== targets (worst of the " + (f"runs of {a.group} repetitions)" if a.group > 1
                                         else "repetitions)"))
    for x in fair_report.summary_lines(verdicts):
        say(x)
    missed = [x for x in verdicts if not x[1]]
    say(f"\n{'FAIL' if missed else 'PASS'}: {len(missed)} missed; {done} repetitions, {took:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TenantFailed as e:
        print(f"fair.py: {e}; see fair-bench.log", file=sys.stderr)
        sys.exit(3)
