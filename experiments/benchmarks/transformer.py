"""Transformer benchmarks: IST's local phase against its matmuls, extract + merge against a copy, the round overhead.

Run from the repository root::

    .venv/bin/python -m experiments.benchmarks.transformer            # full, a few minutes on 2 CPU cores
    .venv/bin/python -m experiments.benchmarks.transformer --quick    # CI-size smoke run

Workload: `experiments/configs/shakespeare_transformer.py`'s model (`istjax.models.Transformer`, 4 layers, 4 heads,
width 128, 512 feed-forward units, context 64, split by width), B = 32 windows, W = 2 workers. Studies (issue 34's
speed goals):

1. a worker's local phase (K Adam steps of its sub-transformer: half the heads and units of every layer) against the
   matmuls of those K steps timed alone on preallocated inputs (every projection, the attention's two batched
   matmuls and the head, forward and both backward products): goal >= 0.6 of their rate;
2. extract + merge against a plain copy of the bytes they write (the sub-networks' and the new global model's):
   goal >= 0.5 of the copy's rate;
3. partition + extract + merge as a share of an IST round at K = 20 (simulate runtime): goal <= 10 %.

Ratios of medians measured interleaved in one process (`measure.interleaved`); results go to ``--out`` (default
``experiments/benchmarks/results_transformer.json`` and ``.md``).
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
from istjax.algorithms.base import local_train
from istjax.core.state import WorkerState
from istjax.models import Transformer

FULL = dict(layers=4, embed=128, heads=4, mlp=512, context=64, vocab=84, batch=32, workers=2, k=20, reps=5)
QUICK = dict(layers=2, embed=32, heads=4, mlp=64, context=16, vocab=84, batch=8, workers=2, k=4, reps=2)


def _task(s: dict) -> istjax.Task:
    model = Transformer(num_classes=s["vocab"], num_layers=s["layers"], embed_dim=s["embed"], num_heads=s["heads"],
                        mlp_dim=s["mlp"], context=s["context"])
    return istjax.classifier(model, jnp.zeros((2, s["context"]), jnp.int32), num_classes=s["vocab"])


def _batches(s: dict, shape: tuple[int, ...], seed: int = 0) -> dict:
    x = np.random.default_rng(seed).integers(0, s["vocab"], size=shape + (s["context"] + 1,))
    return {"x": jax.device_put(x[..., :-1].astype(np.int32)), "y": jax.device_put(x[..., 1:].astype(np.int32))}


def _step_matmuls(s: dict, heads: int, units: int):
    """The matmuls of one training step of a sub-transformer with ``heads`` heads and ``units`` feed-forward units a
    layer, on preallocated inputs: ``(fn, args)``. Per layer: the query/key/value and output projections, the
    attention's scores and weighted values, the feed-forward in and out; then the head; each forward and its two
    backward products (weight and input gradients; the input gradient of the first layer's projections included:
    the embedding's gradient needs it)."""
    rng = np.random.default_rng(3)
    n, t, d, k = s["batch"] * s["context"], s["context"], s["embed"], s["embed"] // s["heads"]
    shapes = [(d, 3 * heads * k), (heads * k, d), (d, units), (units, d)] * s["layers"] + [(d, s["vocab"])]
    dense = [(jax.device_put(rng.standard_normal((n, i), np.float32)),
              jax.device_put(rng.standard_normal((i, o), np.float32)),
              jax.device_put(rng.standard_normal((n, o), np.float32))) for i, o in shapes]
    bh = s["batch"] * heads
    att = [tuple(jax.device_put(rng.standard_normal(shape, np.float32)) for shape in
                 ((bh, t, k), (bh, t, k), (bh, t, t))) for _ in range(s["layers"])]

    def fn(dense, att):
        out = []
        for x, w, g in dense:
            out += [x @ w, x.T @ g, g @ w.T]
        for q, kk, p in att:  # scores q k^T and p v, forward and backward (p stands for the weights and their grad)
            out += [jnp.einsum("btk,bsk->bts", q, kk), jnp.einsum("bts,bsk->btk", p, kk),
                    jnp.einsum("bts,btk->bsk", p, q), jnp.einsum("bts,bsk->btk", p, q),
                    jnp.einsum("bts,btk->bsk", p, kk), jnp.einsum("bts,btk->bsk", p, q)]
        return out

    return jax.jit(fn), (dense, att)


def _step_elementwise(s: dict, heads: int, units: int):
    """The work of one training step of the same sub-transformer that is not a matmul, on preallocated inputs, each
    forward with its backward (`jax.vjp`): ``(fn, args)`` whose outputs are ``{part: arrays}``. Per layer: two
    LayerNorms over ``[B, T, D]``, the causal mask and softmax over ``[B, heads, T, T]``, GELU over
    ``[B, T, units]``; then the final LayerNorm, the cross-entropy over ``[B, T, vocab]`` and the embedding's gather
    and its gradient's scatter-add. (Adam's update is timed as the local phase under plain SGD instead.)"""
    rng = np.random.default_rng(4)
    b, t, d, v, layers = s["batch"], s["context"], s["embed"], s["vocab"], s["layers"]

    def put(*shape):
        return jax.device_put(rng.standard_normal(shape, np.float32))

    def layer_norm(x):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-6)

    def softmax(scores):
        mask = jnp.tril(jnp.ones((t, t), bool))
        return jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)

    def cross_entropy(logits, y):
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def vjp(f, *xs):
        y, back = jax.vjp(f, *xs)
        return back(jax.tree.map(jnp.ones_like, y))

    table = put(v, d)
    args = {"layer_norm": [put(b, t, d) for _ in range(2 * layers + 1)],
            "softmax": [put(b, heads, t, t) for _ in range(layers)],
            "gelu": [put(b, t, units) for _ in range(layers)],
            "cross_entropy": (put(b, t, v), jax.device_put(rng.integers(0, v, (b, t)).astype(np.int32))),
            "embedding": (table, jax.device_put(rng.integers(0, v, (b, t)).astype(np.int32)))}
    parts = {"layer_norm": lambda xs: [vjp(layer_norm, x) for x in xs],
             "softmax": lambda xs: [vjp(softmax, x) for x in xs],
             "gelu": lambda xs: [vjp(jax.nn.gelu, x) for x in xs],
             "cross_entropy": lambda a: vjp(lambda z: cross_entropy(z, a[1]), a[0]),
             "embedding": lambda a: vjp(lambda w: jnp.take(w, a[1], axis=0), a[0])}
    return {k: (jax.jit(f), args[k]) for k, f in parts.items()}


def local_phase(s: dict) -> dict[str, Any]:
    """One worker's K local steps (its sub-transformer, Adam) against the same K steps' matmuls alone; beside them,
    where the rest goes: the same K steps under plain SGD (the difference is Adam's update) and each non-matmul
    part of a step timed alone (`_step_elementwise`), K times."""
    task = _task(s)
    w = s["workers"]
    alg = istjax.ist(task, optax.adam(1e-3), num_workers=w, local_steps=s["k"])
    state = jax.jit(alg.init)(jax.random.key(0))
    workers, _ = jax.jit(alg.distribute)(state)
    one = jax.tree.map(lambda a: a[0], workers)
    slots = alg.sampler.slots(task.spec.group_sizes, w)
    loss = task.train_loss(slots)
    opt = optax.adam(1e-3)
    batches = _batches(s, (s["k"], s["batch"]))
    phase = jax.jit(lambda worker, b: local_train(loss, opt, worker, b))
    start = WorkerState(one.params, one.model_state, opt.init(one.params))
    sgd = optax.sgd(1e-3)
    sgd_phase = jax.jit(lambda worker, b: local_train(loss, sgd, worker, b))
    sgd_start = WorkerState(one.params, one.model_state, sgd.init(one.params))
    mm, args = _step_matmuls(s, s["heads"] // w, s["mlp"] // w)
    rest = _step_elementwise(s, s["heads"] // w, s["mlp"] // w)

    def k_times(fn, *a):
        def go():
            out = None
            for _ in range(s["k"]):
                out = fn(*a)
            return out
        return go

    t = measure.interleaved({"phase": lambda: phase(start, batches), "phase_sgd": lambda: sgd_phase(sgd_start, batches),
                             "matmuls": k_times(mm, *args), **{k: k_times(f, a) for k, (f, a) in rest.items()}},
                            s["reps"])
    parts = {"matmuls": t["matmuls"].median, **{k: t[k].median for k in rest},
             "adam_update": t["phase"].median - t["phase_sgd"].median}
    return {"K": s["k"], "phase_s": t["phase"].median, "matmuls_s": t["matmuls"].median,
            "phase_vs_matmuls": t["matmuls"].median / t["phase"].median,
            "parts_s": parts, "unaccounted_s": t["phase"].median - sum(parts.values()),
            "timings": {k: v.as_dict() for k, v in t.items()}}


def extract_merge(s: dict) -> dict[str, Any]:
    """extract + merge against a copy of the bytes they write: the W sub-networks and the new global model."""
    task = _task(s)
    spec, w = task.spec, s["workers"]
    params = jax.jit(task.init)(jax.random.key(0))
    p = jax.jit(lambda k: istjax.uniform().sample(k, spec.group_sizes, w))(jax.random.key(1))
    ex = jax.jit(lambda params, p: istjax.extract(params, p, spec))
    mg = jax.jit(lambda params, sub, p: istjax.merge(params, sub, p, spec))
    sub = ex(params, p)
    cp = measure.copy_fn()
    written = measure.tree_bytes(sub) + measure.tree_bytes(params)
    buf = jax.device_put(np.zeros((written // 4,), np.float32))
    tree_cp = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))  # the same leaves, one copy each
    t = measure.interleaved({"extract": lambda: ex(params, p), "merge": lambda: mg(params, sub, p),
                             "copy": lambda: cp(buf), "copy_leaves": lambda: tree_cp((sub, params))}, s["reps"])
    both = t["extract"].median + t["merge"].median
    return {"bytes_written": written, "leaves": len(jax.tree.leaves((sub, params))), "extract_s": t["extract"].median,
            "merge_s": t["merge"].median, "copy_s": t["copy"].median, "copy_leaves_s": t["copy_leaves"].median,
            "extract_merge_vs_copy": t["copy"].median / both,
            "extract_merge_vs_copy_leaves": t["copy_leaves"].median / both,
            "timings": {k: v.as_dict() for k, v in t.items()}}


def round_overhead(s: dict) -> dict[str, Any]:
    task = _task(s)
    alg = istjax.ist(task, optax.adam(1e-3), num_workers=s["workers"], local_steps=s["k"])
    state = jax.jit(alg.init)(jax.random.key(0))
    return measure.round_overhead(alg, state, _batches(s, (s["workers"], s["k"], s["batch"])), s["reps"])


def targets(out: dict[str, Any]) -> list[tuple[str, float, str, float]]:
    lp, em, ro = out["local"], out["extract_merge"], out["round_overhead"]
    return [("a worker's local phase / its matmuls alone", lp["phase_vs_matmuls"], ">=", 0.6),
            ("extract + merge / a copy of the bytes they write", em["extract_merge_vs_copy"], ">=", 0.5),
            measure.overhead_target(ro)]


def run(quick: bool) -> dict[str, Any]:
    return suite.run_family(quick, QUICK if quick else FULL, [
        ("local", "local phase vs its matmuls", local_phase),
        ("extract_merge", "extract + merge vs copy", extract_merge),
        ("round_overhead", "IST round overhead", round_overhead)], targets)


def markdown(out: dict[str, Any]) -> str:
    s = out["sizes"]
    lines = measure.heading("Transformer benchmarks", out, f"{s['layers']} layers, {s['heads']} heads, width "
                            f"{s['embed']}, {s['mlp']} feed-forward units, context {s['context']}, B = {s['batch']}, "
                            f"W = {s['workers']}")
    lp, em = out["local"], out["extract_merge"]
    if "parts_s" in lp:
        lines += ["", f"Where the local phase's {lp['phase_s'] * 1e3:.0f} ms go (K = {lp['K']}; each part timed alone, "
                      "K times):", "", "| part | ms | share of the phase |", "|---|---|---|"]
        lines += [f"| {k.replace('_', ' ')} | {v * 1e3:.1f} | {v / lp['phase_s']:.2f} |" for k, v in lp["parts_s"].items()]
        lines += [f"| not accounted for (fusion, dispatch, the rest) | {lp['unaccounted_s'] * 1e3:.1f} | "
                  f"{lp['unaccounted_s'] / lp['phase_s']:.2f} |"]
    lines += ["", f"Local phase (K = {lp['K']}) {lp['phase_s'] * 1e3:.1f} ms, its matmuls {lp['matmuls_s'] * 1e3:.1f} "
                  f"ms. Extract {em['extract_s'] * 1e3:.2f} ms, merge {em['merge_s'] * 1e3:.2f} ms, a copy of the "
                  f"{em['bytes_written'] / 1e6:.1f} MB they write {em['copy_s'] * 1e3:.2f} ms as one array, "
                  f"{em['copy_leaves_s'] * 1e3:.2f} ms as their {em['leaves']} arrays (extract + merge at "
                  f"{em['extract_merge_vs_copy_leaves']:.2f} of that). " + measure.round_line(out["round_overhead"])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure.family_main(argv, name="transformer", doc=__doc__, run=run, markdown=markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
