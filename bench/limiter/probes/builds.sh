#!/usr/bin/env bash
# The same graph-replay runs under two builds of cushare, to see
# what a change to the launch path does on a real GPU. One device call:
#   bench/limiter/probes/builds.sh OUT_DIR NAME=SOURCE_DIR [NAME=SOURCE_DIR...]
# Each SOURCE_DIR (a checkout of this repository, e.g. from `git archive`)
# is built into build-NAME; then, per build, `cushare bench limiter` on the
# graph workload: --sm 99 (what the launch path costs a tenant that must
# run at full speed), the 25+75 and 20+30+50 mixes, RUNS times (default 2),
# and the empty-kernel launch cost natively, without a limit and at 99 %.
# OUT/NAME.log and OUT/NAME/; OUT/summary.txt has the rows.
set -u
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR NAME=SOURCE_DIR..." >&2; exit 2; }
OUT=$1
shift
root=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$OUT"
: > "$OUT/summary.txt"
{ date -u; nvidia-smi -L; git -C "$root" log --oneline -1; } > "$OUT/env.txt" 2>&1
# shellcheck source=bench/limiter/probes/build_each.sh
. "$(dirname "$0")/build_each.sh"
build_each "$OUT" "libcushare cushare_cli limiter_workload" "$@"
for b in "$@"; do
    name=${b%%=*} build=$root/build-${b%%=*}
    [ -x "$build/cushare" ] || continue
    CUSHARE_LOG_LEVEL=debug "$build/cushare" bench limiter --secs "${SECS:-3}" --warmup "${WARMUP:-1}" \
        --runs "${RUNS:-2}" --limits 99 --mix 25+75 --mix 20+30+50 --tolerance 2 --conserve 97 \
        --start-delay "${START_DELAY:-6}" --launchbound none --out "$OUT/$name" \
        --workload "graph=python3 $root/bench/limiter/graph.py" > "$OUT/$name.log" 2>&1
    { echo "== $name"; grep -E "^(native|cushare, no|--sm|tenant|together|launch)" "$OUT/$name.log"; } |
        tee -a "$OUT/summary.txt"
done
