#!/usr/bin/env python3
"""Capture and context acceptance steps (run through tests/gpu/capture_contexts/run.sh):

    steps.py STEP BUILD_DIR OUT_DIR

capture_share        graph replay natively, at --sm 25 and --sm 50 (force): achieved
                     share within ±5 points; captures in every mode under --sm 50
ctx_budget3          3 processes, one 1 GiB ledger, one context each: 1-2 admitted, the
                     rest CUDA_ERROR_OUT_OF_MEMORY, nvidia-smi sum ≤ 1024 MiB at every sample
ctx_kill24           24 processes × (context + 500 MiB), one 24 GiB ledger; 12 SIGKILLed
                     and replaced: nvidia-smi ≤ budget always, within 1 % of the ledger
memcpy_interference  a copy-heavy tenant at --sm 25 beside an unlimited element-wise one
demo3                `make demo` three times; the demo's own ok/MISSED verdicts

Prints its details, lines starting with "» " (the compact report run.sh
shows), and last `SUMMARY <step> PASS|FAIL|SKIP: <one line>`. Sub-run logs
go to OUT_DIR/<step>/.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
import harness as H  # noqa: E402

ISSUE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = H.HERE
PY = sys.executable
GiB = 1 << 30


class Ctx:
    def __init__(self, step, build, out):
        self.step = step
        self.build, self.out = os.path.abspath(build), os.path.abspath(out)
        self.cushare = os.path.join(self.build, "cushare")
        self.dir = os.path.join(self.out, step)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.work = tempfile.mkdtemp(prefix=f"cushare-{step}.")
        gpu = os.environ.get("CAPTURE_GPU", "0")
        self.env = H.clean_env(CUDA_VISIBLE_DEVICES=gpu)
        uuids = H.gpu_uuids()
        self.uuid = uuids[int(gpu)] if gpu.isdigit() and int(gpu) < len(uuids) else None

    def log(self, name):
        return os.path.join(self.dir, name)

    def proc(self, name, cmd, timeout, **env):
        e = dict(self.env)
        e.update({k: str(v) for k, v in env.items()})
        return H.Proc(cmd, self.log(name + ".log"), timeout, env=e, cwd=H.ROOT)

    def sm(self, pct, cmd):
        return [self.cushare, "run", "--sm", str(pct), "--policy", "force", "--"] + cmd


def run_all(procs):
    for p in procs:
        p.wait()
    return procs


# ---------------------------------------------------------------- capture_share

def capture_share(ctx):
    graph = [PY, "-u", os.path.join(WORKLOADS, "torch_graph.py"), "--secs", "6", "--warmup", "1"]
    rates, why, sums = {}, {}, {}
    for name, sm in (("native", 0), ("sm25", 25), ("sm50", 50)):
        p = ctx.proc(f"graph.{name}", ctx.sm(sm, graph) if sm else graph, 60)
        p.wait()
        q = H.parse(p.text())
        if p.rc == 0 and q["rate"]:
            rates[name] = q["rate"]
        else:
            why[name] = H.failure_reason(p)
        sums[name] = q["checksum"]
        print(f"graph replay {name}: rc={p.rc} rate={q['rate']} {q['unit']} "
              f"checksum={q['checksum']} ({p.elapsed:.1f} s)", flush=True)
    ok = "native" in rates
    parts = []
    if not ok:
        parts.append(f"native graph replay failed: {why.get('native')}")
    for name, sm in (("sm25", 25), ("sm50", 50)):
        if name not in rates:
            ok = False
            parts.append(f"--sm {sm}: {why[name]}")
        elif "native" in rates:
            pct = 100 * rates[name] / rates["native"]
            good = abs(pct - sm) <= 5
            ok &= good
            parts.append(f"--sm {sm} → {pct:.1f} % {'ok' if good else 'MISSED'}")
    nat = f"{rates['native']:.0f} replays/s" if "native" in rates else "?"
    got = {v for v in sums.values() if v}
    same = "same output" if len(got) == 1 else f"OUTPUT DIFFERS {sums}"
    ok &= len(got) == 1
    H.report(f"graph replay (4 × Linear 2048, batch 8, fp16), 6 s each: native {nat}; "
             + "; ".join(parts) + f" (target ±5 points); {same}")

    # Capture cases: natively as a control, then under --sm 50, each wave at once.
    cases = ("global", "thread_local", "relaxed", "multistream", "graph_pool", "mallocasync")
    res = {}
    for wave in ("native", "sm50"):
        procs = []
        for c in cases:
            cmd = [PY, "-u", os.path.join(ISSUE, "capture_modes.py"), c]
            procs.append((c, ctx.proc(f"capture.{c}.{wave}", ctx.sm(50, cmd) if wave == "sm50"
                                      else cmd, 60)))
        for c, p in procs:
            p.wait()
            m = re.search(rf"^CAPTURE {c} (ok.*|FAIL.*)$", p.text(), re.M)
            res[(c, wave)] = (p.rc == 0 and m is not None and m.group(1).startswith("ok"),
                              m.group(1) if m else H.failure_reason(p))
            print(f"capture {c:12} {wave:6}: {res[(c, wave)][1]}", flush=True)
    n_sm = sum(res[(c, "sm50")][0] for c in cases)
    n_nat = sum(res[(c, "native")][0] for c in cases)
    H.report("captures under --sm 50: " + ", ".join(
        f"{c} {'ok' if res[(c, 'sm50')][0] else 'FAIL'}" for c in cases))
    for c in cases:
        for wave in ("sm50", "native"):
            if not res[(c, wave)][0]:
                H.report(f"  {c} {'under --sm 50' if wave == 'sm50' else 'natively (control)'}: "
                         + H.short(res[(c, wave)][1], 150))
    ok &= n_sm == len(cases)
    share = "; ".join(p for p in parts if p.startswith("--sm"))
    return ok, (f"{share or 'no rates'} of {nat}; captures under --sm 50 {n_sm}/{len(cases)} ok "
                f"(native {n_nat}/{len(cases)})")


# ---------------------------------------------------------------- ctx_* helpers

def ctx_hold(ctx):
    return os.path.join(ctx.build, "ctx_hold")


def hold_state(p):
    """('ready'|'refused'|'failed'|'pending', pid reported by ctx_hold, detail)."""
    text = p.text()
    m = re.search(r"^READY pid=(\d+)", text, re.M)
    if m:
        return "ready", int(m.group(1)), ""
    m = re.search(r"^REFUSED pid=(\d+) at=(\S+) code=(\S+)", text, re.M)
    if m:
        kind = "refused" if m.group(3) == "CUDA_ERROR_OUT_OF_MEMORY" else "failed"
        return kind, int(m.group(1)), f"{m.group(2)}: {m.group(3)}"
    if not p.running():
        return "failed", None, H.failure_reason(p)
    return "pending", None, ""


def wait_states(procs, timeout):
    end = time.monotonic() + timeout
    while True:
        states = [hold_state(p) for p in procs]
        if all(s[0] != "pending" for s in states) or time.monotonic() > end:
            return states
        time.sleep(0.1)


def count(states):
    c = {}
    for s in states:
        c[s[0]] = c.get(s[0], 0) + 1
    return c


def status_text(ctx, ledger, json_=False):
    cmd = [ctx.cushare, "status"] + (["--json"] if json_ else []) + [ledger]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=15, env=ctx.env)
        return r.stdout + (r.stderr if r.returncode else "")
    except subprocess.TimeoutExpired:
        return "cushare status timed out"


def ledger_used(ctx, ledger):
    """(used bytes of the ledger's first device, its uuid) or (None, None)."""
    try:
        d = json.loads(status_text(ctx, ledger, True))["devices"][0]
        return d["used"], d.get("uuid")
    except (ValueError, KeyError, IndexError, TypeError):
        return None, None


def stop_all(procs):
    for p in procs:
        p.kill(signal.SIGTERM)
    run_all(procs)


# ---------------------------------------------------------------- ctx_budget3

def ctx_budget3(ctx):
    ledger = os.path.join(ctx.work, "ctx_budget3.ledger")
    uuid = ctx.uuid
    with H.MemSampler({"step": os.getpid()}) as smp:
        procs = [ctx.proc(f"hold{i}", [ctx.cushare, "run", "--mem", "1GiB", "--ledger", ledger,
                                       "--", ctx_hold(ctx), "6"], 40) for i in range(3)]
        states = wait_states(procs, 30)
        time.sleep(1)
        st = status_text(ctx, ledger)
        run_all(procs)
    for i, s in enumerate(states):
        print(f"process {i}: {s[0]} pid={s[1]} {s[2]}", flush=True)
    print(st, flush=True)
    c = count(states)
    peak = smp.peak("step", uuid)
    admitted, refused = c.get("ready", 0), c.get("refused", 0)
    ok = 1 <= admitted <= 2 and admitted + refused == 3 and peak is not None and peak <= 1024
    H.report(f"admitted {admitted}, refused with CUDA_ERROR_OUT_OF_MEMORY {refused}, "
             f"other {3 - admitted - refused}; nvidia-smi sum max {H.fmt_mib(peak)} over "
             f"{len(smp.samples)} samples (budget 1024 MiB)")
    for line in st.strip().splitlines()[-6:]:
        H.report("  " + line)
    return ok, (f"admitted {admitted}, refused (OOM) {refused}, other {3 - admitted - refused}; "
                f"max nvidia-smi sum {peak if peak is None else round(peak)} MiB ≤ 1024: "
                f"{'yes' if peak is not None and peak <= 1024 else 'NO'} "
                f"({len(smp.samples)} samples)")


# ---------------------------------------------------------------- ctx_kill24

def ctx_kill24(ctx):
    n, budget_mib, alloc = 24, 24 * 1024, 500
    ledger = os.path.join(ctx.work, "ctx_kill24.ledger")
    uuid = ctx.uuid

    def start(i):
        return ctx.proc(f"hold{i:02d}", [ctx.cushare, "run", "--exec", "--mem", "24GiB", "--ledger",
                                         ledger, "--", ctx_hold(ctx), "150", str(alloc)], 170)

    smp = H.MemSampler({"step": os.getpid()}).start()
    t = time.monotonic()
    first = [start(i) for i in range(n)]
    s1 = wait_states(first, 60)
    c1 = count(s1)
    print(f"first 24: {c1}, all settled after {time.monotonic() - t:.1f} s", flush=True)
    victims = [(p, s) for p, s in list(zip(first, s1))[0::2] if s[0] == "ready"]
    for p, s in victims:
        try:
            os.kill(s[1], signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p, _ in victims:
        p.wait()
    print(f"SIGKILLed {len(victims)}: pids {' '.join(str(s[1]) for _, s in victims)}", flush=True)
    t = time.monotonic()
    repl = [start(n + i) for i in range(12)]
    s2 = wait_states(repl, 60)
    c2 = count(s2)
    print(f"12 replacements: {c2}, all settled after {time.monotonic() - t:.1f} s", flush=True)
    time.sleep(1)
    pairs = []
    for _ in range(10):
        apps = H.query_apps()
        used, luuid = ledger_used(ctx, ledger)
        u = luuid or uuid
        if apps is not None and used is not None:
            pids = H.process_tree([os.getpid()])
            smi = sum(m for pid, g, m in apps if pid in pids and m is not None and (not u or g == u))
            pairs.append((smi, used / (1 << 20)))
        time.sleep(0.3)
    smp.stop()
    final = status_text(ctx, ledger)
    stop_all(first + repl)
    peak = smp.peak("step", uuid)
    worst = max((abs(a - b) / b * 100 if b else 100.0 for a, b in pairs), default=None)
    for a, b in pairs:
        print(f"sample: nvidia-smi {a:.0f} MiB, ledger {b:.0f} MiB, diff {a - b:+.0f} MiB", flush=True)
    print(final, flush=True)
    ok = peak is not None and peak <= budget_mib and bool(pairs) and worst <= 1.0
    H.report(f"first 24: {c1.get('ready', 0)} ready, {c1.get('refused', 0)} refused (OOM), "
             f"{c1.get('failed', 0) + c1.get('pending', 0)} other; SIGKILLed {len(victims)}; "
             f"12 replacements: {c2.get('ready', 0)} ready, {c2.get('refused', 0)} refused (OOM), "
             f"{c2.get('failed', 0) + c2.get('pending', 0)} other")
    if pairs:
        a, b = pairs[-1]
        H.report(f"after replacement: nvidia-smi {a:.0f} MiB vs ledger used {b:.0f} MiB "
                 f"(worst of {len(pairs)} pairs {worst:.2f} %, target ≤ 1 %); max nvidia-smi sum "
                 f"{H.fmt_mib(peak)} over {len(smp.samples)} samples (budget {budget_mib} MiB)")
    else:
        H.report("no nvidia-smi / ledger pair could be read")
    for line in final.strip().splitlines()[:5]:
        H.report("  " + line)
    return ok, (f"ready {c1.get('ready', 0)}/24, killed {len(victims)}, replacements ready "
                f"{c2.get('ready', 0)}/12 (refused {c2.get('refused', 0)}); max nvidia-smi "
                f"{peak if peak is None else round(peak)} MiB ≤ {budget_mib}: "
                f"{'yes' if peak is not None and peak <= budget_mib else 'NO'}; "
                f"nvidia-smi vs ledger worst {'?' if worst is None else f'{worst:.2f}'} % (≤ 1 %)")


# ---------------------------------------------------------------- memcpy_interference

def memcpy_interference(ctx):
    secs, warm = 4, 1
    b_cmd = [os.path.join(ctx.build, "limiter_workload"), "elementwise", "--secs", str(secs),
             "--warmup", str(warm)]
    a_cmd = [PY, "-u", os.path.join(ISSUE, "copy_tenant.py"), "--secs", str(secs),
             "--warmup", str(warm)]

    def b_rate(p):
        m = re.search(r"RESULT workload=elementwise rate=([0-9.]+)", p.text())
        return float(m.group(1)) if m and p.rc == 0 else None

    def a_bw(p):
        m = re.search(r"COPY d2d_GBps=([0-9.]+) h2d_GBps=([0-9.]+)", p.text())
        return (float(m.group(1)), float(m.group(2))) if m and p.rc == 0 else None

    rows = []
    for name, with_b, a_mode in (("B alone", True, None), ("A alone", False, "native"),
                                 ("B + A unlimited", True, "native"),
                                 ("B + A at --sm 25", True, "sm25")):
        start = H.mono_ns() + (8 * 10**9 if with_b and a_mode else 0)
        sync = ["--start-mono", str(start)] if start > H.mono_ns() else []
        tag = name.replace(" ", "_").replace("+", "").replace("-", "")
        procs = {}
        if with_b:
            procs["B"] = ctx.proc(f"{tag}.B", b_cmd + sync, 60)
        if a_mode:
            cmd = a_cmd + sync
            procs["A"] = ctx.proc(f"{tag}.A", ctx.sm(25, cmd) if a_mode == "sm25" else cmd, 60)
        run_all(procs.values())
        rows.append((name, b_rate(procs["B"]) if "B" in procs else None,
                     a_bw(procs["A"]) if "A" in procs else None,
                     {k: H.failure_reason(p) for k, p in procs.items() if p.rc != 0}))
        print(f"{name}: B {rows[-1][1]} kernels/s, A {rows[-1][2]} GB/s, failures {rows[-1][3]}",
              flush=True)
    alone = rows[0][1]
    H.report(f"{'case':18} {'B kernels/s':>12} {'B % alone':>10} {'A D2D GB/s':>11} {'A H2D GB/s':>11}")
    for name, b, a, fails in rows:
        pct = f"{100 * b / alone:.1f}" if b and alone else "-"
        b_txt = "-" if b is None else str(round(b))
        H.report(f"{name:18} {b_txt:>12} {pct:>10} "
                 f"{a[0] if a else '-':>11} {a[1] if a else '-':>11}"
                 + (f"  failed: {fails}" if fails else ""))
    b_lim = rows[3][1]
    if not (alone and b_lim):
        return False, "a run failed: " + "; ".join(
            f"{r[0]} {k}: {H.short(v, 80)}" for r in rows for k, v in r[3].items())
    pct = 100 * b_lim / alone
    unl = f"{100 * rows[2][1] / alone:.1f} %" if rows[2][1] else "?"
    ok = pct >= 70
    return ok, (f"B keeps {pct:.1f} % of its rate with A at --sm 25 (its share: 75 %, pass ≥ 70), "
                f"{unl} with A unlimited; A D2D GB/s alone / unlimited / --sm 25: "
                f"{'/'.join(str(r[2][0]) if r[2] else '?' for r in rows[1:])}")


# ---------------------------------------------------------------- demo3

def demo_verdict(line):
    """'--sm 25 (force)   3802.1   26.2%   25%   +1.2pp  ok' -> '--sm 25 (force) 26.2% (+1.2pp) ok'."""
    cols = re.split(r"\s{2,}", line.strip())
    if len(cols) < 4:
        return line.strip()
    value = cols[2].split()[0] if len(cols) > 4 and cols[2].split()[0].endswith("%") else cols[1]
    return f"{cols[0]} {value} ({cols[-2]}) {cols[-1]}"


def demo3(ctx):
    b = ctx.build
    p = ctx.proc("build", ["make", f"BUILD={b}", "all"], 170)
    if p.wait() != 0:
        return False, "make all failed: " + H.failure_reason(p)
    passes, lines = 0, []
    for i in range(1, 4):
        p = ctx.proc(f"demo{i}", ["make", f"BUILD={b}", "demo"], 90)
        p.wait()
        verdicts = [ln.strip() for ln in p.text().splitlines() if re.search(r"\s(ok|MISSED)$", ln)]
        missed = [v for v in verdicts if v.endswith("MISSED")]
        good = p.rc == 0 and verdicts and not missed
        passes += bool(good)
        brief = ", ".join(demo_verdict(v) for v in verdicts)
        lines.append(f"run {i}: {'PASS' if good else 'FAIL'} ({len(verdicts) - len(missed)}/"
                     f"{len(verdicts)} ok, rc {p.rc}) {brief}")
        if p.rc != 0:
            lines[-1] += " — " + H.failure_reason(p)
    for ln in lines:
        H.report(ln)
    return passes == 3, f"{passes}/3 runs with every verdict ok"


STEPS = {"capture_share": capture_share, "ctx_budget3": ctx_budget3, "ctx_kill24": ctx_kill24,
         "memcpy_interference": memcpy_interference, "demo3": demo3}


def main(argv):
    if len(argv) != 3 or argv[0] not in STEPS:
        print(__doc__, file=sys.stderr)
        return 2
    H.install_cleanup()
    ctx = Ctx(*argv)
    t = time.monotonic()
    try:
        ok, text = STEPS[argv[0]](ctx)
        verdict = "PASS" if ok else "FAIL"
    except Exception as e:  # a broken step is a result, not a crash of the whole run
        import traceback
        traceback.print_exc()
        verdict, text = "FAIL", f"step crashed: {type(e).__name__}: {H.short(str(e), 150)}"
    finally:
        shutil.rmtree(ctx.work, ignore_errors=True)
    print(f"SUMMARY {argv[0]} {verdict}: {text} [{time.monotonic() - t:.0f} s]", flush=True)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
