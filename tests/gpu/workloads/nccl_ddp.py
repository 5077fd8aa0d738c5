#!/usr/bin/env python3
"""nccl_ddp: torch DistributedDataParallel on two GPUs, two processes
(mp.spawn), backend nccl, rendezvous through a file (no TCP port), NVLink
multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 set
here too). Each rank trains an MLP on its own fixed data; after 20 steps
the checksum is sum |parameters| (identical on both ranks; exact, within
1e-5 counts too). Rate = training steps/s (rank 0 decides when the
measured window ends and tells rank 1, so both run the same steps)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"


def work(rank, world, init_file, args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    free, total = torch.cuda.mem_get_info()
    if rank == 0:
        common.view(total, free)
    else:
        common.note(f"rank {rank} view {total >> 20} MiB total, {free >> 20} MiB free")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(256, 1024, generator=g).cuda()
    t = torch.randn(256, 1024, generator=g).cuda()

    def train_step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), t).backward()
        opt.step()

    for _ in range(20):
        train_step()
    chk = torch.tensor([sum(p.double().abs().sum().item() for p in model.parameters())],
                       device="cuda", dtype=torch.float64)
    lo, hi = chk.clone(), chk.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if rank == 0:
        if lo.item() != hi.item():
            common.note(f"ranks disagree: {lo.item():.10g} vs {hi.item():.10g}")
        common.checksum(chk.item(), tol=1e-5, digits=10)

    meter = common.Meter(args.secs, args.warmup) if rank == 0 else None
    more = torch.ones(1, device="cuda")
    while True:
        for _ in range(5):
            train_step()
        torch.cuda.synchronize()
        if rank == 0:
            more.fill_(1.0 if meter.add(5) else 0.0)
        dist.broadcast(more, 0)
        if more.item() == 0.0:
            break
    if rank == 0:
        common.emit("RATE", f"{meter.rate:.6g}", "steps/s")
    dist.destroy_process_group()


def main():
    args = common.parse_args(__doc__)
    import torch
    import torch.multiprocessing as mp
    n = torch.cuda.device_count()
    if n < 2:
        print(f"nccl_ddp: needs 2 visible GPUs, has {n}", flush=True)
        sys.exit(3)
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(work, args=(2, os.path.join(d, "rendezvous"), args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
