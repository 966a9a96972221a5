"""Extreme-classification benchmarks: the embedding bag, the output layer's local phase, IST's round overhead.

Run from the repository root::

    .venv/bin/python -m experiments.benchmarks.xmc            # full, about a minute on 2 CPU cores
    .venv/bin/python -m experiments.benchmarks.xmc --quick    # CI-size smoke run

Workload: xmc-debian-deps' shape (31,435 features, 15,186 labels, 256 nonzero slots a point of which about 30 hold a
feature), `istjax.models.SparseMLP` with H = 512, B = 128, W = 2 workers. Studies (the issue's speed goals):

1. `istjax.models.EmbeddingBag` (``sum_j value_j * kernel[id_j]``, `SLOT_CHUNK` slots at a time) against jitted
   gathers of the same kernel rows in the same chunks (``kernel[ids]``, ``[B, chunk, H]`` a chunk, not summed: what
   the bag must at least read and lay out): goal >= 0.5 of their rate (the bag that gathers all slots at once is
   reported against one gather of its ``[B, nnz, H]`` block); and the scratch memory of the kernel's gradient
   against the bag that gathers every slot at once (the block and its cotangent): goal <= 0.25 of it (XLA's buffer
   assignment, not a timing);
2. the output layer's local phase (logits of a worker's ``[B, H/W]`` hidden units on all labels, the softmax
   multi-label loss, its gradients for the kernel and the hidden units) against the same three matmuls timed
   alone on preallocated inputs: goal >= 0.6 of their rate;
3. partition + extract + merge as a share of an IST round at K = 20 (simulate runtime): goal <= 10 %.

Ratios of medians measured interleaved in one process (`measure.interleaved`); results go to ``--out`` (default
``experiments/benchmarks/results_xmc.json`` and ``.md``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from experiments.benchmarks import measure
from experiments.benchmarks import run as suite
from istjax.models import SparseMLP
from istjax.models.embedding_bag import SLOT_CHUNK, bag, slot_chunks
from istjax.xmc import loss as xmc_loss

FULL = dict(features=31_435, labels=15_186, hidden=512, batch=128, nnz=256, filled=30, workers=2, k=20, reps=5)
QUICK = dict(features=2_000, labels=1_000, hidden=64, batch=32, nnz=32, filled=8, workers=2, k=4, reps=2)


def _pairs(rng, n: int, s: dict) -> np.ndarray:
    """``[n, nnz, 2]`` pairs: ``filled`` features a row, the rest padding (id 0, value 0), as the data has them."""
    x = np.zeros((n, s["nnz"], 2), np.float32)
    x[:, :s["filled"], 0] = rng.integers(0, s["features"], size=(n, s["filled"]))
    x[:, :s["filled"], 1] = rng.random((n, s["filled"]))
    return x


def bag_vs_gather(s: dict) -> dict[str, Any]:
    """The bag at its default chunk (`SLOT_CHUNK` slots at a time) and all slots at once (``[B, nnz, H]``), forward
    and the kernel's gradient, against a gather of the same rows; each one's scratch memory (XLA's buffer
    assignment of the compiled function)."""
    rng = np.random.default_rng(0)
    x = jax.device_put(_pairs(rng, s["batch"], s))
    kernel = jax.device_put(rng.standard_normal((s["features"], s["hidden"]), np.float32))
    dy = jax.device_put(rng.standard_normal((s["batch"], s["hidden"]), np.float32))
    ids = jax.device_put(x[..., 0].astype(jnp.int32))
    fns = {}
    for name, chunk in (("bag", SLOT_CHUNK), ("bag_block", 0)):
        fns[name] = jax.jit(lambda x, k, c=chunk: bag(x, k, c))
        fns[f"{name}_grad"] = jax.jit(lambda x, k, c=chunk: jax.grad(lambda k: jnp.vdot(bag(x, k, c), dy))(k))
    gather = jax.jit(lambda i, k: jnp.take(k, i, axis=0))
    gather_chunks = jax.jit(lambda x, k: _gather_chunks(x, k, SLOT_CHUNK))
    scratch = {f"{name}_scratch_bytes": fn.lower(x, kernel).compile().memory_analysis().temp_size_in_bytes
               for name, fn in fns.items()}
    t = measure.interleaved({**{name: (lambda fn=fn: fn(x, kernel)) for name, fn in fns.items()},
                             "gather": lambda: gather(ids, kernel),
                             "gather_chunks": lambda: gather_chunks(x, kernel)}, s["reps"])
    return {"slot_chunk": SLOT_CHUNK, **{f"{name}_s": t[name].median for name in fns}, **scratch,
            "gather_s": t["gather"].median, "gather_chunks_s": t["gather_chunks"].median,
            "bag_vs_gather": t["gather_chunks"].median / t["bag"].median,
            "bag_block_vs_gather": t["gather"].median / t["bag_block"].median,
            "bag_vs_block": t["bag_block"].median / t["bag"].median,
            "bag_grad_vs_block": t["bag_block_grad"].median / t["bag_grad"].median,
            "timings": {k: v.as_dict() for k, v in t.items()}}


def _gather_chunks(x: jax.Array, kernel: jax.Array, chunk: int) -> jax.Array:
    """The rows the bag reads, gathered as it gathers them (``chunk`` slots at a time, `slot_chunks`) and not
    summed: each chunk's ``[B, chunk, H]`` block overwrites the last (the loop keeps every gather)."""
    def take(_, x_chunk):
        return jnp.take(kernel, x_chunk[..., 0].astype(jnp.int32), axis=0), None

    chunks = slot_chunks(x, chunk)
    return jax.lax.scan(take, jnp.zeros(chunks.shape[1:-1] + kernel.shape[-1:], kernel.dtype), chunks)[0]


def output_phase(s: dict) -> dict[str, Any]:
    """The output layer of one worker: value and gradients of the loss for its kernel and its hidden units."""
    rng = np.random.default_rng(1)
    b, h, c = s["batch"], s["hidden"] // s["workers"], s["labels"]
    hidden = jax.device_put(rng.standard_normal((b, h), np.float32))
    kernel = jax.device_put(rng.standard_normal((h, c), np.float32) / np.sqrt(h))
    labels = np.full((b, 8), -1, np.int32)
    labels[:, :4] = rng.integers(0, c, size=(b, 4))
    labels = jax.device_put(labels)
    dlogits = jax.device_put(rng.standard_normal((b, c), np.float32))

    def loss(k, x):
        return xmc_loss.multilabel_loss(x @ k, labels)

    phase = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    matmuls = jax.jit(lambda x, k, d: (x @ k, x.T @ d, d @ k.T))  # forward, kernel gradient, input gradient
    t = measure.interleaved({"phase": lambda: phase(kernel, hidden),
                             "matmuls": lambda: matmuls(hidden, kernel, dlogits)}, s["reps"])
    return {"shape": [b, h, c], "phase_s": t["phase"].median, "matmuls_s": t["matmuls"].median,
            "phase_vs_matmuls": t["matmuls"].median / t["phase"].median,
            "timings": {k: v.as_dict() for k, v in t.items()}}


def round_overhead(s: dict) -> dict[str, Any]:
    rng = np.random.default_rng(2)
    w, k, b = s["workers"], s["k"], s["batch"]
    model = SparseMLP(hidden=(s["hidden"],), num_classes=s["labels"], num_features=s["features"])
    task = istjax.classifier(model, jnp.asarray(_pairs(rng, 2, s)), num_classes=s["labels"])
    alg = istjax.ist(task, optax.adam(1e-3), num_workers=w, local_steps=k)
    state = jax.jit(alg.init)(jax.random.key(0))
    labels = np.full((w, k, b, 8), -1, np.int32)
    labels[..., :4] = rng.integers(0, s["labels"], size=(w, k, b, 4))
    batch = {"x": jax.device_put(_pairs(rng, w * k * b, s).reshape(w, k, b, s["nnz"], 2)),
             "y": jax.device_put(labels)}
    return measure.round_overhead(alg, state, batch, s["reps"])


def targets(out: dict[str, Any]) -> list[tuple[str, float, str, float]]:
    bg, op, ro = out["bag"], out["output"], out["round_overhead"]
    return [("embedding bag / gathers of the same rows in the same chunks", bg["bag_vs_gather"], ">=", 0.5),
            ("embedding bag's gradient scratch memory / all slots at once",
             bg["bag_grad_scratch_bytes"] / bg["bag_block_grad_scratch_bytes"], "<=", 0.25),
            ("output layer's local phase / its matmuls alone", op["phase_vs_matmuls"], ">=", 0.6),
            measure.overhead_target(ro)]


def run(quick: bool) -> dict[str, Any]:
    return suite.run_family(quick, QUICK if quick else FULL, [
        ("bag", "embedding bag vs gather", bag_vs_gather),
        ("output", "output layer's local phase vs its matmuls", output_phase),
        ("round_overhead", "IST round overhead", round_overhead)], targets)


def markdown(out: dict[str, Any]) -> str:
    s = out["sizes"]
    lines = measure.heading("XMC benchmarks", out, f"{s['features']:,} features, {s['labels']:,} labels, "
                            f"H = {s['hidden']}, B = {s['batch']}, {s['filled']} of {s['nnz']} slots filled, "
                            f"W = {s['workers']}")
    bg, op = out["bag"], out["output"]
    lines += ["", f"Embedding bag {bg['bag_s'] * 1e3:.2f} ms ({bg['slot_chunk']} slots at a time; all at once "
                  f"{bg['bag_block_s'] * 1e3:.2f} ms), the same rows gathered in its chunks {bg['gather_chunks_s'] * 1e3:.2f} "
                  f"ms, as one block {bg['gather_s'] * 1e3:.2f} ms (the bag all at once "
                  f"{bg['bag_block_vs_gather']:.2f} of that); the kernel's gradient "
                  f"{bg['bag_grad_s'] * 1e3:.2f} ms (all at once {bg['bag_block_grad_s'] * 1e3:.2f} ms); scratch "
                  f"memory forward {bg['bag_scratch_bytes'] / 1e6:.1f} MB (all at once "
                  f"{bg['bag_block_scratch_bytes'] / 1e6:.1f} MB), gradient {bg['bag_grad_scratch_bytes'] / 1e6:.1f} "
                  f"MB ({bg['bag_block_grad_scratch_bytes'] / 1e6:.1f} MB). Output layer "
                  f"{op['shape']}: local phase {op['phase_s'] * 1e3:.2f} ms, its matmuls {op['matmuls_s'] * 1e3:.2f} ms. "
                  + measure.round_line(out["round_overhead"])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure.family_main(argv, name="xmc", doc=__doc__, run=run, markdown=markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
