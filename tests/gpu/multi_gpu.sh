#!/usr/bin/env bash
# Two-GPU acceptance (needs the nvidia-h200-x2 machine kind):
#   tests/gpu/multi_gpu.sh BUILD_DIR OUTDIR
# Per-device budgets with and without a swapped CUDA_VISIBLE_DEVICES, an
# NCCL all-reduce under limits (NVLink multicast off), and the limiter on a
# first visible device that is not physical device 0.
set -u
B=${1:?build dir}; out=${2:?out dir}; mkdir -p "$out"
C=$B/cushare
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee -a "$out/multi_gpu.log") 2>&1
nvidia-smi -L
view='import torch; print([(i, torch.cuda.get_device_name(i), torch.cuda.mem_get_info(i)[1] >> 20) for i in range(torch.cuda.device_count())])'
echo "== --mem 2GiB,6GiB, CUDA_VISIBLE_DEVICES unset (expect cuda:0 2048 MiB, cuda:1 6144 MiB)"
"$C" run --mem 2GiB,6GiB -- python3 -c "$view"
echo "== same, CUDA_VISIBLE_DEVICES=1,0 (the budgets follow the visible order)"
CUDA_VISIBLE_DEVICES=1,0 "$C" run --mem 2GiB,6GiB -- python3 -c "$view"
echo "== NCCL all-reduce between the two devices under limits"
cat > /tmp/allreduce.py <<'PY'
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
def work(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    dist.init_process_group("nccl", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    print(f"rank {rank}: sum element {x[0].item()} (expect 3.0), view {torch.cuda.mem_get_info()[1] >> 20} MiB")
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(work, nprocs=2)
PY
"$C" run --mem 2GiB,6GiB --sm 50 -- python3 /tmp/allreduce.py
echo "== nvidia-smi inside the same slice, both orders"
"$C" run --mem 2GiB,6GiB -- nvidia-smi --query-gpu=index,uuid,memory.total --format=csv
CUDA_VISIBLE_DEVICES=1,0 "$C" run --mem 2GiB,6GiB -- nvidia-smi --query-gpu=index,uuid,memory.total --format=csv
echo "== identity and limiter on physical device 1 as the first visible device"
cat > /tmp/mm.py <<'PY'
import sys, torch, time
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20): a @ a
torch.cuda.synchronize(); t = time.time(); n = 0
while time.time() - t < 6:
    for _ in range(4): a @ a
    torch.cuda.synchronize(); n += 4
print(f"{sys.argv[1]}: {n / (time.time() - t):.0f} matmuls/s on {torch.cuda.get_device_name()}")
PY
CUDA_VISIBLE_DEVICES=1 python3 /tmp/mm.py "native, physical 1"
L=/tmp/mg.ledger; rm -f "$L"
CUDA_VISIBLE_DEVICES=1 "$C" run --ledger "$L" --mem 4GiB --sm 25 --policy force -- python3 /tmp/mm.py "cushare --sm 25, physical 1" &
job=$!
for _ in $(seq 40); do [ -e "$L" ] && break; sleep 0.5; done  # torch imports first
sleep 2; "$C" status "$L"; nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv
wait "$job"
echo "== the limiter on device 1 while device 0 runs unlimited in another tenant"
CUDA_VISIBLE_DEVICES=0 python3 /tmp/mm.py "native, physical 0 (concurrent)" &
n0=$!
CUDA_VISIBLE_DEVICES=1,0 "$C" run --mem 4GiB,4GiB --sm 50,100 --policy force -- python3 /tmp/mm.py "cushare --sm 50 on visible 0 = physical 1"
wait "$n0"
