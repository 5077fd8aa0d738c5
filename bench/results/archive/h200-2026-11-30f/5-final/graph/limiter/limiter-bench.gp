set datafile separator ','
set terminal pngcairo size 900,600 noenhanced
set output '/root/out/r/graph/limiter/limiter-bench.png'
set title 'cushare: achieved GPU share vs CUDA_DEVICE_SM_LIMIT (force)'
set xlabel 'SM limit (%)'
set ylabel 'throughput, % of native'
set xrange [0:105]
set yrange [0:110]
set grid
set key left top
# HAMi-core (force) on the same H200, from docs (DESIGN.md)
$hami << EOD
10,38,5
25,100,36
50,100,73
75,100,88
EOD
plot x title 'target' with lines dt 2 lc 'gray', '/root/out/r/graph/limiter/limiter-bench.csv' using ((strcol(1) eq 'graph' && strcol(2) eq 'limit') ? $3 : 1/0):5 title 'graph' with linespoints lw 2 pt 7, '/root/out/r/graph/limiter/limiter-bench.csv' using ((strcol(1) eq 'graph' && (strcol(2) eq 'pair' || strcol(2) eq 'mix')) ? $3 : 1/0):5 title 'graph, tenants side by side' with points pt 5 ps 1.5
