"""Runner-side helpers shared by tests/gpu/workloads/matrix.py and
tests/gpu/capture_contexts/steps.py: starting commands under a hard timeout with
their output in a log file, killing whatever is left on the way out,
reading the workloads' RATE/CHECKSUM/VIEW/NOTE lines (common.py), and the
environment a run gets. nvidia-smi sampling lives in tests/gpu/smi_sampler.py."""
import atexit
import os
import re
import shlex
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(GPU_DIR))
sys.path.insert(0, GPU_DIR)
from smi_sampler import MemSampler, gpu_uuids, process_tree, query_apps  # noqa: E402,F401

MiB = 1 << 20
_live = set()


class Proc:
    """A command started in its own session under `timeout -k 5 T`, stdout
    and stderr into `log` (first line: the command). wait() never blocks
    longer than T + 20 s; kill() ends its whole process group."""

    def __init__(self, cmd, log, timeout_s, env=None, cwd=None):
        self.cmd, self.log, self.timeout_s = [str(c) for c in cmd], log, timeout_s
        self.rc = None
        os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
        self._fh = open(log, "w")
        self._fh.write("$ " + shlex.join(self.cmd) + "\n")
        self._fh.flush()
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(["timeout", "-k", "5", f"{timeout_s:g}"] + self.cmd,
                                  stdout=self._fh, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                  start_new_session=True)
        _live.add(self)

    @property
    def pid(self):
        return self.p.pid

    def running(self):
        return self.p.poll() is None

    def wait(self):
        if self.rc is None:
            try:
                self.rc = self.p.wait(timeout=self.timeout_s + 20)
            except subprocess.TimeoutExpired:
                self.kill()
                self.rc = self.p.wait()
            self.elapsed = time.monotonic() - self.t0
            self._fh.close()
            _live.discard(self)
        return self.rc

    def kill(self, sig=signal.SIGKILL):
        try:
            os.killpg(self.p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def text(self):
        try:
            with open(self.log, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    @property
    def timed_out(self):
        return self.rc in (124, 137)


def _cleanup(*_):
    for p in list(_live):
        p.kill()
    _live.clear()


def install_cleanup():
    """On exit, SIGTERM, SIGINT or SIGHUP: kill every Proc still running
    (then SIGTERM & co. end the program with 128 + the signal)."""
    atexit.register(_cleanup)

    def on_signal(sig, _frame):
        _cleanup()
        raise SystemExit(128 + sig)  # unwinds: finally blocks still write results

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)


def parse(text):
    """The RATE/CHECKSUM/VIEW/NOTE lines of a workload's output."""
    r = {"rate": None, "unit": "", "checksum": None, "tol": None, "view": None, "notes": []}
    for line in text.splitlines():
        f = line.split()
        try:
            if len(f) >= 3 and f[0] == "RATE":
                r["rate"], r["unit"] = float(f[1]), " ".join(f[2:])
            elif len(f) >= 2 and f[0] == "CHECKSUM":
                r["checksum"] = f[1]
                if len(f) >= 4 and f[2] == "TOL":
                    r["tol"] = float(f[3])
            elif len(f) >= 3 and f[0] == "VIEW":
                r["view"] = (float(f[1]), float(f[2]))
            elif f and f[0] == "NOTE":
                r["notes"].append(" ".join(f[1:]))
        except ValueError:
            continue
    return r


def same_output(ref, got, tol=None):
    """'yes' (identical), 'yes (±tol)' (floats within tol), 'NO', or 'n/a'."""
    if ref is None or got is None:
        return "n/a"
    if ref == got:
        return "yes"
    if tol:
        try:
            a, b = float(ref), float(got)
            if abs(a - b) <= tol * max(abs(a), abs(b), 1e-30):
                return f"yes (±{tol:g})"
        except ValueError:
            pass
    return "NO"


_ERR = re.compile(r"CUDA_ERROR_\w+|Error|ERROR|error:|Exception|refused|out of memory|"
                  r"Killed|Segmentation|Aborted|cannot|not found|failed", re.I)


def short(text, n=110):
    text = " ".join(text.replace("|", "/").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def failure_reason(proc):
    """One short line: why a Proc that ended badly failed."""
    lines = [ln.strip() for ln in proc.text().splitlines()[1:] if ln.strip()]
    if proc.timed_out:
        hint = next((ln for ln in reversed(lines) if _ERR.search(ln)), "")
        return short(f"timed out after {proc.timeout_s:g} s" + (f" ({hint})" if hint else ""))
    for ln in reversed(lines):
        if _ERR.search(ln) and not ln.startswith("Traceback") and not ln.startswith("File "):
            return short(f"exit {proc.rc}: {ln}")
    return short(f"exit {proc.rc}: {lines[-1]}" if lines else f"exit {proc.rc}, no output")


_OURS = ("CUDA_DEVICE_", "CUSHARE_", "LIBVGPU_")


def clean_env(**extra):
    """os.environ without any cushare contract or preload (so native is
    native and every `cushare run` starts its own slice), plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_OURS) and k not in ("GPU_CORE_UTILIZATION_POLICY",
                                                    "CUDA_TASK_PRIORITY")}
    pre = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "libcushare" not in p]
    if pre:
        env["LD_PRELOAD"] = ":".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def report(line=""):
    """A line for the step's compact report (run.sh shows these)."""
    print("» " + line, flush=True)


def fmt_mib(mib):
    if mib is None:
        return "? MiB"
    return f"{mib:.0f} MiB" if mib < 1000 else f"{mib / 1024:.1f} GiB"


def gpu_count():
    return len(gpu_uuids())
