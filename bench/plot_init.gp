# p99 cuInit latency against worker count, with and without cushare.
#
#   gnuplot -e "datafile='init-p99.csv'; outfile='docs/bench-init.png'" bench/plot_init.gp
#
# datafile: CSV with a header line and columns n, baseline_p99_ms,
# cushare_p99_ms (more columns are ignored; "-" marks a missing value), as
# bench/run_init_sweep.sh writes it. Optional: plottitle.
if (!exists("datafile")) datafile = 'init-p99.csv'
if (!exists("outfile")) outfile = 'bench-init.png'
if (!exists("plottitle")) plottitle = 'cuInit p99 with N workers released together'

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 enhanced font ",11"
} else {
    set terminal png size 900,600
}
set output outfile

set datafile separator ","
set datafile missing "-"
set title plottitle
set xlabel "workers (N, log scale)"
set ylabel "p99 cuInit latency (ms)"
set logscale x 2
set format x "%g"
set grid xtics ytics
set key top left
set yrange [0:*]

plot datafile using 1:2 skip 1 with linespoints pt 7 lw 2 title "baseline (no cushare)", \
     datafile using 1:3 skip 1 with linespoints pt 5 lw 2 title "cushare"
