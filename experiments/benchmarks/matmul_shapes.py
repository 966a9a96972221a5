"""The matmuls of one 2-layer IST step, each timed alone against a square matmul (study 1's limit, in detail).

Run from the repository root::

    .venv/bin/python -m experiments.benchmarks.matmul_shapes [--workers 2] [--reps 9]

For the 2-layer speech MLP (4096 -> 4096 -> 35, batch 128) split over W workers, every worker's first layer is
``[128, 4096] @ [4096, 4096 / W]``. A training step needs its forward product and its weight gradient
``x^T dy: [128, 4096]^T @ [128, 4096 / W]``, a contraction over only 128 rows into a large result. Both are timed
batched over W as the vmapped local phase runs them, with the SGD update fused onto the weight gradient, and
interleaved with a square ``2048^3`` matmul. Prints one line per candidate: median milliseconds and GFLOP/s.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from experiments.benchmarks import measure


def main(argv=None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args(argv)
    W, B, D = args.workers, 128, 4096
    N = D // W
    rng = np.random.default_rng(0)
    x = jax.device_put(rng.standard_normal((W, B, D), np.float32))
    k = jax.device_put(rng.standard_normal((W, D, N), np.float32))
    dy = jax.device_put(rng.standard_normal((W, B, N), np.float32))
    sq = jax.device_put(rng.standard_normal((2048, 2048), np.float32))
    forward = jax.jit(lambda x, k: jnp.einsum("wbd,wdn->wbn", x, k))
    weight_grad = jax.jit(lambda x, dy: jnp.einsum("wbd,wbn->wdn", x, dy))
    grad_and_update = jax.jit(lambda k, x, dy: k - 0.01 * jnp.einsum("wbd,wbn->wdn", x, dy))
    square = jax.jit(lambda a: a @ a)
    t = measure.interleaved({
        "forward": lambda: forward(x, k),
        "weight_gradient": lambda: weight_grad(x, dy),
        "weight_gradient+sgd": lambda: grad_and_update(k, x, dy),
        "square_2048": lambda: square(sq),
    }, args.reps)
    rates = {}
    for name, timing in t.items():
        flops = 2 * 2048 ** 3 if name == "square_2048" else 2 * W * B * D * N
        rates[name] = flops / timing.median / 1e9
        print(f"{name:22s} {timing.median * 1e3:8.2f} ms  {rates[name]:7.1f} GFLOP/s")
    return rates


if __name__ == "__main__":
    main()
