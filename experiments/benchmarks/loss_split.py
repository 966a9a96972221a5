"""What the round's loss split costs: a round with it against the same round without, per algorithm and W.

Run from the repository root::

    .venv/bin/python -m experiments.benchmarks.loss_split            # the image study's network, a few minutes
    .venv/bin/python -m experiments.benchmarks.loss_split --quick    # CI-size smoke run

Workload: `experiments/configs/fmnist_resnet_ist.py` (ResNet-18 layout at 1/8 width, channel IST, K = 20, B = 32;
the decomposition study's network; ``--quick``: an MLP on the spoken digits), IST, data parallel and local SGD at
W = 2 and 4 on the simulate runtime, each built twice from the same config, ``runtime.loss_split`` on and off
(`istjax.algorithms.base.loss_split`: the workers' own loss and the merged model's in training and test mode on each
worker's last batch). Reported: the share of a round the split adds, ``(with - without) / with``, from medians
measured interleaved in one process (`measure.interleaved`). Results: ``--out`` (default
``experiments/benchmarks/results_loss_split.json`` and ``.md``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from experiments.benchmarks import measure
from experiments.benchmarks import run as suite
from experiments.tables import markdown_table
from istjax.launch.args import load_config

FULL = dict(config="experiments/configs/fmnist_resnet_ist.py", algorithms=("ist", "data_parallel", "local_sgd"),
            workers=(2, 4), reps=5)
QUICK = dict(config="experiments/configs/digits_ist.py", algorithms=("ist", "local_sgd"), workers=(2,), reps=2,
             overrides=("--config.model.hidden=(32,)", "--config.local_steps=2"))


def _algorithm(s: dict, name: str, w: int, split: bool):
    from istjax.launch import driver

    config = load_config(s["config"], [*s.get("overrides", ()), f"--config.algorithm.name={name}",
                                       f"--config.num_workers={w}", f"--config.runtime.loss_split={split}"])
    return driver.build(config).algorithm


def _batches(alg, seed: int = 0) -> dict:
    x = alg.task.example_x
    w, k = alg.num_workers, alg.local_steps
    b = 32 if x.shape[0] < 32 else x.shape[0]
    rng = np.random.default_rng(seed)
    return {"x": jax.device_put(rng.standard_normal((w, k, b) + x.shape[1:]).astype(np.float32)),
            "y": jax.device_put(rng.integers(0, alg.task.num_classes, (w, k, b)).astype(np.int32))}


def one(s: dict, name: str, w: int) -> dict[str, Any]:
    on, off = _algorithm(s, name, w, True), _algorithm(s, name, w, False)
    state = jax.jit(on.init)(jax.random.key(0))
    batches = _batches(on)
    t = measure.interleaved({"with": lambda: on.round(state, batches), "without": lambda: off.round(state, batches)},
                            s["reps"])
    with_s, without_s = t["with"].median, t["without"].median
    return {"algorithm": name, "W": w, "K": on.local_steps, "with_s": with_s, "without_s": without_s,
            "share": (with_s - without_s) / with_s, "timings": {k: v.as_dict() for k, v in t.items()}}


def run(quick: bool) -> dict[str, Any]:
    s = QUICK if quick else FULL
    t0 = time.time()
    rows = []
    for w in s["workers"]:
        for name in s["algorithms"]:
            print(f"{name}, W = {w}", flush=True)
            rows.append(one(s, name, w))
    return {**suite.header(quick), "config": s["config"],
            "rows": rows, "wall_s": time.time() - t0}


def markdown(out: dict[str, Any]) -> str:
    lines = measure.heading("The loss split's cost", out, f"`{out['config']}`")
    lines.append(markdown_table(["algorithm", "W", "K", "round without (ms)", "with (ms)", "share of the round"],
                                [[r["algorithm"], str(r["W"]), str(r["K"]), f"{r['without_s'] * 1e3:.0f}",
                                  f"{r['with_s'] * 1e3:.0f}", f"{r['share']:.3f}"] for r in out["rows"]]))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure.family_main(argv, name="loss_split", doc=__doc__, run=run, markdown=markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
