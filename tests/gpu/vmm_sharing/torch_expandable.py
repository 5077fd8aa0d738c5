#!/usr/bin/env python3
"""PyTorch with expandable segments (cuMemCreate + cuMemMap per 20 MiB page)
inside a cushare slice: fill until OOM, free half, fill again, then one
tensor larger than the slice. Prints `RESULT key=value ...` last."""
import os
import sys

import torch

MiB = 1 << 20
conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
if "expandable_segments:True" not in conf:
    print(f"FAIL PYTORCH_CUDA_ALLOC_CONF={conf!r} lacks expandable_segments:True")
    sys.exit(1)
free, total = torch.cuda.mem_get_info()
print(f"VIEW total={total // MiB} MiB free={free // MiB} MiB", flush=True)
step = 256 * MiB
chunks, oom1, oom2, big = [], False, False, False
try:
    while len(chunks) < 4096:
        chunks.append(torch.ones(step, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    oom1 = True
first = len(chunks) * 256
print(f"OOM={oom1} after {first} MiB in tensors, reserved "
      f"{torch.cuda.memory_reserved() // MiB} MiB", flush=True)
del chunks[len(chunks) // 2:]
torch.cuda.empty_cache()   # unmaps and releases the freed pages
kept = len(chunks) * 256
try:
    while len(chunks) < 4096:
        chunks.append(torch.ones(step, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    oom2 = True
second = len(chunks) * 256
ok_data = all(int(c[::65536].sum()) == c[::65536].numel() for c in chunks)
chunks.clear()
torch.cuda.empty_cache()
try:
    torch.empty(total + 512 * MiB, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    big = True
free2, _ = torch.cuda.mem_get_info()
print(f"RESULT total_mib={total // MiB} first_mib={first} oom1={int(oom1)} kept_mib={kept} "
      f"refill_mib={second} oom2={int(oom2)} big_refused={int(big)} data_ok={int(ok_data)} "
      f"free_at_end_mib={free2 // MiB}", flush=True)
