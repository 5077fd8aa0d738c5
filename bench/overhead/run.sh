#!/usr/bin/env bash
# Per-call overhead of cushare vs the plain driver, alternating runs in one
# invocation (bench/overhead/overhead.c). Usage: run.sh BUILD_DIR [OUT_DIR] [ROUNDS]
set -euo pipefail
build=${1:?build dir}
out=${2:-.}
pairs=${3:-11}
bin=$build/bench_overhead
[ -x "$bin" ] || { echo "bench/overhead: $bin not built (needs a CUDA toolkit)"; exit 1; }
raw=$out/overhead_raw.jsonl
: > "$raw"
for i in $(seq "$pairs"); do
  "$bin" 50000 2000 3 native >> "$raw"
  "$build/cushare" run -- "$bin" 50000 2000 3 cushare >> "$raw"
  "$build/cushare" run --mem 64g -- "$bin" 50000 2000 3 cushare-mem-limit >> "$raw"
done
python3 - "$raw" <<'PY'
# Runs alternate native / cushare / cushare with a budget, so each triple
# saw the same GPU state: report the median over triples of the per-triple
# ratio, with its quartiles (the spread between runs is larger than the
# effect being measured).
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def series(mode, what):
    return [r["ns_per_call"] for r in rows if r["mode"] == mode and r["what"] == what]
def q(xs):
    xs = sorted(xs); n = len(xs)
    return xs[n // 4], statistics.median(xs), xs[(3 * n) // 4]
print("| operation | native ns/call (median) | cushare ns/call | cushare/native per pair: median [q1, q3] | cushare --mem 64g ns/call | ratio median [q1, q3] |")
print("| --- | --- | --- | --- | --- | --- |")
for what in ("launch", "alloc_free_1MiB"):
    n, c, m = series("native", what), series("cushare", what), series("cushare-mem-limit", what)
    rc = q([b / a for a, b in zip(n, c)]); rm = q([b / a for a, b in zip(n, m)])
    print(f"| {what} | {statistics.median(n):.0f} | {statistics.median(c):.0f} | {rc[1]:.3f} [{rc[0]:.3f}, {rc[2]:.3f}] "
          f"| {statistics.median(m):.0f} | {rm[1]:.3f} [{rm[0]:.3f}, {rm[2]:.3f}] |")
PY
