#!/usr/bin/env bash
# GPU acceptance for cushare, run on the H200 machine in one go:
#   tests/gpu/acceptance.sh OUTDIR [SECTIONS...]
# Sections (default all): build foundation memory init limiter dvfs overhead;
# smi runs only the nvidia-smi part of memory.
# Writes OUTDIR/acceptance.log (everything), plus raw files of each section
# (init/ and limiter/ subfolders); the device tool brings back few files,
# so the caller tars OUTDIR.
set -u
out=$(mkdir -p "${1:?OUTDIR}" && cd "$1" && pwd)
shift
sections=${*:-build foundation memory init limiter dvfs overhead}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
B=$root/build-gpu
log=$out/acceptance.log
exec > >(tee -a "$log") 2>&1
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

section() { printf '\n======== %s ========\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; echo "[exit $?]"; }
want() { case " $sections " in *" $1 "*) return 0;; esac; return 1; }

section environment
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__)'
git -C "$root" log --oneline -1 2>/dev/null || true

if want build; then
  section build
  run cmake -S "$root" -B "$B" -DCMAKE_BUILD_TYPE=Release
  run cmake --build "$B" -j 16 --target libcushare cushare_cli cushare_bench bench_overhead slice_demo
  run nvcc -O2 -arch=sm_90 -o "$B/vecadd" tests/gpu/vecadd.cu
fi
C=$B/cushare

if want foundation; then
  section "foundation: CUDA C program, native vs cushare run (no limits)"
  "$B/vecadd" > "$out/vecadd.native"; "$C" run -- "$B/vecadd" > "$out/vecadd.cushare"
  cat "$out/vecadd.native" "$out/vecadd.cushare"
  cmp -s "$out/vecadd.native" "$out/vecadd.cushare" && echo "SAME OUTPUT" || echo "OUTPUT DIFFERS"
  section "foundation: PyTorch, native vs cushare run (no limits)"
  python3 tests/gpu/torch_same.py > "$out/torch.native"; "$C" run -- python3 tests/gpu/torch_same.py > "$out/torch.cushare"
  cat "$out/torch.native" "$out/torch.cushare"
  cmp -s "$out/torch.native" "$out/torch.cushare" && echo "SAME OUTPUT" || echo "OUTPUT DIFFERS"
  section "foundation: entry paths seen by torch (debug log of routing)"
  CUSHARE_LOG_LEVEL=debug "$C" run -- python3 -c 'import torch; torch.zeros(1,device="cuda"); print("ok")' 2>&1 | tail -5
fi

if want memory; then
  for fw in torch cupy jax; do
    section "memory: $fw under cushare run --mem 4GiB"
    run "$C" run --mem 4GiB -- python3 tests/gpu/mem_frameworks.py "$fw" 4096
  done
  section "memory: two processes, one 4 GiB ledger, each asks for 3 GiB"
  L=/tmp/acc-two.ledger; rm -f "$L"
  "$C" run --mem 4GiB --ledger "$L" -- python3 tests/gpu/mem_hold.py 3072 6 &
  holder=$!
  sleep 3
  "$C" run --mem 4GiB --ledger "$L" -- python3 tests/gpu/mem_hold.py 3072 1
  "$C" status "$L"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  wait "$holder"  # not a bare wait: the log's tee is a child too
fi

if want memory || want smi; then
  section "memory: nvidia-smi inside a 4 GiB slice"
  run "$C" run --mem 4GiB -- nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv
  "$C" run --mem 4GiB -- nvidia-smi | head -12
fi

if want init; then
  section "start-up density: bench init"
  if [ -x bench/run_init_sweep.sh ]; then
    CUSHARE=$C run bench/run_init_sweep.sh "$out/init"
    cat "$out/init/init-p99.csv" "$out/init/ctx-p99.csv" 2>/dev/null
  else
    echo "bench/run_init_sweep.sh missing"
  fi
fi

if want limiter; then
  section "compute limiter"
  if [ -x tests/gpu/limiter/run.sh ]; then
    OUT=$out/limiter BUILD=$B QUICK=${LIMITER_QUICK:-} run tests/gpu/limiter/run.sh
  else
    echo "tests/gpu/limiter/run.sh missing"
  fi
fi
if want dvfs; then
  section "compute limiter: clock and power of a matmul alone vs at --sm 50 (force)"
  python3 bench/gpu-probes/dvfs_probe.py native
  "$C" run --sm 50 --policy force -- python3 bench/gpu-probes/dvfs_probe.py "sm50"
  "$C" run --sm 75 --policy force -- python3 bench/gpu-probes/dvfs_probe.py "sm75"
fi

if want overhead; then
  section "overhead: empty launch and 1 MiB alloc+free, native vs cushare (alternating)"
  run bench/overhead/run.sh "$B" "$out" 5
fi

section done
