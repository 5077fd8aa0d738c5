#!/usr/bin/env bash
# Draws one window edge of each edges.sh timeline (timeline.csv: tenant,
# start_us, end_us, launch_us) into one PNG: the replays of the tenants
# from 300 us before the first switch between tenants to 500 us after it,
# one panel per timeline, each labelled with its directory's name.
#   bench/limiter/probes/plot_edges.sh OUT.png LABEL=TIMELINE.csv...
set -eu
[ $# -ge 2 ] || { sed -n 2,7p "$0"; exit 2; }
out=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for arg in "$@"; do
    label=${arg%%=*} csv=${arg#*=}
    # Times from the end of the last replay before the first switch; a
    # tenant's row is its limit (its name is smLIMIT).
    awk -F, -v lo=-300 -v hi=500 'NR > 1 {
            if (prev != "" && $1 != prev && !set) { t0 = prev_end; set = 1 }
            prev = $1; prev_end = $3; s[NR] = $2; e[NR] = $3; who[NR] = $1; n = NR }
        END { for (i = 2; i <= n; i++) {
                a = s[i] - t0; b = e[i] - t0
                if (b >= lo && a <= hi) print a, b, substr(who[i], 3) + 0 } }' "$csv" \
        > "$tmp/$n.dat"
    echo "$label" > "$tmp/$n.label"
    n=$((n + 1))
done
{
    echo "set terminal pngcairo size 1000,$((170 * n + 60)) font ',10'"
    echo "set output '$out'"
    echo "set multiplot layout $n,1 title 'Window edges on the H200: replays (boxes) before and after the GPU switches tenants'"
    echo "set xrange [-300:500]; set yrange [10:60]; set ytics ('sm20' 20, 'sm30' 30, 'sm50' 50)"
    echo "set style fill solid 0.6 noborder; unset key"
    for i in $(seq 0 $((n - 1))); do
        [ "$i" = $((n - 1)) ] && echo "set xlabel 'us after the end of the previous tenant''s last replay'"
        echo "set title '$(cat "$tmp/$i.label")'"
        echo "plot '$tmp/$i.dat' using (((\$1)+(\$2))/2):3:(((\$2)-(\$1))/2):(2) with boxxyerror"
    done
    echo "unset multiplot"
} > "$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
