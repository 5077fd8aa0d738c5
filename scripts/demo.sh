#!/usr/bin/env bash
# `make demo`: one tenant with a 1 GiB slice and two processes sharing it,
# on the real GPU when one is present, else on the simulated device
# (tests/fakecuda). Usage: scripts/demo.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cushare=$build/cushare
demo=$build/slice_demo

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== cushare demo on the real GPU: $(nvidia-smi -L | head -1)"
  budget=4GiB hold=1024
  # The pair's share needs the watcher's one-second windows to settle
  # (clock boost, fulfilment): measure 5 s after 2 s of warm-up.
  pace=(--secs 5 --warmup 2 --start-delay 3)
else
  echo "== no NVIDIA GPU here: cushare demo on the simulated device (tests/fakecuda, 16 GiB)"
  export LD_LIBRARY_PATH=$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export FAKECUDA_STATE=$(mktemp -u /tmp/cushare-demo-fake.XXXXXX)
  export FAKECUDA_NS_PER_BLOCK=1  # short simulated kernels for the compute-share step
  budget=1GiB hold=600
  pace=(--secs 1 --warmup 0.3 --start-delay 1)
fi
ledger=$(mktemp -u /tmp/cushare-demo-ledger.XXXXXX)
trap 'rm -f "$ledger" ${FAKECUDA_STATE:-}' EXIT

echo "== 1. a program in a $budget slice sees the slice, not the card"
"$cushare" run --mem "$budget" --ledger "$ledger" -- "$demo" view

echo "== 2. two processes of one tenant share the budget: one holds $hold MiB, the other fills the rest"
"$cushare" run --mem "$budget" --ledger "$ledger" -- "$demo" hold "$hold" 3 &
holder=$!
sleep 1.5
"$cushare" run --mem "$budget" --ledger "$ledger" -- "$demo" fill 64

echo "== 3. cushare status while the holder still runs"
"$cushare" status "$ledger" || true
wait "$holder"

echo "== 4. a compute share: an element-wise kernel loop at --sm 25 and 50 (policy force), vs its native rate"
bench=$(mktemp -d /tmp/cushare-demo-bench.XXXXXX)
"$cushare" bench limiter "${pace[@]}" --limits 25,50 \
  --launchbound none --launchcost none --out "$bench" | sed -n '/^run /,/A:B ratio/p' || true
rm -rf "$bench"
echo "== done: over-budget allocations got CUDA_ERROR_OUT_OF_MEMORY, views showed the slice,"
echo "   and the limited runs show the share of the native rate they achieved"
