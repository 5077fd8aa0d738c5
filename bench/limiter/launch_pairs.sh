#!/usr/bin/env bash
# What an empty launch costs under cushare without a limit, against the
# same launches natively: N alternated pairs of short runs in one sitting,
# judged by the median of the pairs' ratios. A best-of-three comparison
# moves by several per cent from one sitting to the next (the CPU's clock
# and its neighbours move both sides alike only within a pair), more than
# the 1 % it is judged against.
#
#   bench/limiter/launch_pairs.sh [-n PAIRS] [--secs S] [--cpu C] [--build DIR]
#     -n       pairs (default 12); each pair runs native first on odd
#              pairs, cushare first on even ones
#     --secs   seconds per run (default 1, after 0.3 s of warm-up)
#     --cpu    run both sides on CPU C only (taskset), so neither gets a
#              core the other did not
#     --build  built tree with cushare and limiter_workload (default build)
#
# Prints one line per pair (native and cushare us per launch, their ratio)
# and a summary line:
#   launch_pairs: 12 pairs, cushare/native median 1.004 (p25 0.998, p75
#   1.010, min 0.987, max 1.023); best of each side +0.31 %
# Exit 0 when the median is within 1 %, 1 when not, 2 on usage or set-up.
set -u
here=$(cd "$(dirname "$0")" && pwd)
n=12 secs=1 cpu="" build="$here/../../build"
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=${2:-}; shift 2 ;;
    --secs) secs=${2:-}; shift 2 ;;
    --cpu) cpu=${2:-}; shift 2 ;;
    --build) build=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "launch_pairs: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$n" in ''|*[!0-9]*|0) echo "launch_pairs: -n wants a positive integer, got '$n'" >&2; exit 2 ;; esac
for f in "$build/cushare" "$build/limiter_workload"; do
    [ -x "$f" ] || { echo "launch_pairs: $f missing (run make, or pass --build DIR)" >&2; exit 2; }
done
case "$cpu" in ''|[0-9]*) ;; *) echo "launch_pairs: --cpu wants a CPU number, got '$cpu'" >&2; exit 2 ;; esac
lc=("$build/limiter_workload" launchcost --secs "$secs" --warmup 0.3)
pin=()
[ -n "$cpu" ] && pin=(taskset -c "$cpu")
rate() { "${pin[@]}" "$@" 2>/dev/null | sed -n 's/^RESULT .* rate=\([0-9.]*\).*/\1/p'; }
rows=()
for i in $(seq 1 "$n"); do
    if [ $((i % 2)) -eq 1 ]; then
        a=$(rate "${lc[@]}"); b=$(rate "$build/cushare" run -- "${lc[@]}")
    else
        b=$(rate "$build/cushare" run -- "${lc[@]}"); a=$(rate "${lc[@]}")
    fi
    rows+=("${a:-0} ${b:-0}")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics as st, sys
pairs = [tuple(float(x) for x in line.split()) for line in sys.stdin if line.strip()]
if not pairs or min(min(p) for p in pairs) <= 0:
    print("launch_pairs: a launch-cost run failed (no rate)"); sys.exit(2)
r = []
for i, (nat, cs) in enumerate(pairs, 1):
    un, uc = 1e6 / nat, 1e6 / cs
    r.append(uc / un)
    print(f"pair {i:2d}: native {un:.3f} us, cushare {uc:.3f} us, ratio {uc / un:.4f}")
q = st.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
best = (1e6 / max(c for _, c in pairs)) / (1e6 / max(a for a, _ in pairs))
med = st.median(r)
print(f"launch_pairs: {len(r)} pairs, cushare/native median {med:.3f} (p25 {q[0]:.3f}, "
      f"p75 {q[2]:.3f}, min {min(r):.3f}, max {max(r):.3f}); best of each side "
      f"{100 * (best - 1):+.2f} %")
sys.exit(0 if med <= 1.01 else 1)
'
