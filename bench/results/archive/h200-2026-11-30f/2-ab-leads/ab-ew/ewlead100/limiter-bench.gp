set datafile separator ','
set terminal pngcairo size 900,600 noenhanced
set output '/root/out/r/ab-ew/ewlead100/limiter-bench.png'
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
plot x title 'target' with lines dt 2 lc 'gray', $hami using 1:3 title 'HAMi-core, elementwise' with linespoints dt 3 pt 6, '/root/out/r/ab-ew/ewlead100/limiter-bench.csv' using ((strcol(1) eq 'elementwise' && strcol(2) eq 'limit') ? $3 : 1/0):5 title 'elementwise' with linespoints lw 2 pt 7, '/root/out/r/ab-ew/ewlead100/limiter-bench.csv' using ((strcol(1) eq 'elementwise' && (strcol(2) eq 'pair' || strcol(2) eq 'mix')) ? $3 : 1/0):5 title 'elementwise, tenants side by side' with points pt 5 ps 1.5
