#!/usr/bin/env python3
"""Compatibility matrix of real CUDA programs under cushare (docs/compat.md).

    matrix.py run BUILD_DIR OUT_DIR [ROW...]   run rows (default: all but
        mps_underneath, which run.sh wraps in an MPS daemon), merge them
        into OUT/matrix.csv, write OUT/compat.md, print the table
    matrix.py report DEST_DIR OUT_DIR...       merge the matrix.csv of several
        runs (later ones win) into DEST_DIR/matrix.csv and DEST_DIR/compat.md
        (no GPU needed; the OUT_DIRs may be read-only)
    matrix.py rows                             list the rows

Every row runs in five configurations: native, `cushare run` (no limit),
--mem M, --sm S --policy force, and both; each under a hard timeout, with
nvidia-smi's per-process memory of the run's process tree sampled every
~0.1 s. MATRIX_DEADLINE (epoch seconds) stops starting runs that would end
after it (they are recorded as skipped) and cuts the timeout of the last
ones to end at most 30 s after it; the table is written either way.
"""
import csv
import datetime
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

HERE = H.HERE
PY = os.environ.get("MATRIX_PYTHON", sys.executable)
CONFIGS = ("native", "cushare", "mem", "sm", "mem+sm")
FIELDS = ("row", "config", "status", "same_output", "rate", "pct_native", "peak_mib",
          "budget_mib", "note", "unit", "checksum")


@dataclass
class Row:
    name: str
    script: str
    what: str
    mem: str = "2GiB"            # --mem value
    budget_mib: int = 2048       # per device
    sm: int = 30
    args: tuple = ()
    timeout: int = 60            # per run
    first_timeout: int = 0       # the native run, when it pays for compilation
    est: int = 10                # expected seconds per configuration
    kind: str = "single"         # single | ddp | tenants4 | mps
    why_budget: str = ""


ROWS = [
    Row("torch_eager", "torch_eager.py", "MLP training steps, bf16 autocast, AdamW",
        why_budget="context ~0.5 GiB + weights/optimizer/activations ~0.2 GiB"),
    Row("torch_graph", "torch_graph.py", "CUDA graph capture + replay, 4 × Linear(2048), batch 8, fp16",
        why_budget="context ~0.5 GiB + 32 MiB of weights"),
    Row("torch_compile", "torch_compile.py",
        'torch.compile(mode="reduce-overhead") (inductor + cudagraph trees)', mem="3GiB",
        budget_mib=3072, first_timeout=240, est=15,
        why_budget="context ~0.5 GiB + cudagraph pool; compile workers touch no GPU memory"),
    Row("hf_llama", "hf_llama.py", "transformers Llama ~0.85 B (bf16, random), greedy generate 32 tokens, dynamic cache",
        mem="4GiB", budget_mib=4096, timeout=120, est=16,
        why_budget="1.6 GiB of bf16 weights + context ~0.5 GiB + activations"),
    Row("hf_llama_static", "hf_llama.py", "the same with cache_implementation=\"static\"",
        mem="4GiB", budget_mib=4096, args=("--static",), timeout=120, est=16,
        why_budget="as hf_llama; the static cache is ~3 MiB"),
    Row("torch_expandable", "torch_expandable.py",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (VMM), varying tensors + matmuls",
        mem="3GiB", budget_mib=3072, why_budget="context ~0.5 GiB + at most 1.2 GiB live"),
    Row("jax_jit", "jax_jit.py", "jax.jit matmul + tanh, fp32; default preallocation (75 % of the view)",
        mem="4GiB", budget_mib=4096, timeout=90, est=12,
        why_budget="XLA preallocates 75 % of the 4 GiB view (3 GiB) + context ~0.5 GiB"),
    Row("cupy_rawkernel", "cupy_rawkernel.py", "CuPy RawKernel saxpy over 16M fp32",
        est=8, why_budget="context ~0.5 GiB + 128 MiB"),
    Row("triton_kernel", "triton_kernel.py", "Triton vector add (16M) + row softmax (4096 × 1024)",
        why_budget="context ~0.5 GiB + 0.3 GiB"),
    Row("nccl_ddp", "nccl_ddp.py", "DDP on 2 GPUs, 2 processes, NCCL (NVLS off)",
        mem="8GiB,8GiB", budget_mib=8192, timeout=120, est=18, kind="ddp",
        why_budget="per device: context ~0.5 GiB + NCCL buffers + model"),
    Row("graph_tenants4", "torch_graph.py", "4 concurrent torch_graph tenants, each its own slice",
        sm=25, timeout=90, est=16, kind="tenants4",
        why_budget="per tenant, as torch_graph"),
    Row("mps_eager", "torch_eager.py", "torch_eager under an MPS daemon", est=10, kind="mps",
        why_budget="as torch_eager"),
    Row("mps_graph", "torch_graph.py", "torch_graph under an MPS daemon", est=10, kind="mps",
        why_budget="as torch_graph"),
]
BY_NAME = {r.name: r for r in ROWS}
ALIASES = {"mps_underneath": ["mps_eager", "mps_graph"]}


def flags(row, cfg):
    mem, sm = ["--mem", row.mem], ["--sm", str(row.sm), "--policy", "force"]
    return {"native": None, "cushare": [], "mem": mem, "sm": sm, "mem+sm": mem + sm}[cfg]


def config_label(row, cfg):
    return {"native": "native", "cushare": "cushare run", "mem": f"--mem {row.mem}",
            "sm": f"--sm {row.sm} force", "mem+sm": f"--mem {row.mem} --sm {row.sm} force",
            "solo": "one tenant alone, native"}[cfg]


class Ctx:
    def __init__(self, build, out):
        self.build, self.out = os.path.abspath(build), os.path.abspath(out)
        self.cushare = os.path.join(self.build, "cushare")
        self.logs = os.path.join(self.out, "logs")
        self.deadline = float(os.environ.get("MATRIX_DEADLINE", "0")) or time.time() + 500
        cache = os.environ.get("CACHE_DIR") or os.path.join(self.out, "cache")
        self.env = H.clean_env(
            CUDA_VISIBLE_DEVICES=os.environ.get("MATRIX_GPU", "0"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
            TRITON_CACHE_DIR=os.path.join(cache, "triton"),
            CUPY_CACHE_DIR=os.path.join(cache, "cupy"),
            HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1, HF_HUB_DISABLE_TELEMETRY=1,
            TOKENIZERS_PARALLELISM="false", NCCL_NVLS_ENABLE=0,
            TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1)
        os.makedirs(self.logs, exist_ok=True)

    def left(self):
        return self.deadline - time.time()


def result(row, cfg, status, note="", **kw):
    r = {k: "" for k in FIELDS}
    r.update(row=row.name, config=cfg, status=status, note=note)
    r.update({k: v for k, v in kw.items() if v is not None})
    return r


def command(ctx, row, cfg, extra=()):
    base = [PY, "-u", os.path.join(HERE, row.script), *row.args, *extra]
    f = flags(row, cfg)
    return base if f is None else [ctx.cushare, "run", *f, "--", *base]


def judge(row, cfg, parsed_list, procs, peak, budget, ref, notes):
    """Status, same_output and the note of one configuration's processes."""
    bad = [p for p, q in zip(procs, parsed_list) if p.rc != 0 or q["rate"] is None]
    if bad:
        return "FAIL", "n/a", H.failure_reason(bad[0])
    problems = []
    if cfg == "solo" or (cfg == "native" and row.kind != "tenants4"):
        same = "ref"
    elif ref is None:
        same = "n/a"
    else:
        each = [H.same_output(ref["checksum"], q["checksum"], q["tol"] or ref["tol"])
                for q in parsed_list]
        same = next((s for s in ("NO", "n/a") if s in each), None) or \
            next((s for s in each if s != "yes"), "yes")
    if same == "NO":
        problems.append("output differs")
    if budget and peak is not None and peak > budget:
        problems.append(f"nvidia-smi peak {peak:.0f} MiB > budget {budget} MiB")
    if budget:
        for q in parsed_list:
            if q["view"] and abs(q["view"][0] - budget) > 1:
                problems.append(f"view {q['view'][0]:.0f} MiB ≠ budget")
                break
    return ("FAIL" if problems else "ok"), same, "; ".join(problems + notes)


def peak_note(sampler, trees):
    """The peak over the trees (per tenant: the largest), and a note when
    nvidia-smi showed nothing for them."""
    if not sampler.samples:
        return None, [f"no nvidia-smi sample ({sampler.failed} failed calls)"]
    peaks = [sampler.peak(t) for t in trees]
    peak = max(p for p in peaks if p is not None) if peaks else None
    notes = []
    if not peak:
        notes.append(f"nvidia-smi listed no memory for the run's processes "
                     f"(all processes: {H.fmt_mib(sampler.peak())}; N/A entries: {sampler.na})")
        peak = None
    if len(trees) > 1 and peak:
        notes.append(f"peak per tenant; all {len(trees)} together "
                     f"{H.fmt_mib(sampler.peak_sum(trees))}")
    return peak, notes


def run_config(ctx, row, cfg, ref, solo_rate=None):
    """One configuration of one row: returns (result dict, parsed output of
    the first process)."""
    n = 4 if row.kind == "tenants4" and cfg != "solo" else 1
    timeout = row.first_timeout if (cfg == "native" and row.first_timeout) else row.timeout
    est = min(timeout, row.est * (3 if cfg == "native" and row.first_timeout else 1))
    if ctx.left() < est:
        return result(row, cfg, "SKIP", "time budget of this invocation spent: rerun this row"), None
    timeout = min(timeout, int(ctx.left()) + 30)  # never far past the deadline
    env = dict(ctx.env)
    if row.kind == "ddp":
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("MATRIX_GPUS_DDP", "0,1")
    extra = []
    if n > 1:
        bar = os.path.join(ctx.out, "tmp", f"barrier.{row.name}.{cfg}")
        shutil.rmtree(bar, ignore_errors=True)
        extra = ["--barrier", bar, "--tenants", str(n)]
    real_cfg = "native" if cfg == "solo" else cfg
    sampler = H.MemSampler().start()
    procs = []
    for i in range(n):
        tag = f".t{i}" if n > 1 else ""
        p = H.Proc(command(ctx, row, real_cfg, extra),
                   os.path.join(ctx.logs, f"{row.name}.{cfg}{tag}.log"), timeout, env=env)
        sampler.add_root(f"t{i}", p.pid)
        procs.append(p)
    for p in procs:
        p.wait()
    sampler.stop()
    parsed = [H.parse(p.text()) for p in procs]
    budget = row.budget_mib if "mem" in cfg else 0
    peak, notes = peak_note(sampler, [f"t{i}" for i in range(n)])
    for q in parsed[:1]:
        notes += q["notes"]
    if n == 1 and parsed[0]["view"] and not budget:
        notes.append(f"view {parsed[0]['view'][0]:.0f} MiB")
    status, same, note = judge(row, cfg, parsed, procs, peak, budget, ref, notes)
    rates = [q["rate"] for q in parsed]
    rate = sum(rates) if all(r is not None for r in rates) else None
    if n > 1 and rate is not None:
        note = "; ".join(x for x in (note, "tenants " + " / ".join(f"{r:.4g}" for r in rates)) if x)
    if row.kind == "tenants4":
        base = solo_rate
    else:
        base = rate if cfg == "native" else (ref["rate"] if ref else None)
    pct = f"{100 * rate / base:.1f}" if rate is not None and base else None
    r = result(row, cfg, status, note, same_output=same,
               rate=f"{rate:.6g}" if rate is not None else None, pct_native=pct,
               peak_mib=f"{peak:.0f}" if peak is not None else None,
               budget_mib=str(budget) if budget else None, unit=parsed[0]["unit"],
               checksum=parsed[0]["checksum"])
    elapsed = max(getattr(p, "elapsed", 0) for p in procs)
    print(f"  {row.name:17} {cfg:8} {status:4} {elapsed:5.1f} s  rate {r['rate'] or '-'} "
          f"{r['unit']}  {pct or '-'} %  peak {r['peak_mib'] or '-'} MiB  {H.short(note, 90)}",
          flush=True)
    return r, parsed[0] if status != "SKIP" else None


def run_row(ctx, row):
    if row.kind == "ddp":
        n = H.gpu_count()
        if n < 2:
            return [result(row, c, "SKIP", f"needs 2 GPUs, nvidia-smi shows {n}") for c in CONFIGS]
    if row.kind == "mps" and (os.environ.get("MATRIX_MPS_ERROR")
                              or not os.environ.get("CUDA_MPS_PIPE_DIRECTORY")):
        why = os.environ.get("MATRIX_MPS_ERROR") or "no MPS daemon (run.sh starts one)"
        return [result(row, c, "SKIP", "MPS: " + why) for c in CONFIGS]
    out, ref, solo = [], None, None
    if row.kind == "tenants4":
        r, solo_parsed = run_config(ctx, row, "solo", None)
        out.append(r)
        if r["status"] == "ok":
            solo = float(r["rate"])
            ref = solo_parsed
    for cfg in CONFIGS:
        r, parsed = run_config(ctx, row, cfg, ref, solo)
        if cfg == "native" and row.kind != "tenants4" and r["status"] == "ok":
            ref = parsed
        if row.kind == "mps" and cfg == "native":
            r["note"] = "; ".join(x for x in (r["note"], mps_server_note()) if x)
        out.append(r)
    return out


def mps_server_note():
    try:
        s = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n",
                           capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "MPS: get_server_list failed"
    return f"MPS server pid {' '.join(s)}" if s else "MPS: no server was started (not under MPS?)"


# ---------------------------------------------------------------- tables

def load_csv(path):
    try:
        with open(path, newline="") as fh:
            return [dict(r) for r in csv.DictReader(fh)]
    except OSError:
        return []


def merge(old, new):
    order = {r.name: i for i, r in enumerate(ROWS)}
    cfg_order = {c: i for i, c in enumerate(("solo",) + CONFIGS)}
    rows = {(r["row"], r["config"]): r for r in old}
    rows.update({(r["row"], r["config"]): r for r in new})
    return sorted(rows.values(), key=lambda r: (order.get(r["row"], 99),
                                                 cfg_order.get(r["config"], 99)))


def write_csv(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})


def human_rate(rate, unit):
    x = float(rate)
    s = f"{x / 1000:.1f}k" if x >= 10000 else f"{x:.3g}" if x < 100 else f"{x:.0f}"
    return f"{s} {unit}".strip()


def cell(r):
    if r is None:
        return "·"
    peak = H.fmt_mib(float(r["peak_mib"])) if r["peak_mib"] else "mem ?"
    if r["status"] == "SKIP":
        return "– " + H.short(r["note"], 60)
    if r["status"] != "ok":
        reason = r["note"].split("; ")[0] if r["note"] else "failed"
        pct = f"{float(r['pct_native']):.0f} %, " if r["pct_native"] else ""
        detail = f" ({pct}{peak})" if r["rate"] else ""
        return "✗ " + H.short(reason, 90) + detail
    if r["config"] == "solo" or (r["config"] == "native" and r["row"] != "graph_tenants4"):
        return f"✓ {human_rate(r['rate'], r['unit'])} {peak}"
    pct = f"{float(r['pct_native']):.0f} %" if r["pct_native"] else "? %"
    tol = " ≈" if r["same_output"].startswith("yes (") else ""
    return f"✓{tol} {pct} {peak}"


def row_notes(row, by):
    notes = []
    nat = by.get("native") or {}
    if row.kind == "tenants4" and by.get("solo", {}).get("rate"):
        notes.append(f"one tenant alone {human_rate(by['solo']['rate'], by['solo']['unit'])}; "
                     f"% = aggregate of 4 / that")
    elif nat.get("rate"):
        notes.append(f"native {human_rate(nat['rate'], nat['unit'])}")
    if any(r["same_output"].startswith("yes (") for r in by.values()):
        notes.append("≈ output equal within tolerance")
    if row.name == "jax_jit":
        notes.append("JAX default preallocation kept (75 % of what the device reports: of the slice under --mem)")
    return "; ".join(notes)


def compat_table(rows, env_line=""):
    by = {}
    for r in rows:
        by.setdefault(r["row"], {})[r["config"]] = r
    lines = []
    if env_line:
        lines += [env_line, ""]
    lines += ["| workload | native | `cushare run` | `--mem M` | `--sm S --policy force` | "
              "`--mem M --sm S` | M, S | notes |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in ROWS:
        b = by.get(row.name)
        if not b:
            continue
        cells = [cell(b.get(c)) for c in CONFIGS]
        ms = f"{row.mem.replace(',', ' + ')}, {row.sm}"
        lines.append(f"| {row.name} | " + " | ".join(c.replace("|", "\\|") for c in cells) +
                     f" | {ms} | {row_notes(row, b)} |")
    lines += ["", "Cells: ✓ = ran, output equal to native, nvidia-smi peak ≤ budget, view = "
              "budget under --mem; % = throughput vs native (vs one tenant alone for "
              "graph_tenants4); memory = peak nvidia-smi sum over the run's processes "
              "(per tenant / per GPU); ✗ = the reason; – = skipped; · = not run."]
    return "\n".join(lines) + "\n"


def env_line(out):
    try:
        with open(os.path.join(out, "env.txt")) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def write_env(ctx):
    def q(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=15,
                                  cwd=H.ROOT).stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            return "?"
    gpu = q(["nvidia-smi", "--query-gpu=name,driver_version",
             "--format=csv,noheader"])
    line = (f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
            f"{H.gpu_count()} × {gpu}, cushare {q(['git', 'rev-parse', '--short', 'HEAD'])}.")
    with open(os.path.join(ctx.out, "env.txt"), "w") as fh:
        fh.write(line + "\n")


def finish(out, rows_now):
    """Writes matrix.csv and compat.md; prints the table and the failures."""
    path = os.path.join(out, "matrix.csv")
    rows = merge(load_csv(path), rows_now)
    write_csv(path, rows)
    table = compat_table(rows, env_line(out))
    with open(os.path.join(out, "compat.md"), "w") as fh:
        fh.write(table)
    if os.environ.get("MATRIX_PRINT_TABLE", "1") != "0":
        print("\n==== compat.md (" + os.path.join(out, "compat.md") + ")\n" + table)
    bad = [r for r in rows_now if r["status"] != "ok"]
    if bad:
        print("==== not ok")
        for r in bad:
            print(f"  {r['row']} / {r['config']}: {r['status']} {H.short(r['note'], 200)}")
    return rows


def expand(names):
    out = []
    for n in names:
        for m in ALIASES.get(n, [n]):
            if m not in BY_NAME:
                sys.exit(f"matrix.py: unknown row {m} (see: matrix.py rows)")
            out.append(BY_NAME[m])
    return out


def main(argv):
    if len(argv) >= 1 and argv[0] == "rows":
        for r in ROWS:
            print(f"{r.name:17} --mem {r.mem:10} --sm {r.sm}  {r.what}\n{'':19}budget: {r.why_budget}")
        print("mps_underneath = mps_eager + mps_graph")
        return 0
    if len(argv) >= 3 and argv[0] == "report":
        dest, rows, envs = argv[1], [], []
        for d in argv[2:]:
            rows = merge(rows, load_csv(os.path.join(d, "matrix.csv")))
            line = env_line(d)
            if line and line not in envs:
                envs.append(line)
        os.makedirs(dest, exist_ok=True)
        with open(os.path.join(dest, "env.txt"), "w") as fh:
            fh.write("\n".join(envs) + "\n")
        finish(dest, rows)
        return 0
    if len(argv) < 3 or argv[0] != "run":
        print(__doc__, file=sys.stderr)
        return 2
    ctx = Ctx(argv[1], argv[2])
    rows = expand(argv[3:]) if argv[3:] else [r for r in ROWS if r.kind != "mps"]
    H.install_cleanup()
    write_env(ctx)
    print(f"==== matrix: {' '.join(r.name for r in rows)} ({ctx.left():.0f} s of budget)",
          flush=True)
    done, csv_path = [], os.path.join(ctx.out, "matrix.csv")
    try:
        for row in rows:
            new = run_row(ctx, row)
            done += new
            write_csv(csv_path, merge(load_csv(csv_path), new))  # kept if we get killed
    finally:
        finish(ctx.out, done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
