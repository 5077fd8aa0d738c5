#!/bin/sh
# Regenerates the docs' benchmark plots from recorded results:
#
#   bench/plot.sh LIMITER INIT [OUTDIR]
#
# LIMITER: a `cushare bench limiter` CSV, or a directory holding one
#          (limiter-bench.csv, or exactly one *limiter-bench.csv, as
#          tests/gpu/limiter_shares/run.sh names it: after-limiter-bench.csv)
# INIT:    a bench/run_init_sweep.sh output directory (its init-p99.csv),
#          or that CSV itself
# OUTDIR:  where limiter-bench.png and bench-init.png go (default: docs/
#          of this tree)
#
# e.g. bench/plot.sh bench/results/archive/h200-2026-11-30c bench/results/archive/h200-2026-11-30c/startup-init
#
# Each plot's title names the results it was made from. Needs gnuplot
# (Debian: gnuplot-nox); nothing else does, and no test runs this.
# Exit status: 0 both written, 1 gnuplot failed, 2 usage or missing input.
set -u

here=$(cd "$(dirname "$0")" && pwd)
me=bench/plot.sh

usage() {
    echo "usage: $me LIMITER INIT [OUTDIR]  (bench/plot.sh's header says what each is)" >&2
    exit 2
}

die() {
    echo "$me: $*" >&2
    exit 2
}

[ $# -ge 2 ] && [ $# -le 3 ] || usage
command -v gnuplot >/dev/null 2>&1 ||
    die "gnuplot not found: install it (Debian: apt-get install gnuplot-nox)"

# limiter_csv PATH: the CSV itself, or the one in directory PATH.
limiter_csv() {
    if [ -f "$1" ]; then
        echo "$1"
        return
    fi
    [ -d "$1" ] || die "limiter results '$1' is neither a CSV nor a directory"
    if [ -f "$1/limiter-bench.csv" ]; then
        echo "$1/limiter-bench.csv"
        return
    fi
    set -- "$1" "$1"/*limiter-bench.csv
    [ $# -eq 2 ] && [ -f "$2" ] && { echo "$2"; return; }
    [ $# -eq 2 ] && die "no limiter-bench.csv in '$1': pass the CSV of \`cushare bench limiter\`"
    shift
    die "several limiter CSVs in that directory ($*): pass the one to plot"
}

# init_csv PATH: PATH/init-p99.csv, or PATH itself.
init_csv() {
    if [ -d "$1" ]; then
        [ -f "$1/init-p99.csv" ] ||
            die "no init-p99.csv in '$1': pass a bench/run_init_sweep.sh output directory"
        echo "$1/init-p99.csv"
    elif [ -f "$1" ]; then
        echo "$1"
    else
        die "start-up results '$1' do not exist: pass a bench/run_init_sweep.sh output directory"
    fi
}

# A gnuplot string literal may not hold a single quote.
quoted() {
    case "$1" in
    *"'"*) die "path '$1' has a single quote: gnuplot cannot be given it; rename or link it" ;;
    esac
}

lim=$(limiter_csv "$1") || exit 2
init=$(init_csv "$2") || exit 2
out=${3:-$(dirname "$here")/docs}
[ -d "$out" ] || die "output directory '$out' does not exist: create it first"
head -n 1 "$lim" | grep -q '^workload,run,target_pct,kernels_per_s,share_pct' ||
    die "'$lim' is not a \`cushare bench limiter\` CSV (its header differs)"
head -n 1 "$init" | grep -q '^n,baseline_p99_ms,cushare_p99_ms' ||
    die "'$init' is not an init-p99.csv of bench/run_init_sweep.sh (its header differs)"
for p in "$lim" "$init" "$out"; do quoted "$p"; done

# The workloads with limit rows, in the CSV's order; not launchbound, whose
# row is the throughput it kept at 25 % (ought to be ~100), not a share.
workloads=$(awk -F, 'NR > 1 && $2 == "limit" && $1 != "launchbound" && !seen[$1]++ {
    printf "%s ", $1 }' "$lim")
[ -n "$workloads" ] || die "'$lim' has no limit rows: nothing to plot"

# The results' directory (for a sweep: its parent too) in the title.
src_lim=$(basename "$(dirname "$lim")")
src_init=$(basename "$(dirname "$(dirname "$init")")")/$(basename "$(dirname "$init")")

status=0
gnuplot -e "datafile='$lim'; outfile='$out/limiter-bench.png'; workloads='$workloads'; \
plottitle='cushare: achieved share vs CUDA_DEVICE_SM_LIMIT (force), $src_lim'" \
    "$here/plot_limiter.gp" && echo "wrote $out/limiter-bench.png from $lim" || status=1
gnuplot -e "datafile='$init'; outfile='$out/bench-init.png'; \
plottitle='cuInit p99, N fresh processes released together ($src_init)'" \
    "$here/plot_init.gp" && echo "wrote $out/bench-init.png from $init" || status=1
exit $status
