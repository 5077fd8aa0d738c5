# p99 cuInit latency against worker count, with and without cushare, and
# their ratio against the target.
#
#   gnuplot -e "datafile='init-p99.csv'; outfile='docs/bench-init.png'" bench/plot_init.gp
#
# datafile: CSV with a header line and columns n, baseline_p99_ms,
# cushare_p99_ms (more columns are ignored; "-" marks a missing value), as
# bench/run_init_sweep.sh writes it (bench/plot.sh calls this). Optional:
# plottitle, target (the ratio drawn as the limit, default 1.02).
if (!exists("datafile")) datafile = 'init-p99.csv'
if (!exists("outfile")) outfile = 'bench-init.png'
if (!exists("plottitle")) plottitle = 'cuInit p99 with N workers released together'
if (!exists("target")) target = 1.02

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,800 enhanced font ",11"
} else {
    set terminal png size 900,800
}
set output outfile

set datafile separator ","
set datafile missing "-"
set multiplot title plottitle
set logscale x 2
set format x "%g"
set xrange [*:*] writeback
set grid xtics ytics

# Top: both p99s.
set origin 0, 0.38
set size 1, 0.58
set ylabel "p99 cuInit latency (ms)"
set key top left
set yrange [0:*]
plot datafile using 1:2 skip 1 with linespoints pt 7 lw 2 title "baseline (no cushare)", \
     datafile using 1:3 skip 1 with linespoints pt 5 lw 2 title "cushare"

# Bottom: cushare / baseline, against the target.
set origin 0, 0
set size 1, 0.4
set xrange restore
set xlabel "workers (N, log scale)"
set ylabel "cushare / baseline p99"
set autoscale y
set offsets 0, 0, 0.02, 0.02
set key bottom center
plot target with lines dt 2 lc 'red' title sprintf("target %g", target), \
     1 with lines dt 3 lc 'gray' notitle, \
     datafile using 1:($3 / $2) skip 1 with linespoints pt 5 lw 2 lc 2 title "ratio"
unset multiplot
