"""Where a rank's memory goes in the extreme study: XLA's own accounting of the programs a rank runs.

For each hidden width, on xmc-debian-deps' shape (31,435 features, 15,186 labels, 256 ``(id, value)`` slots a
point), ``compile().memory_analysis()`` of (nothing is trained, nothing is allocated but compiled programs):

* ``evaluate``: the full model's test-time scores of one evaluation chunk (``eval_batch_size`` points, 1,000 in
  the study, and 250);
* ``train step``: the gradient of the full model's loss on one batch of B = 128;
* both again with the embedding bag gathering every slot at once (``bag_slot_chunk=0``: a ``[n, slots, H]`` block
  before it sums, and its cotangent), against the default that sums `SLOT_CHUNK` slots at a time;
* ``init``: the initialiser of the bag's kernel ``[F, H]``: flax's ``normal`` whole and sliced to half its columns
  (XLA generates the whole leaf either way), and the library's `istjax.core.tiled_init` whole and as half its columns
  drawn alone (what a rank of the sharded mode or of tensor parallelism draws).

Writes ``experiments/extreme/results/memory.json``, rendered by `experiments.extreme.report` in
``docs/extreme.md``. Command (about a minute)::

    python -m experiments.extreme.memory
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

import istjax.core.tiled_init as tiled_init
from istjax.core.task import classifier
from istjax.launch import study as study_lib
from istjax.launch.provenance import code_version
from istjax.models import SparseMLP
from istjax.models.embedding_bag import SLOT_CHUNK, EmbeddingBag

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "experiments" / "extreme" / "results" / "memory.json"
FEATURES, LABELS, SLOTS, LABEL_SLOTS = 31435, 15186, 256, 32


def _analysis(fn, *args) -> dict[str, int]:
    m = jax.jit(fn).lower(*args).compile().memory_analysis()
    return {"temp_bytes": int(m.temp_size_in_bytes), "argument_bytes": int(m.argument_size_in_bytes),
            "output_bytes": int(m.output_size_in_bytes)}


def _batch(n: int) -> dict[str, jax.ShapeDtypeStruct]:
    return {"x": jax.ShapeDtypeStruct((n, SLOTS, 2), jnp.float32),
            "y": jax.ShapeDtypeStruct((n, LABEL_SLOTS), jnp.int32)}


def measure(hidden: int, eval_sizes: Sequence[int], batch_size: int) -> list[dict[str, Any]]:
    """The rows of one width (module docstring)."""
    rows = []
    for chunk, tag in ((SLOT_CHUNK, ""), (0, ", all slots at once")):  # the bag as it is, and with the block
        model = SparseMLP(hidden=(hidden,), num_classes=LABELS, num_features=FEATURES, bag_slot_chunk=chunk)
        task = classifier(model, jnp.zeros((2, SLOTS, 2), jnp.float32), num_classes=LABELS)
        params = jax.eval_shape(task.init, jax.random.key(0))
        rows += [{"program": f"evaluate{tag}", "points": n,
                  **_analysis(lambda p, b: task.evaluate(p, {}, b), params, _batch(n))} for n in eval_sizes]
        loss = task.train_loss(None)
        rows.append({"program": f"train step{tag}", "points": batch_size,
                     **_analysis(jax.grad(lambda p, b: loss(p, {}, b)[0]), params, _batch(batch_size))})
    model_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    flax_init, init = nn.initializers.normal(1.0), EmbeddingBag.__dataclass_fields__["kernel_init"].default
    shape, key = (FEATURES, hidden), jax.random.key(0)

    def half_drawn_alone(k):
        with tiled_init.deferred():
            return tiled_init.block(init(k, shape), 1, 0, hidden // 2)

    rows.append({"program": "init bag kernel, flax, whole", **_analysis(lambda k: flax_init(k, shape), key)})
    rows.append({"program": "init bag kernel, flax, half its columns",
                 **_analysis(lambda k: flax_init(k, shape)[:, : hidden // 2], key)})
    rows.append({"program": "init bag kernel, tiled, whole", **_analysis(lambda k: init(k, shape), key)})
    rows.append({"program": "init bag kernel, tiled, half its columns drawn alone", **_analysis(half_drawn_alone, key)})
    return [{"hidden": hidden, "model_bytes": int(model_bytes), **r} for r in rows]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="256,512,1024")
    ap.add_argument("--eval-sizes", default="1000,250")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    rows = [r for h in args.widths.split(",")
            for r in measure(int(h), [int(n) for n in args.eval_sizes.split(",")], args.batch_size)]
    given = sys.argv[1:] if argv is None else list(argv)
    doc = {"command": " ".join(["python -m experiments.extreme.memory", *given]), "code": code_version(),
           "jax": jax.__version__, "slots": SLOTS, "features": FEATURES, "labels": LABELS, "rows": rows}
    study_lib.write_json(args.out, doc)
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
