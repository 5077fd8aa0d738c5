# Memory-slice acceptance: a framework sees the slice in its memory-info
# call, allocates up to the budget, and gets its usual OOM error beyond it.
# Usage: python3 mem_frameworks.py torch|cupy|jax [BUDGET_MIB]
import sys, json
fw = sys.argv[1]
budget = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
MiB = 1 << 20
chunk = 256 * MiB
res = {"framework": fw}

if fw == "torch":
    import torch
    free, total = torch.cuda.mem_get_info()
    res["mem_get_info_MiB"] = [free // MiB, total // MiB]
    held = []
    try:
        while True:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        res["oom_error"] = type(e).__name__
    res["allocated_MiB"] = len(held) * chunk // MiB
    del held
    torch.cuda.empty_cache()
    try:
        big = torch.empty(5 << 30, dtype=torch.uint8, device="cuda")
        res["5GiB_tensor"] = "succeeded"
    except torch.OutOfMemoryError as e:
        res["5GiB_tensor"] = type(e).__name__
elif fw == "cupy":
    import cupy
    free, total = cupy.cuda.runtime.memGetInfo()
    res["mem_get_info_MiB"] = [free // MiB, total // MiB]
    # CuPy's default memory pool: it raises cupy's OutOfMemoryError.
    held = []
    try:
        while True:
            held.append(cupy.empty(chunk, dtype=cupy.uint8))
    except cupy.cuda.memory.OutOfMemoryError as e:
        res["oom_error"] = type(e).__name__
    res["allocated_MiB"] = len(held) * chunk // MiB
    del held
    try:
        cupy.empty(5 << 30, dtype=cupy.uint8)
        res["5GiB_array"] = "succeeded"
    except cupy.cuda.memory.OutOfMemoryError as e:
        res["5GiB_array"] = type(e).__name__
elif fw == "jax":
    import os
    import jax, jax.numpy as jnp
    d = jax.devices()[0]
    stats = d.memory_stats() or {}
    res["bytes_limit_MiB"] = stats.get("bytes_limit", 0) // MiB
    held = []
    try:
        while True:
            a = jnp.zeros((chunk,), dtype=jnp.uint8)
            a.block_until_ready()
            held.append(a)
    except Exception as e:  # XlaRuntimeError RESOURCE_EXHAUSTED
        res["oom_error"] = type(e).__name__ + ": " + str(e).split("\n")[0][:120]
    res["allocated_MiB"] = len(held) * chunk // MiB
print(json.dumps(res))
