set terminal pngcairo size 900,600 noenhanced
set output '/root/out/p/bench/limiter-share.png'
set title 'cushare: tenants together, time-sliced vs concurrent (MPS)'
set ylabel 'aggregate throughput, % of one tenant alone'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set grid ytics
set key below
set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 2
# workload and mix, then time-sliced, concurrent, bare MPS
$share << EOD
"elementwise 25+75" 98.04 94.83 104.71
"matmul 25+75" 97.41 94.87 100.58
EOD
plot $share using 2:xtic(1) title 'time-sliced (cushare run)', '' using 3 title 'concurrent (cushare run --mps)', '' using 4 title 'bare MPS (no cushare)'
