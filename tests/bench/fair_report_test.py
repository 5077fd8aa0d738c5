#!/usr/bin/env python3
"""The fair-share benchmark's arithmetic and verdicts (bench/limiter/
fair_report.py), and fair.py's orchestration of warm tenants, with stub
workloads that answer every window with rates read from a table: no GPU,
no timing in any verdict.

    fair_report_test.py          run every case (CTest bench_fair_report)
    fair_report_test.py --stub   (internal) the stub workload
    fair_report_test.py --cushare-stub run ... -- CMD   (internal) `cushare run`
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "limiter")
sys.path.insert(0, BENCH)
import fair_report  # noqa: E402
import init_pairs  # noqa: E402
import timing  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"FAIL: {what}")


def res(rate, p99=10.0, step=1.0, kernel=None):
    d = {"rate": rate, "p99_ms": p99, "step_p99_ms": step}
    if kernel is not None:
        d["kernel_ms"] = kernel
    return d


def verdict(verdicts, key):
    return [ok for k, ok, _ in verdicts if k == key]


def test_fmt():
    check(fair_report.fmt([0.5, 0.9, 0.7]) == "70.0 (50.0..90.0)", "fmt: median (min..max) in %")
    check(fair_report.fmt([1.5, 1.25], 1, 2) == "1.38 (1.25..1.50)", "fmt: median of two, x")
    check(fair_report.fmt([]) == "n/a" and fair_report.fmt([math.nan, 1]) == "n/a",
          "fmt: nothing or a NaN is n/a")


DECODE_HOG = [("decode", 25), ("hog", 75)]


def decode_hog(default_decode, prio_decode, prio_p99):
    """Three repetitions: alone decode 100 (p99 10), hog 50; sliced gives
    the decode 80 and the hog 45; default and priority as given (per rep)."""
    alone = {"decode": [res(100, 10)] * 3, "hog": [res(50, kernel=1.6)] * 3}
    got = {"sliced": [[res(80, 12), res(45)]] * 3,
           "default": [[res(d, 11), res(45)] for d in default_decode],
           "priority": [[res(d, p), res(40)] for d, p in zip(prio_decode, prio_p99)]}
    return alone, got


def test_decode_hog_met():
    alone, got = decode_hog([85, 90, 80], [96, 97, 99], [12, 11, 12.5])
    lines, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                     ["sliced", "default", "priority"], alone, got, 3)
    check(all(ok for _, ok, _ in v), f"decode+hog meeting every target: {v}")
    check(verdict(v, "aggregate") == [True] and verdict(v, "no-loss") == [True, True],
          "decode+hog: one aggregate and one no-loss verdict per tenant")
    check(any("decode 0 p99 vs alone, priority: call 1.20 (1.10..1.25) x" in x for x in lines),
          "decode+hog: the p99 row is median (min..max) of rep ratios")


def test_worst_of_three():
    # Medians meet the targets; one repetition does not: the verdict is MISS.
    alone, got = decode_hog([85, 90, 76], [96, 94, 99], [12, 11, 13])
    _, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                 ["sliced", "default", "priority"], alone, got, 3)
    check(verdict(v, "no-loss") == [False, True],
          "worst of three: decode at 76 % beside sliced's 80 % misses (slack 3 points)")
    check(verdict(v, "prio-speed") == [False], "worst of three: 94 % of alone misses 95 %")
    check(verdict(v, "prio-p99") == [False], "worst of three: p99 1.3 x misses 1.25 x")


def test_same_repetition():
    # Each rep is judged against its own sliced: a slow rep whose sliced
    # window was slow too is not a loss.
    alone = {"decode": [res(100), res(60), res(100)], "hog": [res(50)] * 3}
    got = {"sliced": [[res(80), res(45)], [res(48), res(45)], [res(80), res(45)]],
           "default": [[res(80), res(45)], [res(48), res(45)], [res(80), res(45)]]}
    _, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False, ["sliced", "default"],
                                 alone, got, 3)
    check(all(ok for _, ok, _ in v), f"rates of a slow repetition against its own alone: {v}")


def test_median_alone():
    # Speeds and latencies are taken against the median alone window, not
    # the one beside each repetition: a lone window that happened to be
    # fast (120) or slow (80) moves no repetition's fraction.
    alone = {"decode": [res(80, 12), res(100, 10), res(120, 8)], "hog": [res(50)] * 3}
    got = {"sliced": [[res(80, 12), res(45)]] * 3,
           "default": [[res(80, 12), res(45)]] * 3,
           "priority": [[res(96, 12), res(40)]] * 3}
    lines, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                     ["sliced", "default", "priority"], alone, got, 3)
    check(verdict(v, "prio-speed") == [True],
          f"priority: 96 against the median alone 100 keeps 96 %: {v}")
    check(verdict(v, "prio-p99") == [True],
          f"priority: p99 12 against the median alone 10 is 1.20 x: {v}")
    check(any("priority" in x and "96.0 (96.0..96.0)" in x for x in lines),
          f"priority row: every repetition at 96 % of the median alone: {lines}")
    alone["decode"][1] = res(100, math.nan)
    _, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                 ["sliced", "default", "priority"], alone, got, 3)
    check(verdict(v, "prio-p99") == [False], "a lone window without a p99: no latency verdict met")


def test_runs():
    check(fair_report.runs([1, 2, 3, 10, 5, 6], 3) == [2, 6], "runs: the median of each run of 3")
    check(fair_report.runs([1, 2, 3, 4], 3) == [2], "runs: a last part run is left out")
    check(fair_report.runs([1, 2], 3) == [1.5], "runs: fewer repetitions than a run make one run")
    check(fair_report.runs([4, 1], 1) == [4, 1], "runs of one: every repetition")


def test_worst_run():
    # Six repetitions in runs of three: one slow window per run moves no
    # verdict; two in one run do.
    def judge(prio, group):
        alone = {"decode": [res(100, 10)] * 6, "hog": [res(50)] * 6}
        got = {"sliced": [[res(80, 12), res(45)]] * 6,
               "default": [[res(82, 11), res(45)]] * 6,
               "priority": [[res(d, 11), res(40)] for d in prio]}
        return fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                     ["sliced", "default", "priority"], alone, got, 6,
                                     group=group)
    lines, v = judge([96, 80, 97, 98, 96, 90], 3)
    check(verdict(v, "prio-speed") == [True], f"runs of 3: one slow window per run: {v}")
    check(any(x.startswith("  priority") and "96.0 (96.0..96.0)" in x for x in lines),
          f"runs of 3: the table shows the runs' medians: {lines}")
    _, v = judge([96, 80, 97, 98, 96, 90], 1)
    check(verdict(v, "prio-speed") == [False], "runs of 1: the slow window decides")
    _, v = judge([96, 80, 90, 98, 96, 97], 3)
    check(verdict(v, "prio-speed") == [False], "runs of 3: two slow windows in one run miss")


def test_saturating():
    tenants = [("matmul", 25), ("matmul", 75)]
    alone = {"matmul": [res(100)] * 3}
    got = {"sliced": [[res(50), res(49)]] * 3,
           "default": [[res(25.5), res(74)], [res(24), res(75.5)], [res(26), res(73.5)]],
           "force": [[res(25), res(75)], [res(24), res(73)], [res(25), res(72.5)]]}
    _, v = fair_report.judge_mix("matmul 25+75", tenants, True, ["sliced", "default", "force"],
                                 alone, got, 3)
    check(verdict(v, "no-loss") == [True, True],
          "saturating: the 25 % tenant below its sliced 50 % but at its floor is no loss")
    check(verdict(v, "split") == [True, True], "saturating: 25/75 within 2 points")
    check(verdict(v, "together") == [True], "saturating: 98.5 % together >= 97 %")
    check(verdict(v, "force") == [True, False], "force: 72.5 for a cap of 75 misses by 2.5")
    check(verdict(v, "aggregate") == [True], "saturating: the aggregate vs sliced")


def test_non_saturating_is_held_to_sliced():
    # A decode tenant above its floor but below what time-slicing gave it
    # has lost: the floor exemption is for saturating mixes only.
    alone, got = decode_hog([60, 60, 60], [96, 96, 96], [10, 10, 10])
    _, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                 ["sliced", "default", "priority"], alone, got, 3)
    check(verdict(v, "no-loss")[0] is False, "decode at 60 % (floor 25) under sliced's 80 %")


def test_sweep_and_summary():
    alone, got = decode_hog([85] * 3, [96] * 3, [11] * 3)
    lines = fair_report.sweep_lines([("hog", DECODE_HOG, alone, got)], 3)
    check(len(lines) == 2 and "1.600 (1.600..1.600)" in lines[1] and
          "96.0 (96.0..96.0)" in lines[1], f"sweep row: kernel ms and decode %: {lines}")
    s = fair_report.summary_lines([("aggregate", True, "a: ok"), ("aggregate", False, "b: bad"),
                                   ("force", True, "c")])
    check(s[1].startswith("MISS default: every mix's aggregate") and "(1 of 2 met)" in s[1]
          and s[2].strip() == "b: bad", f"summary: MISS with the missed verdict: {s}")
    check(s[0].startswith("n/a  every repetition"), "summary: a target judged nowhere is n/a")
    check(any(x.startswith("PASS force:") for x in s), "summary: PASS where all were met")


def test_core_slots():
    sys.path.insert(0, BENCH)
    import fair
    ht = [{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}]
    check(fair.core_slots(2, ht) == [{1, 9, 2, 10, 3, 11}, {4, 12, 5, 13, 6, 14}],
          "core slots: whole cores, the first left to the harness, as many each as fit")
    check(fair.core_slots(4, ht) == [{1, 9}, {2, 10}, {3, 11}, {4, 12}],
          "core slots: one core each for four tenants on eight cores")
    check(fair.core_slots(2, [{0}, {1}]) == [] and fair.core_slots(0, ht) == [],
          "core slots: none when the tenants outnumber the cores left")
    slots = fair.core_slots(3, fair.physical_cores())
    check(all(not (x & y) for i, x in enumerate(slots) for y in slots[i + 1:]),
          "core slots of this machine are disjoint")


# ---- fair.py end to end, stub tenants --------------------------------

def stub():
    """A served workload: READY, then per 'go' line the next rate of its
    row in the table (STUB_TABLE, JSON: {tenant label: [[rate, p99], ...]}),
    one row per window it is asked for."""
    table = json.load(open(os.environ["STUB_TABLE"]))
    label = os.environ["FAIR_TENANT"]
    native = os.environ["FAIR_CONFIG"] in ("alone", "sliced")
    if bool(os.environ.get("STUB_CUSHARE")) == native:
        print(f"ERROR {label}: {'native' if native else 'limited'} tenant run "
              f"{'under cushare' if native else 'natively'}", flush=True)
    rows, k = table[label], 0
    print("READY", flush=True)
    for line in sys.stdin:
        if line.startswith("quit"):
            return 0
        rate, p99 = rows[k % len(rows)]
        k += 1
        kernel = " kernel_ms=1.5" if line.split()[4:] == ["gpu"] else ""
        print(f"RESULT workload=stub rate={rate} p99_ms={p99} step_p99_ms=1{kernel}", flush=True)
    return 0


def cushare_stub(argv):
    """`cushare run --sm L --policy P [--priority N] -- CMD`: checks the
    arguments fair.py gives for the tenant's configuration, then runs CMD."""
    i = argv.index("--")
    opts, cmd = argv[:i], argv[i + 1:]
    config = os.environ["FAIR_CONFIG"]
    want_policy = "force" if config == "force" else "default"
    ok = config in ("default", "priority", "force") and opts[:2] == ["run", "--sm"] and \
        opts[3:5] == ["--policy", want_policy] and (("--priority" in opts) == (config == "priority"))
    if not ok:
        print(f"ERROR cushare stub: {config}: unexpected {opts}", flush=True)
        return 1
    os.execvpe(cmd[0], cmd, dict(os.environ, STUB_CUSHARE="1"))


def run_fair(table, mixes, extra=()):
    with tempfile.TemporaryDirectory(prefix="fair-test-") as d:
        path = os.path.join(d, "table.json")
        json.dump(table, open(path, "w"))
        me = os.path.abspath(__file__)
        args = [sys.executable, os.path.join(BENCH, "fair.py"),
                "--cushare", os.path.join(d, "cushare"),
                "--workload", f"decode={sys.executable} {me} --stub",
                "--workload", f"hog={sys.executable} {me} --stub",
                "--reps", "3", "--secs", "0.01", "--warmup", "0", "--settle", "0",
                "--start-delay", "0", "--setup-timeout", "60", "--out", d] + list(extra)
        for m in mixes:
            args += ["--mix", m]
        with open(os.path.join(d, "cushare"), "w") as f:
            f.write(f"#!/bin/sh\nexec {sys.executable} {me} --cushare-stub \"$@\"\n")
        os.chmod(os.path.join(d, "cushare"), 0o755)
        p = subprocess.run(args, env=dict(os.environ, STUB_TABLE=path), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        path = os.path.join(d, "fair-bench.csv")
        csv = open(path).read() if os.path.exists(path) else ""
        return p.returncode, p.stdout, csv


def table_decode_hog(prio_rates):
    """Repetition 2's lone decode window is slow (60): against the median
    lone window (100) the decode tenants of every repetition are judged
    alike; repetition 2 is slow for the sliced and default tenants too, and
    each is judged against the other in it."""
    alone = {"alone decode": [[100, 10], [60, 10], [100, 10]], "alone hog": [[50, 5]]}
    mix = "decode+hog"
    t = dict(alone)
    t[f"{mix} sliced 0:decode@25"] = [[80, 12], [48, 12], [80, 12]]
    t[f"{mix} sliced 1:hog@75"] = [[45, 5]]
    t[f"{mix} default 0:decode@25"] = [[85, 11], [51, 11], [85, 11]]
    t[f"{mix} default 1:hog@75"] = [[45, 5]]
    t[f"{mix} priority 0:decode@25"] = [[r, 11] for r in prio_rates]
    t[f"{mix} priority 1:hog@75"] = [[40, 5]]
    t["priority sweep hog2 sliced 0:decode@25"] = [[70, 14]]
    t["priority sweep hog2 sliced 1:hog2@75"] = [[45, 5]]
    t["priority sweep hog2 priority 0:decode@25"] = [[90, 12]]
    t["priority sweep hog2 priority 1:hog2@75"] = [[40, 5]]
    t["alone hog2"] = [[50, 5]]
    return t


def test_init_pairs():
    """Start-up is judged on pairs after the first: a slow first baseline
    (cold) would otherwise read as cushare's cost."""
    text = []
    for k, base, cs in [(1, 4144.8, 5155.7), (2, 5205.7, 5210.5), (3, 5143.5, 5243.3),
                        (4, 5146.2, 5225.6)]:
        text += [f"run {k} baseline: ok 300/300, failed 0, wall 1 ms\n",
                 f"  cuInit latency (ms)  p50 1 p95 2 p99 {base} max 3 mean 1  (300 samples)\n",
                 f"run {k} cushare: ok 300/300, failed 0, wall 1 ms\n",
                 f"  cuInit latency (ms)  p50 1 p95 2 p99 {cs} max 3 mean 1  (300 samples)\n"]
    r = init_pairs.pair_ratios(text)
    check(len(r) == 3, f"init_pairs: three pairs after the first, got {r}")
    check(abs(sorted(r)[1] - 5225.6 / 5146.2) < 1e-9,
          f"init_pairs: the median pair is run 4's, got {sorted(r)}")
    # An unfinished pair (no cushare run) is left out, not half counted.
    check(len(init_pairs.pair_ratios(text[:14])) == 2, "init_pairs: an unfinished pair is left out")
    check(init_pairs.pair_ratios(text[:4]) == [], "init_pairs: the first pair alone gives nothing")


def test_in_window():
    """A decode tenant counts the steps that ended in its window: a call
    that straddles an edge gives only its steps inside, so the window is
    exactly as long as the others' (bench/limiter/decode.py)."""
    calls = [[0.70, 0.80, 0.90], [1.00, 1.10, 1.20], [1.90, 2.00, 2.10]]
    made = [t for c in calls for t in timing.in_window(c, 1.0, 2.0)]
    check(made == [1.0, 1.1, 1.2, 1.9],
          f"in_window: steps at 1.0, 1.1, 1.2 and 1.9 of [1, 2), got {made}")
    check(timing.in_window([2.0], 1.0, 2.0) == [], "in_window: the window's end is outside it")
    check(timing.in_window([], 1.0, 2.0) == [], "in_window: no steps, none counted")


def test_fair_end_to_end():
    rc, out, csv = run_fair(table_decode_hog([97, 98, 96]), ["decode+hog"],
                            ["--workload", f"hog2={sys.executable} {os.path.abspath(__file__)} "
                             "--stub", "--sweep", "hog2", "--sweep", "hog"])
    check(rc == 0, f"fair.py, every target met, against the median lone window: "
          f"exit {rc}\n{out}")
    check("PASS priority: the decode tenant keeps >= 95 % of its alone speed (1 of 1 met)" in out,
          "fair.py: the priority verdict in the summary")
    check(csv.count("\n") == 1 + 3 * 3 * 2 + 3 * 2 * 2,
          "fair.py: one CSV row per repetition, configuration and tenant (sweep included)")
    sweep = out[out.find("== priority bound"):]
    check("hog2 " in sweep and "hog " in sweep and "1.500 (1.500..1.500)" in sweep,
          f"fair.py: the sweep lists each hog with its kernel length:\n{sweep}")
    check("priority sweep hog2" in out and "MISS" not in out,
          "fair.py: a sweep point is shown, never judged")

    rc, out, _ = run_fair(table_decode_hog([97, 90, 96]), ["decode+hog"])
    check(rc == 1, f"fair.py, one repetition's decode at 90 % of its alone: exit {rc}")
    check("MISS priority: the decode tenant keeps >= 95 % of its alone speed (0 of 1 met)" in out
          and "worst 90.0 %" in out, "fair.py: the worst repetition decides")


def test_fair_grouped():
    # The same table as the miss above, taken as one run of three: its
    # median (96 %) is judged. A group that does not divide the
    # repetitions is a usage error.
    rc, out, _ = run_fair(table_decode_hog([97, 90, 96]), ["decode+hog"], ["--group", "3"])
    check(rc == 0 and "worst 96.0 %" in out and "each the median of 3 repetitions" in out,
          f"fair.py --group 3: the run's median decides: exit {rc}\n{out}")
    rc, out, _ = run_fair(table_decode_hog([97] * 3), ["decode+hog"], ["--group", "2"])
    check(rc == 2 and "--group 2: must be >= 1 and divide --reps 3" in out,
          f"fair.py --group 2 of 3 repetitions: usage error: exit {rc}\n{out}")


def test_fair_fresh():
    # --fresh starts each window's tenants for it: the stubs then answer
    # their first row, so every repetition reads repetition 1's rates.
    rc, out, csv = run_fair(table_decode_hog([97, 90, 96]), ["decode+hog"], ["--fresh"])
    check(rc == 0 and csv.count("\n") == 1 + 3 * 3 * 2,
          f"fair.py --fresh: every window with tenants of its own: exit {rc}\n{out}")


def test_fair_pinned():
    # --pin says where each tenant runs (or why nowhere) and changes no verdict.
    rc, out, _ = run_fair(table_decode_hog([97, 98, 96]), ["decode+hog"], ["--pin"])
    check(rc == 0 and "tenants pinned: " in out, f"fair.py --pin: exit {rc}\n{out}")


def test_fair_split():
    # --split adds, per non-saturating mix, each tenant alone under cushare
    # beside native others (the stubs fail a tenant run the wrong way),
    # shown and never judged.
    t = table_decode_hog([97, 98, 96])
    for i, w in enumerate(["decode", "hog"]):
        for c in ("default-0", "default-1"):
            t[f"decode+hog {c} {i}:{w}@{25 if i == 0 else 75}"] = [[10, 50]]
    rc, out, csv = run_fair(t, ["decode+hog"], ["--split", "decode+hog"])
    check(rc == 0 and csv.count("\n") == 1 + 3 * 5 * 2,
          f"fair.py --split: two more configurations, unjudged: exit {rc}\n{out}")
    check("  default-0 " in out and "host, default-1" in out,
          f"fair.py --split: their rows and host lines are shown:\n{out}")
    rc, out, _ = run_fair(t, ["decode+hog"], ["--split", "decode+decode"])
    check(rc == 2 and "--split 'decode+decode': must name a non-saturating mix given with --mix"
          in out, f"fair.py --split of a mix not run: usage error: exit {rc}\n{out}")
    head = csv.split("\n")[0].split(",")
    check(head[-5:] == ["steal_pct", "cpu_pct", "alone_steal_pct", "alone_cpu_pct", "together_pct"],
          f"fair.py: the CSV carries the host columns: {head}")


def test_fair_again():
    # --again measures time-slicing twice; the second is set against the
    # first with the arithmetic default is judged by, and judged itself on
    # nothing (repetition 1's sliced-2 decode is 8 points slower).
    t = table_decode_hog([97, 98, 96])
    t["decode+hog sliced-2 0:decode@25"] = [[72, 12], [48, 12], [80, 12]]
    t["decode+hog sliced-2 1:hog@75"] = [[45, 5]]
    rc, out, csv = run_fair(t, ["decode+hog"], ["--again"])
    check(rc == 0 and csv.count("\n") == 1 + 3 * 4 * 2,
          f"fair.py --again: one more configuration, unjudged: exit {rc}\n{out}")
    want = ("A/A, sliced-2 against sliced as default is judged: aggregate worst 95.3 %; "
            "tenant 0 worst -8.0 points, tenant 1 worst +0.0 points")
    check(want in out, f"fair.py --again: the A/A line:\n{out}")
    # Its decode 8 points down misses the 3-point slack: a default verdict
    # missing the same target is marked, and still a miss.
    t["decode+hog default 0:decode@25"] = [[70, 11], [48, 11], [80, 11]]
    rc, out, _ = run_fair(t, ["decode+hog"], ["--again"])
    check(rc == 1 and "default not below sliced (worst -10.0 points of its alone speed, slack 3) "
          "[A/A misses it too]" in out and "aggregate >= 95 % of sliced (worst 94.1 %)\n" in out,
          f"fair.py --again: a verdict below the A/A reading is marked, still missed: "
          f"exit {rc}\n{out}")


def test_steal():
    import fair
    with tempfile.TemporaryDirectory() as d:
        def stat(*rows):
            path = os.path.join(d, "stat")
            with open(path, "w") as f:
                f.write("cpu  9 9 9 9 9 9 9 9 0 0\n")
                for k, (busy, steal) in enumerate(rows):
                    f.write(f"cpu{k} {busy} 0 0 100 0 0 0 {steal} 0 0\n")
                f.write("intr 1 2 3\n")
            return fair.cpu_ticks(path)
        a, b = stat((10, 0), (10, 0)), stat((60, 50), (110, 0))
        check(a[1] == (110, 0) and b[0] == (210, 50), f"cpu_ticks: per CPU (all, steal): {b}")
        check(abs(fair.steal_pct(a, b, [0]) - 50.0) < 1e-9, "steal_pct: half of CPU 0 stolen")
        check(abs(fair.steal_pct(a, b, [0, 1]) - 25.0) < 1e-9, "steal_pct: over a set of CPUs")
        check(math.isnan(fair.steal_pct(a, b, [7])), "steal_pct: a CPU not in /proc/stat: NaN")
        check(fair.cpu_ticks(os.path.join(d, "none")) == {}, "cpu_ticks: unreadable: nothing")
    line = fair_report.host_line([{"steal_pct": 1.0, "cpu_pct": 99.0},
                                  {"steal_pct": 3.0, "cpu_pct": 80.0},
                                  {"steal_pct": 2.0, "cpu_pct": 90.0}])
    check(line == "steal % 2.0 (1.0..3.0), cpu % 90 (80..99)", f"host_line: {line}")
    check(fair_report.host_line([{"steal_pct": 0.0}]) == "steal % 0.0 (0.0..0.0)",
          "host_line: no cpu % where the workload does not report it")


def test_measured_together():
    import fair
    got = [{"from": 10.0, "to": 13.0}, {"from": 10.5, "to": 13.5}, {"from": 14.0, "to": 17.0}]
    fair.together(got[:2])
    check([round(g["together_pct"], 1) for g in got[:2]] == [83.3, 83.3],
          f"together: the shared part of each interval: {got[:2]}")
    fair.together(got)
    check(got[2]["together_pct"] == 0.0, "together: a tenant measured after the others: 0 %")
    odd = [{"from": 1.0, "to": 2.0}, {}]
    fair.together(odd)
    check(all(math.isnan(g["together_pct"]) for g in odd), "together: unknown where one is silent")
    # A default window whose hog measured after the decode fails closed,
    # whatever its figures say.
    alone, got = decode_hog([85, 90, 80], [96, 97, 99], [12, 11, 12.5])
    got["default"] = [[dict(x, together_pct=100.0) for x in w] for w in got["default"]]
    got["default"][1] = [dict(got["default"][1][0], together_pct=40.0),
                         dict(got["default"][1][1], together_pct=40.0)]
    lines, v = fair_report.judge_mix("decode+hog", DECODE_HOG, False,
                                     ["sliced", "default", "priority"], alone, got, 3)
    check(verdict(v, "aggregate") == [False] and verdict(v, "no-loss") == [False, False],
          f"together: default measured apart is no pass: {v}")
    check(any("[not measured together: 40 %]" in x for x in lines), "together: says why")
    check(verdict(v, "prio-speed") == [True], "together: priority verdicts unaffected")
    line = fair_report.host_line([{"steal_pct": 0.0, "together_pct": 0.0}])
    check(line == "steal % 0.0 (0.0..0.0), measured with the others % 0 (0..0)",
          f"host_line: together: {line}")


def test_fair_tenant_failure():
    t = table_decode_hog([97] * 3)
    del t["decode+hog default 1:hog@75"]   # its stub dies on setup (KeyError)
    rc, out, _ = run_fair(t, ["decode+hog"])
    check(rc == 3 and "decode+hog default 1:hog@75: exited" in out,
          f"fair.py: a tenant that dies is named and fails the run: exit {rc}\n{out}")


def main():
    if sys.argv[1:2] == ["--stub"]:
        return stub()
    if sys.argv[1:2] == ["--cushare-stub"]:
        return cushare_stub(sys.argv[2:])
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
    print("FAIL" if FAILS else "PASS", f"{len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
