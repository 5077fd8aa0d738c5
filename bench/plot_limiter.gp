# Achieved share against the SM limit, from a `cushare bench limiter` CSV.
#
#   gnuplot -e "datafile='OUT/limiter-bench.csv'; outfile='docs/limiter-bench.png'; \
#               workloads='matmul elementwise graph'" bench/plot_limiter.gp
#
# bench/plot.sh calls it (and finds the workloads in the CSV). datafile:
# the CSV `cushare bench limiter` writes (workload,run,target_pct,
# kernels_per_s,share_pct; run is native, unlimited, limit, pair or mix).
# Optional: plottitle, tolerance (points either side of the target, the
# grey band of the lower panel).
#
# (`cushare bench limiter` writes its own quick-look script next to its CSV;
# this one is the docs' plot: the target band and every mix, not only pairs.)
if (!exists("datafile")) datafile = 'limiter-bench.csv'
if (!exists("outfile")) outfile = 'limiter-bench.png'
if (!exists("workloads")) workloads = 'matmul elementwise'
if (!exists("plottitle")) plottitle = 'cushare: achieved share vs CUDA_DEVICE_SM_LIMIT (force)'
if (!exists("tolerance")) tolerance = 2

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,800 noenhanced font ",11"
} else {
    set terminal png size 900,800
}
set output outfile
set datafile separator ","

# HAMi-core (force) on the same H200 (docs/results.md, "Compute shares: first measurements").
$hami << EOD
10,38,5
25,100,36
50,100,73
75,100,88
EOD

# Rows of workload w whose run is r (else off the plot).
is(w, r) = strcol(1) eq w && strcol(2) eq r
tenant(w) = strcol(1) eq w && (strcol(2) eq 'pair' || strcol(2) eq 'mix')
nw = words(workloads)

set multiplot title plottitle
set xrange [0:105]
set grid xtics ytics

# Top: the share against the limit, with HAMi-core for scale.
set origin 0, 0.38
set size 1, 0.58
set ylabel "throughput, % of native"
set yrange [0:110]
set key right bottom
plot x title 'target' with lines dt 2 lc 'gray', \
     $hami using 1:2 title 'HAMi-core, matmul' with linespoints dt 3 pt 6 lc 'dark-gray', \
     $hami using 1:3 title 'HAMi-core, elementwise' with linespoints dt 3 pt 4 lc 'dark-gray', \
     for [i=1:nw] datafile using (is(word(workloads, i), 'limit') ? $3 : 1/0):5 skip 1 \
         title word(workloads, i) with linespoints lw 2 pt 7 lc i, \
     for [i=1:nw] datafile using (tenant(word(workloads, i)) ? $3 : 1/0):5 skip 1 \
         title word(workloads, i) . ', tenants side by side' with points pt 5 ps 1.2 lc i

# Bottom: how far each is from its target, in points, against the band.
set origin 0, 0
set size 1, 0.4
set xlabel "SM limit (%)"
set ylabel "achieved - target (points)"
set autoscale y
set offsets 0, 0, 0.5, 0.5
set key right bottom
plot '+' using 1:(-tolerance):(tolerance) with filledcurves lc 'gray' fs transparent solid 0.25 \
         noborder title sprintf('target +-%g points', tolerance), \
     0 with lines dt 2 lc 'gray' notitle, \
     for [i=1:nw] datafile using (is(word(workloads, i), 'limit') ? $3 : 1/0):($5 - $3) skip 1 \
         with linespoints lw 2 pt 7 lc i notitle, \
     for [i=1:nw] datafile using (tenant(word(workloads, i)) ? $3 : 1/0):($5 - $3) skip 1 \
         with points pt 5 ps 1.2 lc i notitle
unset multiplot
