#!/usr/bin/env python3
"""The last lines of `make test`: passed, failed and skipped per phase, each
skip with its reason and each failure by name, from CTest's JUnit files.

    scripts/test_summary.py LABEL=JUNIT.xml...

A phase whose file is missing did not run (an earlier phase failed, or its
build did) and is said so. A skip's reason is the line the test printed
starting with SKIP (the tests' convention, tests/support/support.h),
else its last line of output. Exit status 0 when every phase ran and
nothing failed, 1 otherwise, 2 on a usage error.
"""
import os
import sys
import xml.etree.ElementTree as ET


def skip_reason(case):
    out = (case.findtext("system-out") or "").strip().splitlines()
    for line in out:
        s = line.strip()
        if s.upper().startswith("SKIP"):
            return s.split(":", 1)[1].strip() if ":" in s else s
    if out:
        return out[-1].strip()
    el = case.find("skipped")
    return el.get("message", "") if el is not None else "no reason given"


def read_phase(path):
    """(passed, failed names, [(skipped name, reason)]) or None."""
    if not os.path.exists(path):
        return None
    passed, failed, skipped = 0, [], []
    for case in ET.parse(path).getroot().iter("testcase"):
        status = case.get("status")
        if status == "run":
            passed += 1
        elif status == "fail":
            failed.append(case.get("name"))
        else:  # notrun (a skip code, a missing fixture) or disabled
            skipped.append((case.get("name"), skip_reason(case)))
    return passed, failed, skipped


def main(argv):
    phases = [a.split("=", 1) for a in argv]
    if not phases or any(len(p) != 2 for p in phases):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    total = [0, 0, 0]
    skips, fails, not_run = [], [], []
    print()
    print("== make test: summary")
    for label, path in phases:
        r = read_phase(path)
        if r is None:
            not_run.append(label)
            print(f"  {label:<12} not run")
            continue
        passed, failed, skipped = r
        total[0] += passed
        total[1] += len(failed)
        total[2] += len(skipped)
        fails += [(n, label) for n in failed]
        skips += [(n, label, why) for n, why in skipped]
        print(f"  {label:<12} {passed:4d} passed, {len(failed)} failed, {len(skipped)} skipped")
    for name, label, why in skips:
        print(f"  skipped {name} ({label}): {why}")
    for name, label in fails:
        print(f"  FAILED  {name} ({label}): its output is above, or in "
              f"Testing/Temporary/LastTest.log of that build")
    verdict = "FAILED" if fails or not_run else "ok"
    extra = f", not run: {' '.join(not_run)}" if not_run else ""
    print(f"make test: {verdict}: {total[0]} passed, {total[1]} failed, "
          f"{total[2]} skipped{extra}")
    return 1 if fails or not_run else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
