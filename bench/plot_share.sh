#!/bin/sh
# Remakes the time-sliced vs concurrent plot (docs/limiter-share.png) from
# the logs of `cushare bench limiter --mps` runs:
#
#   bench/plot_share.sh OUT.png LOG...
#
# Each LOG is what the bench printed (tests/gpu/mps/run.sh keeps it as
# OUT/bench-*.log); every mix table in it ("mix A+B  time-sliced
# concurrent  bare MPS" and its "together" row) becomes one group of three
# bars, named by the workload ("== NAME:") and the mix. The same plot as
# the bench's own limiter-share.gp, for runs whose .gp did not come back.
# Needs gnuplot (Debian: gnuplot-nox). Exit status: 0 written, 1 gnuplot
# failed, 2 usage or no mix found.
set -u
me=bench/plot_share.sh
[ $# -ge 2 ] || { echo "usage: $me OUT.png LOG..." >&2; exit 2; }
command -v gnuplot > /dev/null 2>&1 ||
    { echo "$me: gnuplot not found: install it (Debian: apt-get install gnuplot-nox)" >&2; exit 2; }
out=$1
shift
data=$(awk '
    /^== [^:]*:/ { w = $2; sub(/:$/, "", w) }
    /^mix [0-9+]+ +time-sliced +concurrent +bare MPS$/ { mix = $2; next }
    mix != "" && /^together / {
        gsub(/%/, ""); printf "\"%s %s\" %s %s %s\n", w, mix, $2, $3, $4; mix = ""
    }' "$@") || exit 2
[ -n "$data" ] || { echo "$me: no mix table with three modes in $*" >&2; exit 2; }
gnuplot << EOP || exit 1
set terminal pngcairo size 900,600 noenhanced
set output '$out'
set title 'cushare on an H200: tenants together, time-sliced vs concurrent (MPS)'
set ylabel 'aggregate throughput, % of one tenant alone'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set grid ytics
set key below
set xtics font ',9'
set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 2
\$share << EOD
$data
EOD
plot \$share using 2:xtic(1) title 'time-sliced (cushare run)', '' using 3 title 'concurrent (cushare run --mps)', '' using 4 title 'bare MPS (no cushare)'
EOP
echo "wrote $out"
