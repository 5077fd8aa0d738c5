#!/usr/bin/env bash
# Per-call overhead of cushare vs the plain driver, alternating runs in one
# invocation (bench/overhead/overhead.c). Usage: run.sh BUILD_DIR [OUT_DIR] [ROUNDS]
set -euo pipefail
build=${1:?build dir}
out=${2:-.}
pairs=${3:-5}
bin=$build/bench_overhead
[ -x "$bin" ] || { echo "bench/overhead: $bin not built (needs a CUDA toolkit)"; exit 1; }
raw=$out/overhead_raw.jsonl
: > "$raw"
for i in $(seq "$pairs"); do
  "$bin" 100000 5000 7 native >> "$raw"
  "$build/cushare" run -- "$bin" 100000 5000 7 cushare >> "$raw"
  "$build/cushare" run --mem 64g -- "$bin" 100000 5000 7 cushare-mem-limit >> "$raw"
done
python3 - "$raw" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(mode, what):
    return statistics.median(r["ns_per_call"] for r in rows if r["mode"] == mode and r["what"] == what)
print("| operation | native ns/call | cushare ns/call | ratio | cushare --mem 64g ns/call | ratio |")
print("| --- | --- | --- | --- | --- | --- |")
for what in ("launch", "alloc_free_1MiB"):
    n, c, m = med("native", what), med("cushare", what), med("cushare-mem-limit", what)
    print(f"| {what} | {n:.0f} | {c:.0f} | {c/n:.3f} | {m:.0f} | {m/n:.3f} |")
PY
