"""Why data parallel's local phase gains nothing from bfloat16 here: the products of one training step of its widest
layer, timed alone in each form it could take (benchmark study 8, `experiments.benchmarks.run`).

Data parallel keeps one replica for its W workers (``istjax.data_parallel``'s ``local_fused``): in float32 it vmaps
them, and XLA runs each product over all W x B rows at once, the weight gradient as one product contracted over them.
A bfloat16 product batched over workers leaves XLA:CPU's bfloat16 kernels (`istjax.core.precision.map_in_turn`), so
in bfloat16 the workers run one after another: each computes its own weight gradient over its B rows, rounded to
bfloat16 (the gradient of the bfloat16 copy of the weights), and the W of them are added in float32. The forward
product gains from bfloat16; the weight gradient, as W products each writing a full float32 kernel-sized result,
loses. `pieces` times each form, interleaved, so the results file says which way the step goes and by how much.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.benchmarks import measure
from istjax.core import precision

BF16 = jnp.bfloat16


def _forward_in_turn(xb, kb):
    return jax.lax.map(lambda x: precision.einsum("bi,io->bo", x, kb), xb)


def _forward_all_rows(xb, kb):
    w, b, i = xb.shape
    return precision.einsum("bi,io->bo", xb.reshape(w * b, i), kb).reshape(w, b, -1)


def _weight_grad_in_turn(xb, dyb):
    """As the bfloat16 phase runs it: one worker's product (bfloat16 operands, float32 accumulation), rounded to
    bfloat16, added to the float32 sum, worker after worker."""
    def one(acc, xd):
        g = jnp.einsum("bi,bo->io", *xd, preferred_element_type=jnp.float32).astype(BF16)
        return acc + g.astype(jnp.float32), None

    return jax.lax.scan(one, jnp.zeros((xb.shape[-1], dyb.shape[-1]), jnp.float32), (xb, dyb))[0]


FORMS = {  # name -> (function, which operands: "f32" or "bf16")
    "forward/float32": (lambda x, k: jnp.einsum("wbi,io->wbo", x, k), "f32"),
    "forward/bfloat16 in turn": (_forward_in_turn, "bf16"),
    "forward/bfloat16 all rows": (_forward_all_rows, "bf16"),
    "weight_grad/float32": (lambda x, dy: jnp.einsum("wbi,wbo->io", x, dy), "f32"),
    "weight_grad/bfloat16 in turn": (_weight_grad_in_turn, "bf16"),
    "weight_grad/bfloat16 all rows": (
        lambda x, dy: jnp.einsum("wbi,wbo->io", x, dy, preferred_element_type=jnp.float32), "bf16"),
    "convert_kernel": (lambda k: k.astype(BF16), "f32"),
}
# A step's products of the layer in each form: the forward and weight-gradient pieces it adds up (the bfloat16 forms
# also cast the float32 kernel once per step).
STEPS = {"float32": ("forward/float32", "weight_grad/float32"),
         "bfloat16 in turn": ("forward/bfloat16 in turn", "weight_grad/bfloat16 in turn", "convert_kernel"),
         "bfloat16 all rows": ("forward/bfloat16 all rows", "weight_grad/bfloat16 all rows", "convert_kernel")}


def pieces(kernel: tuple[int, int], num_workers: int, batch: int, reps: int, *, seed: int = 0) -> dict[str, Any]:
    """The forward product and the weight gradient of a dense layer ``kernel = [in, out]`` for ``num_workers``
    workers of ``batch`` rows, in float32, in bfloat16 worker after worker (as data parallel's bfloat16 phase runs
    them) and in bfloat16 over all rows at once; and the kernel's cast to bfloat16. Timed `interleaved`.

    Returns:
      ``kernel``, ``W``, ``B``, ``pieces`` (name -> median seconds), ``steps`` (each `STEPS` form: its median
      seconds, summed repetition by repetition, and its speed against float32's, `measure.paired_ratio`) and
      ``timings``.
    """
    (d_in, d_out), w, b = kernel, num_workers, batch
    rng = np.random.default_rng(seed)
    f32 = {"x": rng.standard_normal((w, b, d_in), np.float32), "dy": rng.standard_normal((w, b, d_out), np.float32),
           "k": rng.standard_normal((d_in, d_out), np.float32)}
    arrays = {"f32": {n: jax.device_put(a) for n, a in f32.items()},
              "bf16": {n: jax.device_put(a.astype(BF16)) for n, a in f32.items()}}
    operands = {"forward": ("x", "k"), "weight_grad": ("x", "dy"), "convert_kernel": ("k",)}
    candidates = {}
    for name, (fn, kind) in FORMS.items():
        args = [arrays[kind][a] for a in operands[name.split("/")[0]]]
        candidates[name] = functools.partial(jax.jit(fn), *args)
    t = measure.interleaved(candidates, reps)
    summed = {form: measure.Timing(tuple(map(sum, zip(*(t[p].samples for p in parts)))))
              for form, parts in STEPS.items()}
    steps = {form: {"seconds": s.median, "speed_vs_float32": measure.paired_ratio(summed["float32"], s)}
             for form, s in summed.items()}
    return {"kernel": [d_in, d_out], "W": w, "B": b, "reps": reps, "pieces": {n: v.median for n, v in t.items()},
            "steps": steps, "timings": {n: v.as_dict() for n, v in t.items()}}
