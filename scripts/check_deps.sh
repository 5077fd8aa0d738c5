#!/bin/sh
# The folder import graph of src/ (from #include "folder/file" lines) and a
# check that it has no cycle: dependencies flow one way (docs/architecture.md).
# Usage: scripts/check_deps.sh [SRC_DIR]. Prints "from -> to" edges, then
# either "no cycle" (exit 0) or the folders left in a cycle (exit 1).
set -eu
src=${1:-$(dirname "$0")/../src}
[ -d "$src" ] || { echo "check_deps: no source folder $src" >&2; exit 2; }
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for dir in "$src"/*/; do
    from=$(basename "$dir")
    grep -ho '^#include "[a-z_0-9]*/' "$dir"*.[ch] "$dir"*.def "$dir"*.inc 2>/dev/null |
        sed 's/^#include "//; s/\/$//' | sort -u | while read -r to; do
            [ "$to" = "$from" ] || [ ! -d "$src/$to" ] || echo "$from $to"
        done
done | sort -u >"$edges"
awk '{ print $1 " -> " $2 }' "$edges"
# Kahn's algorithm, repeatedly dropping folders that import nothing left.
left=$(awk '{ print $1; print $2 }' "$edges" | sort -u)
while :; do
    leaves=$(for f in $left; do
        awk -v f="$f" -v left=" $(echo $left) " '$1 == f && index(left, " " $2 " ") { n++ } END { if (!n) print f }' "$edges"
    done)
    [ -n "$leaves" ] || break
    left=$(for f in $left; do echo "$leaves" | grep -qx "$f" || echo "$f"; done)
done
if [ -n "$left" ]; then
    echo "check_deps: import cycle among src folders:" $left >&2
    exit 1
fi
echo "no cycle"
