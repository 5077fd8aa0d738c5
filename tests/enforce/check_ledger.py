#!/usr/bin/env python3
"""check_ledger.py STATUS_JSON PID LIMIT_MIB USED_MIB: `cushare status
--json LEDGER` output must list PID, a device limit of LIMIT_MIB and at
least USED_MIB used. Prints one line; exits 1 naming what is missing."""
import json
import sys

st = json.load(open(sys.argv[1]))
pid, limit, used_min = int(sys.argv[2]), int(sys.argv[3]) << 20, int(sys.argv[4]) << 20


def walk(o):
    if isinstance(o, dict):
        yield o
        for v in o.values():
            yield from walk(v)
    elif isinstance(o, list):
        for v in o:
            yield from walk(v)


if not any(o.get("pid") == pid for o in walk(st)):
    sys.exit(f"FAIL: pid {pid} is not in the ledger: {json.dumps(st)[:400]}")
limits = [o["limit"] for o in walk(st) if "limit" in o]
if limit not in limits:
    sys.exit(f"FAIL: no device of the ledger has the limit {limit >> 20} MiB: {limits}")
used = max([int(o["used"]) for o in walk(st) if "used" in o] or [0])
if used < used_min:
    sys.exit(f"FAIL: the ledger shows {used} bytes used, fewer than {used_min >> 20} MiB")
print(f"ledger: pid {pid} present, limit {limit >> 20} MiB, {used >> 20} MiB used")
