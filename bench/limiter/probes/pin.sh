#!/usr/bin/env bash
# Runs a command on one CPU of its own: the Nth command started through
# this script gets the Nth CPU it may use (round robin, counted under flock
# in PIN_DIR, default /tmp/cushare-pin-UID), so the tenants of a mix never
# share a core. For ab.sh's PIN=1 (is a tenant's speed in a mix its CPU's?).
#   bench/limiter/probes/pin.sh COMMAND [ARG...]
set -eu
[ $# -ge 1 ] || { sed -n 2,6p "$0"; exit 2; }
dir=${PIN_DIR:-/tmp/cushare-pin-$(id -u)}
mkdir -p "$dir"
mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
    awk -F- '{ if (NF == 2) for (c = $1; c <= $2; c++) print c; else print $1 }')
n=$({
    flock 9
    k=$(cat "$dir/next" 2> /dev/null || echo 0)
    echo $((k + 1)) > "$dir/next"
    echo "$k"
} 9> "$dir/lock")
cpu=${cpus[$((n % ${#cpus[@]}))]}
echo "pin.sh: CPU $cpu for $1" >&2
exec taskset -c "$cpu" "$@"
