#!/bin/sh
# Start-up density sweep: `cushare bench init --baseline` for N in
# 1 8 32 128 300, plus `-n 48 --ctx --baseline`, on the machine it runs on
# (a real GPU for docs/bench-init.md).
#
#   bench/run_init_sweep.sh OUTDIR [extra bench init options, e.g. --repeat 3]
#
# Environment: CUSHARE (the cushare binary; default build/cushare next to
# this script's directory), NS (worker counts, default "1 8 32 128 300").
# Writes to OUTDIR:
#   init-n<N>.txt, workers-n<N>.csv   text report and per-worker rows per N
#   ctx-n48.txt, workers-ctx-n48.csv  the --ctx run
#   init-p99.csv                      n,baseline_p99_ms,cushare_p99_ms,ratio,
#                                     baseline_failed,cushare_failed
#   ctx-p99.csv                       the same for context-ready latency
#   env.txt                           host, driver and cushare version
#   bench-init.png                    p99 against N (if gnuplot is installed)
# Exits 1 if any worker of any run failed (the rows are still written).
set -u

if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [bench init options...]" >&2
    exit 2
fi
out=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
cushare=${CUSHARE:-$here/../build/cushare}
ns=${NS:-"1 8 32 128 300"}
if [ ! -x "$cushare" ]; then
    echo "$0: no cushare binary at $cushare (set CUSHARE)" >&2
    exit 2
fi
mkdir -p "$out" || exit 2

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -a)"
    echo "cpus: $(nproc 2>/dev/null)"
    echo "cushare: $("$cushare" --version 2>&1)"
    echo "options: $*"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    fi
} > "$out/env.txt"

# value KEY FILE: KEY=value from the report's "summary" line ("-" if absent).
value() {
    v=$(grep '^summary ' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | tail -n 1)
    echo "${v:--}"
}

status=0
echo "n,baseline_p99_ms,cushare_p99_ms,ratio,baseline_failed,cushare_failed" > "$out/init-p99.csv"
for n in $ns; do
    echo "== bench init -n $n --baseline $*" >&2
    "$cushare" bench init -n "$n" --baseline --csv "$out/workers-n$n.csv" "$@" \
        > "$out/init-n$n.txt" || status=1
    cat "$out/init-n$n.txt" >&2
    f=$out/init-n$n.txt
    echo "$n,$(value baseline_init_p99_ms "$f"),$(value cushare_init_p99_ms "$f"),$(value init_ratio "$f"),$(value baseline_failed "$f"),$(value cushare_failed "$f")" \
        >> "$out/init-p99.csv"
done

echo "== bench init -n 48 --ctx --baseline $*" >&2
"$cushare" bench init -n 48 --ctx --baseline --csv "$out/workers-ctx-n48.csv" "$@" \
    > "$out/ctx-n48.txt" || status=1
cat "$out/ctx-n48.txt" >&2
f=$out/ctx-n48.txt
echo "n,baseline_p99_ms,cushare_p99_ms,ratio,baseline_failed,cushare_failed" > "$out/ctx-p99.csv"
echo "48,$(value baseline_ctx_p99_ms "$f"),$(value cushare_ctx_p99_ms "$f"),$(value ctx_ratio "$f"),$(value baseline_failed "$f"),$(value cushare_failed "$f")" \
    >> "$out/ctx-p99.csv"

echo "== cuInit p99 by N" >&2
cat "$out/init-p99.csv" >&2
if command -v gnuplot >/dev/null 2>&1; then
    gnuplot -e "datafile='$out/init-p99.csv'; outfile='$out/bench-init.png'" \
        "$here/plot_init.gp" && echo "wrote $out/bench-init.png" >&2
else
    echo "gnuplot not installed: no plot (apt-get install gnuplot-nox)" >&2
fi
exit $status
