#!/usr/bin/env python3
"""Judges a tests/gpu/parking/run.sh run: reads OUT/{bare.txt, probe.txt,
tenants.jsonl, reference.jsonl, smi.csv, status.jsonl} and writes
OUT/summary.txt (also printed). Exit 0 when every judged line PASSes.
Usage: report.py OUT FAKE(0|1) TENANTS BURSTS PROBE_MIB"""
import json
import math
import sys

PCIE_GBS = 50.0  # H200 host link, PCIe Gen5 x16, as measured by others: ~50 GB/s


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] if xs else float("nan")


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        out.append({"garbage": line[:200]})
    except OSError:
        pass
    return out


def main(out, fake, tenants, bursts, probe_mib):
    lines, ok = [], True

    def verdict(name, passed, text, judged=True):
        nonlocal ok
        word = ("PASS" if passed else "FAIL") if judged else "INFO"
        if judged and not passed:
            ok = False
        lines.append(f"{name} {word}: {text}")

    # 1. outputs identical to a run alone
    ref = {(r["tenant"], r["burst"]): r["tokens"] for r in jsonl(f"{out}/reference.jsonl")
           if "tokens" in r}
    runs = jsonl(f"{out}/tenants.jsonl")
    got = {(r["tenant"], r["burst"]): r for r in runs if "tokens" in r}
    same = sum(1 for k, r in got.items() if ref.get(k) == r["tokens"])
    want = tenants * bursts
    verdict("outputs", same == want and len(ref) == want,
            f"{same}/{want} bursts identical to the run alone ({len(ref)} reference outputs)")
    # 2. no out-of-memory error nobody asked for; every tenant finished
    ooms = [r for r in runs if "oom" in r]
    exits = {r["tenant"]: r["exit"] for r in runs if "exit" in r}
    bad_exit = {t: e for t, e in exits.items() if e != 0}
    verdict("no_oom", not ooms and not bad_exit and len(exits) == tenants,
            f"{len(ooms)} OOM errors, exits {exits}")
    intact = [r["ballast_intact"] for r in runs if "ballast_intact" in r]
    if fake:
        verdict("data", True, "the stand-in keeps no data (FAKE=1)", judged=False)
    else:
        verdict("data", len(intact) == tenants and all(intact),
                f"ballast intact in {sum(intact)}/{tenants} tenants after their parks")
    # 3. nvidia-smi never above the card
    used, total = [], 0
    try:
        with open(f"{out}/smi.csv") as f:
            for line in f:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                    used.append(int(parts[0]))
                    total = int(parts[1])
    except OSError:
        pass
    verdict("smi", bool(used) and max(used) <= total,
            f"max {max(used) if used else 'n/a'} MiB of {total} MiB over {len(used)} samples")
    # 4. parking happened in the mixed run
    st = jsonl(f"{out}/status.jsonl")
    parks = sum(s.get("park", {}).get("parks", 0) for s in st if s.get("role") == "tenant")
    wakes = sum(s.get("park", {}).get("wakes", 0) for s in st if s.get("role") == "tenant")
    verdict("parking", parks > 0 and wakes > 0,
            f"{parks} parks, {wakes} wakes among the {tenants} tenants")
    first = [r["first_op_ms"] for r in got.values()]
    if first:
        verdict("burst_latency", True, f"first GPU op of a burst: median {median(first):.1f} ms, "
                f"p99 {p99(first):.1f} ms, max {max(first):.1f} ms (includes wakes)", judged=False)
    # 5. wake of an 8 GiB tenant vs the driver's own restore of the same size
    bare = []
    try:
        with open(f"{out}/bare.txt") as f:
            for line in f:
                w = line.split()
                if len(w) == 10 and w[0] == "cycle":
                    bare.append({w[k]: float(w[k + 1]) for k in range(2, 10, 2)})
    except OSError:
        pass
    wake, park = [], []
    try:
        with open(f"{out}/probe.txt") as f:
            for line in f:
                w = line.split()
                if len(w) == 2 and w[0] == "wake_ms":
                    wake.append(float(w[1]))
                if len(w) == 2 and w[0] == "park_ms":
                    park.append(float(w[1]))
    except OSError:
        pass
    drv = [b["restore_ms"] + b["unlock_ms"] for b in bare]
    drv_ck = [b["lock_ms"] + b["checkpoint_ms"] for b in bare]
    ratio = p99(wake) / p99(drv) if wake and drv and p99(drv) > 0 else float("nan")
    text = (f"{probe_mib} MiB tenant: wake p99 {p99(wake):.1f} ms over {len(wake)} wakes; the "
            f"driver's restore+unlock of a plain process of that size p99 {p99(drv):.1f} ms over "
            f"{len(drv)}: {ratio:.2f}x (target <= 1.2x); medians {median(wake):.1f} vs "
            f"{median(drv):.1f} ms")
    if fake:
        verdict("wake_vs_driver", bool(wake and drv), text + " (FAKE=1: not judged)", judged=False)
    else:
        verdict("wake_vs_driver", bool(wake and drv) and ratio <= 1.2, text)
    gib = probe_mib / 1024.0
    pcie_gib = PCIE_GBS * 1e9 / (1 << 30)

    def rate(ms_list):
        m = median(ms_list)
        return gib / (m / 1e3) if ms_list and m > 0 else float("nan")
    verdict("throughput", True,
            f"park {rate(park):.2f} GiB/s (driver alone {rate(drv_ck):.2f}), wake {rate(wake):.2f} "
            f"GiB/s (driver alone {rate(drv):.2f}); PCIe ~{PCIE_GBS:.0f} GB/s = {pcie_gib:.1f} GiB/s",
            judged=False)
    lines.append("RESULT " + ("PASS" if ok else "FAIL"))
    with open(f"{out}/summary.txt", "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4]),
                  int(sys.argv[5])))
