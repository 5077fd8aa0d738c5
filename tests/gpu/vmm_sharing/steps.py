#!/usr/bin/env python3
"""VMM-sharing acceptance steps (run through tests/gpu/vmm_sharing/run.sh):

    steps.py STEP BUILD_DIR OUT_DIR

expandable    PyTorch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, under
              `cushare run --mem 4GiB`: OOM at the budget (view total 4096 MiB,
              ≥ 3072 MiB of tensors), refill after empty_cache, a tensor larger than
              the slice refused; nvidia-smi ≤ 4096 + 518 MiB (one context) at every
              sample (and whether ≤ 4096)
vmm_pair      vmm_share.c: creator and importer of one tenant share 1 GiB over a unix
              socket; the creator exits first, the importer checks the data; the
              ledger still holds the 1 GiB until the importer releases it (drop of
              1024 MiB ± 2); also prints the exported fd's (dev, inode) for a second
              export and another allocation (the driver's: one inode for all, which
              cushare no longer keys on: reported, not judged); FAIL if the library
              warned that kcmp(2) is refused (seccomp: imports would be over-counted)
fd_late       the creator lets go of everything before it sends the fd and exits (the
              fd alone keeps the memory: the driver still imports it); PASS if the
              import succeeds, the ledger holds the 1 GiB while the
              importer holds it (drop 1024 ± 2 at release) and nothing beyond
              contexts after (≤ 2 MiB)
torch_mp      torch.multiprocessing passes a 512 MiB CUDA tensor to a spawned child of
              the same slice: data both ways; ledger bytes beyond contexts = both
              processes' own reserved bytes ± 2 MiB (the shared 512 MiB charged once)
cross_tenant  creator in tenant A, importer in tenant B (two ledgers): after the
              creator exits, the 1 GiB is charged to B (docs/accounting.md, "Across
              tenants"), and to nobody after B releases it

Prints details, lines starting with "» " (the compact report), and last
`SUMMARY <step> PASS|FAIL: <one line>`. Sub-run logs go to OUT_DIR/<step>/.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import smi_sampler  # noqa: E402

MiB = 1 << 20
PY = sys.executable


def report(line):
    print("» " + line, flush=True)


class Step:
    def __init__(self, name, build, out):
        self.name, self.build = name, os.path.abspath(build)
        self.cushare = os.path.join(self.build, "cushare")
        self.vmm_share = os.path.join(self.build, "vmm_share")
        self.dir = os.path.join(os.path.abspath(out), name)
        os.makedirs(self.dir, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix=f"cushare-{name}.")
        self.env = dict(os.environ)
        for k in list(self.env):
            if k.startswith(("CUDA_DEVICE_", "CUSHARE_", "LD_PRELOAD")):
                del self.env[k]
        self.env.setdefault("CUDA_VISIBLE_DEVICES", os.environ.get("VMM_SHARING_GPU", "0"))

    def run_in(self, mem, ledger, cmd):
        return [self.cushare, "run", "--mem", mem, "--ledger", ledger, "--"] + cmd

    def spawn(self, name, cmd, stdin=None, **env):
        e = dict(self.env)
        e.update(env)
        log = open(os.path.join(self.dir, name + ".log"), "w")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=stdin, env=e,
                             text=True, bufsize=1)
        p.lines, p.name = [], name
        return p

    def ledger(self, path):
        """(used, sum of context charges of live slots) in MiB, or (None, None)."""
        try:
            r = subprocess.run([self.cushare, "status", "--json", path], capture_output=True,
                               text=True, timeout=30, env=self.env)
            d = json.loads(r.stdout)
            live = [p for p in d["processes"] if p["state"] == "live"]
            ctx = sum(p["bytes"]["dev0"]["context"] for p in live)
            return d["devices"][0]["used"] / MiB, ctx / MiB
        except (ValueError, KeyError, IndexError, OSError, subprocess.TimeoutExpired):
            return None, None


def read_until(p, prefix, timeout):
    """Reads p's stdout lines until one starts with prefix; returns it or None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = p.stdout.readline()
        if not line:
            return None
        line = line.rstrip("\n")
        p.lines.append(line)
        print(f"  [{p.name}] {line}", flush=True)
        if line.startswith(prefix):
            return line
    return None


def finish(p, timeout=60):
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    for line in (out or "").splitlines():
        p.lines.append(line)
        print(f"  [{p.name}] {line}", flush=True)
    return p.returncode


def result(lines):
    for line in reversed(lines):
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    return {}


# ------------------------------------------------------------------ expandable

def expandable(s):
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    with smi_sampler.MemSampler() as smp:
        p = s.spawn("torch", s.run_in("4GiB", os.path.join(s.work, "l"),
                                      [PY, "-u", os.path.join(HERE, "torch_expandable.py")]),
                    **env)
        smp.add_root("run", p.pid)
        rc = finish(p, 150)
    r = result(p.lines)
    peak = max((sum(per.get("run", {}).values()) for _, per, _ in smp.samples), default=None)
    g = lambda k: int(r.get(k, -1))  # noqa: E731
    ok = (rc == 0 and g("total_mib") == 4096 and g("oom1") == 1 and g("first_mib") >= 3072
          and g("refill_mib") >= g("first_mib") - 256 and g("big_refused") == 1
          and g("data_ok") == 1 and peak is not None and peak <= 4096 + 518)
    line = (f"view total {g('total_mib')} MiB; OOM after {g('first_mib')} MiB of tensors; "
            f"after freeing half ({g('kept_mib')} kept) refilled to {g('refill_mib')} MiB; "
            f"oversized tensor refused: {bool(g('big_refused'))}; nvidia-smi max "
            f"{peak if peak is None else round(peak)} MiB over {len(smp.samples)} samples "
            f"(≤ 4096+518: {'yes' if peak is not None and peak <= 4614 else 'NO'}; ≤ 4096: "
            f"{'yes' if peak is not None and peak <= 4096 else 'no'}); rc {rc}")
    report(line)
    return ok, line


# ------------------------------------------------------------------ vmm_pair

def pair(s, ledger_a, ledger_b, mib=1024, late=False):
    """Creator in ledger_a (with late: it lets go before sending), holding
    importer in ledger_b. Returns a dict of what was measured."""
    sock = os.path.join(s.work, "share.sock")
    m = {}
    c = s.spawn("creator", s.run_in("3GiB", ledger_a, [s.vmm_share, "creator", sock, str(mib)]
                                    + (["late"] if late else [])))
    i = s.spawn("importer", s.run_in("3GiB", ledger_b, [s.vmm_share, "importer", sock, str(mib),
                                                        "--hold"]), stdin=subprocess.PIPE)
    with smi_sampler.MemSampler({"importer": i.pid, "creator": c.pid}) as smp:
        m["creator_rc"] = finish(c, 90)
        m["fdid"] = next((x[13:] for x in c.lines if x.startswith("CREATOR FDID")), "not printed")
        m["holding"] = read_until(i, "IMPORTER HOLDING", 90)
        m["import"] = next((x for x in i.lines if x.startswith("IMPORTER import")), "none")
        m["data"] = next((x for x in i.lines if x.startswith("IMPORTER DATA")), "none")
        time.sleep(0.5)
        m["a_holding"], m["a_ctx"] = s.ledger(ledger_a)
        m["b_holding"], m["b_ctx"] = s.ledger(ledger_b)
        i.stdin.write("release\n")
        i.stdin.flush()
        m["released"] = read_until(i, "IMPORTER RELEASED", 60)
        m["a_released"], _ = s.ledger(ledger_a)
        m["b_released"], m["b_ctx_released"] = s.ledger(ledger_b)
        i.stdin.write("exit\n")
        i.stdin.flush()
        m["importer_rc"] = finish(i, 60)
    m["smi_importer_max"] = max((sum(per.get("importer", {}).values())
                                 for _, per, _ in smp.samples), default=None)
    print(f"measured: {m}", flush=True)
    return m


def vmm_pair(s):
    ledger = os.path.join(s.work, "tenant.ledger")
    m = pair(s, ledger, ledger)
    drop = None if None in (m["b_holding"], m["b_released"]) else m["b_holding"] - m["b_released"]
    ok = (m["creator_rc"] == 0 and m["importer_rc"] == 0 and m["holding"] is not None
          and m["data"] == "IMPORTER DATA ok" and drop is not None and abs(drop - 1024) <= 2)
    line = (f"creator exited (rc {m['creator_rc']}); importer {m['data'][9:]}; ledger "
            f"{m['b_holding']} MiB while the importer held it (contexts {m['b_ctx']}), "
            f"{m['b_released']} after release: drop {drop} MiB (want 1024 ± 2); nvidia-smi "
            f"importer max {m['smi_importer_max']} MiB; importer rc {m['importer_rc']}")
    report(line)
    report(f"exported fd identity (the driver's; cushare keys descriptions): {m['fdid']}")
    refused = kcmp_refused(s)
    ok &= not refused
    return ok, line + ("; KCMP REFUSED (seccomp): imports over-counted" if refused else "")


def kcmp_refused(s):
    """Whether the library warned that kcmp(2) is refused (a seccomp filter):
    then fd imports cannot be matched and are charged to the importer too."""
    for name in ("creator", "importer"):
        try:
            with open(os.path.join(s.dir, name + ".log")) as f:
                if "kcmp(2) is not permitted" in f.read():
                    return True
        except OSError:
            pass
    return False


def fd_late(s):
    ledger = os.path.join(s.work, "tenant.ledger")
    m = pair(s, ledger, ledger, late=True)
    drop = None if None in (m["b_holding"], m["b_released"]) else m["b_holding"] - m["b_released"]
    left = (None if None in (m["b_released"], m["b_ctx_released"])
            else m["b_released"] - m["b_ctx_released"])
    ok = (m["creator_rc"] == 0 and m["importer_rc"] == 0 and m["import"].endswith("CUDA_SUCCESS")
          and drop is not None and abs(drop - 1024) <= 2 and left is not None and left <= 2
          and not kcmp_refused(s))
    line = (f"import after the creator let go and exited: {m['import'][16:]}; ledger "
            f"{m['b_holding']} MiB while the importer held it (contexts {m['b_ctx']}), "
            f"{m['b_released']} after release (contexts {m['b_ctx_released']}): drop {drop} MiB "
            f"(want 1024 ± 2), left beyond contexts {left} (want ≤ 2); nvidia-smi importer max "
            f"{m['smi_importer_max']} MiB; creator rc {m['creator_rc']}, importer rc "
            f"{m['importer_rc']}")
    report(line)
    return ok, line


# ------------------------------------------------------------------ torch_mp

def torch_mp(s):
    ledger = os.path.join(s.work, "tenant.ledger")
    p = s.spawn("torch_mp", s.run_in("8GiB", ledger, [PY, "-u", os.path.join(HERE, "torch_mp.py"),
                                                      s.cushare, ledger]))
    rc = finish(p, 180)
    r = result(p.lines)
    g = lambda k: int(r.get(k, -1))  # noqa: E731
    ok = (rc == 0 and g("child_sum_ok") == 1 and g("parent_sees_child_write") == 1
          and g("child_rc") == 0
          and abs(g("noncontext_mib") - g("parent_reserved_mib") - g("child_reserved_mib")) <= 2)
    line = (f"child read the tensor: {bool(g('child_sum_ok'))}, parent saw the child's write: "
            f"{bool(g('parent_sees_child_write'))}; ledger while shared {g('used_mib')} MiB = "
            f"contexts {g('context_mib')} + {g('noncontext_mib')} (want parent reserved "
            f"{g('parent_reserved_mib')} + child reserved {g('child_reserved_mib')} ± 2; held by "
            f"a share {g('shared_mib')}); after the child: "
            f"{g('after_child_used_mib')} MiB; rc {rc}")
    report(line)
    return ok, line


# ------------------------------------------------------------------ cross_tenant

def cross_tenant(s):
    la, lb = os.path.join(s.work, "a.ledger"), os.path.join(s.work, "b.ledger")
    m = pair(s, la, lb)
    moved = None if None in (m["b_holding"], m["b_ctx"]) else m["b_holding"] - m["b_ctx"]
    left = (None if None in (m["b_released"], m["b_ctx_released"])
            else m["b_released"] - m["b_ctx_released"])
    ok = (m["creator_rc"] == 0 and m["importer_rc"] == 0 and m["data"] == "IMPORTER DATA ok"
          and moved is not None and abs(moved - 1024) <= 2 and left is not None and left <= 2
          and not m["a_holding"])
    line = (f"after the creator (tenant A) exited: A {m['a_holding']} MiB, B {m['b_holding']} MiB "
            f"= contexts {m['b_ctx']} + {moved} (want 1024 ± 2, moved to B); after B released: "
            f"B beyond contexts {left} MiB; importer {m['data'][9:]}; nvidia-smi importer max "
            f"{m['smi_importer_max']} MiB")
    report(line)
    return ok, line


STEPS = {"expandable": expandable, "vmm_pair": vmm_pair, "fd_late": fd_late,
         "torch_mp": torch_mp, "cross_tenant": cross_tenant}


def main(argv):
    if len(argv) != 4 or argv[1] not in STEPS:
        print(__doc__)
        return 2
    s = Step(argv[1], argv[2], argv[3])
    try:
        ok, line = STEPS[argv[1]](s)
    except Exception as e:  # noqa: BLE001 - a step must always print its summary
        ok, line = False, f"step raised {type(e).__name__}: {e}"
    print(f"SUMMARY {argv[1]} {'PASS' if ok else 'FAIL'}: {line}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
