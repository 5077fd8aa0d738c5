#!/usr/bin/env python3
"""jax_jit: a jitted f(a, b) = tanh(a @ b / 45) @ b / 45 on 2048 x 2048
fp32, chained. JAX keeps its default (XLA_PYTHON_CLIENT_PREALLOCATE on):
it preallocates 75 % of the memory the device reports, which under
--mem is 75 % of the slice. Checksum = sum |f(a, b)| within 1e-2 (XLA picks
GEMM algorithms by timing them, and TF32 is its default precision).
Rate = calls/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    args = common.parse_args(__doc__)
    import jax
    import jax.numpy as jnp
    dev = jax.devices()[0]
    stats = dev.memory_stats() or {}
    limit = stats.get("bytes_limit")
    common.note(f"jax {jax.__version__}, XLA bytes_limit "
                f"{'?' if limit is None else limit >> 20} MiB (preallocation default)")
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(k1, (2048, 2048), jnp.float32)
    b = jax.random.normal(k2, (2048, 2048), jnp.float32)

    @jax.jit
    def f(x, w):
        return jnp.tanh(x @ w / 45.0) @ w / 45.0

    y = f(a, b)
    common.checksum(float(jnp.sum(jnp.abs(y))), tol=1e-2)

    def step():
        y = a
        for _ in range(20):
            y = f(y, b)
        y.block_until_ready()
        return 20

    common.measure(step, args, "calls/s")


if __name__ == "__main__":
    main()
