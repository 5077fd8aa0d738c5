set terminal pngcairo size 900,600 noenhanced
set output '/root/out/i15/bench-turns-graph/limiter-share.png'
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
"graph 25+25+25+25" 96.30 219.05 219.96
EOD
plot $share using 2:xtic(1) title 'time-sliced (cushare run)', '' using 3 title 'concurrent (cushare run --mps)', '' using 4 title 'bare MPS (no cushare)'
