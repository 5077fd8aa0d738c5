"""nvidia-smi sampling shared by the GPU scripts in tests/gpu:

- sampled(fn): median SM clock and board power of the first visible GPU
  while fn runs (the DVFS probes);
- MemSampler: device memory that nvidia-smi charges to process trees, per
  GPU, sampled every ~0.1 s (the compatibility matrix, tests/gpu/capture_contexts).

For dry runs without a GPU, tests/gpu/selftest/bin/ (first on PATH) holds
an nvidia-smi over the simulated device's NVML (tests/gpu/selftest/run.sh).
"""
import os
import statistics
import subprocess
import threading
import time


def sampled(fn, period=0.2):
    """Runs fn(); returns (fn's result, median SM MHz, median W)."""
    dev = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            out = subprocess.run(["nvidia-smi", "-i", dev, "--query-gpu=clocks.sm,power.draw",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.strip()
            if out:
                c, p = out.splitlines()[0].split(",")
                samples.append((float(c), float(p)))
            time.sleep(period)

    t = threading.Thread(target=sample)
    t.start()
    try:
        result = fn()
    finally:
        stop.set()
        t.join()
    clk = statistics.median(c for c, _ in samples) if samples else float("nan")
    pw = statistics.median(p for _, p in samples) if samples else float("nan")
    return result, clk, pw


def query_apps(timeout=5.0):
    """One `nvidia-smi --query-compute-apps` call: [(pid, gpu_uuid, used MiB
    or None where nvidia-smi printed N/A)], or None if nvidia-smi failed."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    apps = []
    for line in r.stdout.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) != 3 or not f[0].isdigit():
            continue  # "No running processes found" and the like
        try:
            mib = float(f[2])
        except ValueError:
            mib = None
        apps.append((int(f[0]), f[1], mib))
    return apps


def gpu_uuids(timeout=10.0):
    """UUIDs of the physical GPUs in nvidia-smi's order ([] if it fails)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [x.strip() for x in r.stdout.splitlines() if x.strip()] if r.returncode == 0 else []


def process_tree(roots):
    """The PIDs in roots and all their descendants, now (read from /proc)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(children.get(p, ()))
    return seen


class MemSampler:
    """Samples nvidia-smi's per-process memory in a thread (`with
    MemSampler({"run": pid}) as s:`, or start()/stop()). A sample sums
    used_memory per GPU over the processes of each named tree (its root
    PIDs and their descendants at that moment), and over every listed
    process. Roots can be added while it runs (add_root)."""

    def __init__(self, roots=None, period=0.1):
        self.roots = {k: list(v) if isinstance(v, (list, tuple)) else [v]
                      for k, v in (roots or {}).items()}
        self.period = period
        self.samples = []  # (monotonic s, {tree: {uuid: MiB}}, {uuid: MiB over all processes})
        self.failed = 0    # nvidia-smi calls that failed
        self.na = 0        # process entries without a number (N/A)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def add_root(self, name, pid):
        with self._lock:
            self.roots.setdefault(name, []).append(pid)

    def sample(self):
        apps = query_apps()
        if apps is None:
            self.failed += 1
            return None
        with self._lock:
            roots = {k: list(v) for k, v in self.roots.items()}
        trees = {k: process_tree(v) for k, v in roots.items()}
        per, total = {k: {} for k in trees}, {}
        for pid, uuid, mib in apps:
            if mib is None:
                self.na += 1
                continue
            total[uuid] = total.get(uuid, 0.0) + mib
            for k, pids in trees.items():
                if pid in pids:
                    per[k][uuid] = per[k].get(uuid, 0.0) + mib
        s = (time.monotonic(), per, total)
        with self._lock:
            self.samples.append(s)
        return s

    def _run(self):
        while not self._stop.is_set():
            t = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.period - (time.monotonic() - t)))

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def peak(self, tree=None, uuid=None):
        """Largest sampled sum of one GPU (uuid, or the fullest one) over one
        tree (tree=None: over every listed process); None without samples."""
        best = None
        for _, per, total in list(self.samples):
            by_gpu = total if tree is None else per.get(tree, {})
            v = by_gpu.get(uuid, 0.0) if uuid else max(by_gpu.values(), default=0.0)
            best = v if best is None else max(best, v)
        return best

    def peak_sum(self, trees):
        """Largest sampled sum over several trees together (per GPU)."""
        best = None
        for _, per, _ in list(self.samples):
            gpus = {}
            for t in trees:
                for u, v in per.get(t, {}).items():
                    gpus[u] = gpus.get(u, 0.0) + v
            v = max(gpus.values(), default=0.0)
            best = v if best is None else max(best, v)
        return best
