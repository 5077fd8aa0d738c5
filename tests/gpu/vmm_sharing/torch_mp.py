#!/usr/bin/env python3
"""torch.multiprocessing passes a 512 MiB CUDA tensor to a spawned child of
the same slice (legacy CUDA IPC under the hood). The child checks and
changes it; while it holds it the parent reads the tenant's ledger:

    torch_mp.py CUSHARE_BINARY LEDGER

Prints `RESULT key=value ...` last."""
import json
import subprocess
import sys

import torch
import torch.multiprocessing as mp

MiB = 1 << 20
N = 512 * MiB // 4


def child(q, done, go):
    t = q.get()
    s = float(t.sum().item())
    t.add_(1.0)
    torch.cuda.synchronize()
    done.put((s, torch.cuda.memory_reserved()))
    go.wait(120)
    del t


def ledger(cushare, path):
    d = json.loads(subprocess.run([cushare, "status", "--json", path], capture_output=True,
                                  text=True, timeout=30).stdout)
    used = d["devices"][0]["used"]
    live = [p for p in d["processes"] if p["state"] == "live"]
    ctx = sum(p["bytes"]["dev0"]["context"] for p in live)
    slots = sum(sum(p["bytes"]["dev0"].values()) for p in live)
    return used, ctx, slots, len(live)


def main():
    cushare, path = sys.argv[1], sys.argv[2]
    mp.set_start_method("spawn")
    t = torch.ones(N, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    q, done, go = mp.Queue(), mp.Queue(), mp.Event()
    p = mp.Process(target=child, args=(q, done, go))
    p.start()
    q.put(t)
    s, child_reserved = done.get(timeout=120)
    used, ctx, slots, live = ledger(cushare, path)
    seen = float(t[:1024].mean().item())
    go.set()
    p.join(60)
    used2, ctx2, _, live2 = ledger(cushare, path)
    shared = used - slots  # bytes held by shares (docs/ledger.md), in no slot
    print(f"RESULT child_sum_ok={int(s == N)} parent_sees_child_write={int(seen == 2.0)} "
          f"child_rc={p.exitcode} live={live} used_mib={used // MiB} context_mib={ctx // MiB} "
          f"shared_mib={shared // MiB} parent_reserved_mib={reserved // MiB} "
          f"child_reserved_mib={child_reserved // MiB} "
          f"noncontext_mib={(used - ctx) // MiB} after_child_used_mib={used2 // MiB} "
          f"after_child_context_mib={ctx2 // MiB} live_after={live2}", flush=True)


if __name__ == "__main__":
    main()
