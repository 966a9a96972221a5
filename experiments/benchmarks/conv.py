"""Conv-model benchmarks: channel IST on a ResNet-18-shaped network and ResIST on a depth-split ResNet.

Run from the repository root::

    .venv/bin/python -m experiments.benchmarks.conv            # full, a few minutes on 2 CPU cores
    .venv/bin/python -m experiments.benchmarks.conv --quick    # CI-size smoke run, < 1 minute

Workload: ``ResNet(stage_sizes=(2, 2, 2, 2))`` (ResNet-18's layout: basic blocks, BatchNorm, 1x1 strided
projections) at ``width_multiplier`` of the widths 64-128-256-512, on random 32 x 32 x 3 inputs, W = 2, K = 20,
SGD; ResIST on ``DepthResNet(stage_sizes=(3, 4, 6, 3))`` (ResNet-34's layout, pre-activation, every stage's
blocks dealt), with local SGD on the same network beside it. Studies (the issue's speed goals; ``docs/benchmarks.md``):

1. the local phase (W workers x K steps, as the simulate runtime runs them: one worker after another on CPU) against
   its own convolutions timed alone (forward, kernel and input gradients of every conv a worker's sub-network
   runs, one worker's at top level, times W x K; `measure.phase_convs`): goal >= 0.6;
2. extract + merge against a copy of the bytes they write (`experiments.benchmarks.run.gather_scatter`): >= 0.5,
   on the 1/4-width network and on ResNet-18 itself (64-512, 11.2M parameters), against one flat buffer and
   against the same 62 arrays copied one by one;
3. partition + extract + merge as a share of an IST round (`experiments.benchmarks.run.round_overhead`): <= 10 %;
4. throughput (samples/s, W * K * B per round) of IST, data parallel and local SGD on the ResNet, and of ResIST and
   local SGD on the depth-split ResNet.

Every speed figure is a ratio of medians measured interleaved in one process (`measure.interleaved`); results go
to ``--out`` (default ``experiments/benchmarks/results_conv.json`` and ``.md``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from experiments.benchmarks import measure
from experiments.benchmarks import run as suite
from experiments.tables import markdown_table
from istjax.models import DepthResNet, ResNet


@dataclasses.dataclass(frozen=True)
class ConvWorkload:
    """A conv model + training configuration with the interface `experiments.benchmarks.run` studies read
    (``task``, ``algorithm``, ``batches``, ``num_workers``, ``local_steps``, ``name``)."""

    name: str
    width_multiplier: float
    stage_sizes: tuple[int, ...] = (2, 2, 2, 2)
    depth_split: bool = False  # DepthResNet (ResIST) instead of the channel-partitioned ResNet
    image: tuple[int, int, int] = (32, 32, 3)
    num_classes: int = 10
    batch: int = 16
    lr: float = 0.05
    local_steps: int = 20
    num_workers: int = 2

    def model(self):
        if self.depth_split:
            return DepthResNet(stage_sizes=self.stage_sizes, widths=(64, 128, 256, 512)[:len(self.stage_sizes)],
                               width_multiplier=self.width_multiplier, num_classes=self.num_classes)
        return ResNet(stage_sizes=self.stage_sizes, widths=(64, 128, 256, 512)[:len(self.stage_sizes)],
                      width_multiplier=self.width_multiplier, num_classes=self.num_classes)

    def example(self) -> jax.Array:
        return jnp.zeros((self.batch, *self.image), jnp.float32)

    def task(self) -> istjax.Task:
        return istjax.classifier(self.model(), self.example(), num_classes=self.num_classes)

    def algorithm(self, name: str, *, num_workers: int | None = None, local_steps: int | None = None,
                  task: istjax.Task | None = None, backend: str = "simulate") -> istjax.Algorithm:
        W, K = num_workers or self.num_workers, local_steps or self.local_steps
        opt = optax.sgd(self.lr, momentum=0.9)
        if name == "resist":
            return istjax.resist(self.task(), opt, num_workers=W, local_steps=K, backend=backend)
        return suite.ALGORITHMS[name](task or self.task(), opt, num_workers=W, local_steps=K, backend=backend)

    def batches(self, num_workers: int, local_steps: int, seed: int = 0) -> dict[str, jax.Array]:
        rng = np.random.default_rng(seed)
        shape = (num_workers, local_steps, self.batch)
        return {"x": jax.device_put(rng.standard_normal(shape + self.image, np.float32)),
                "y": jax.device_put(rng.integers(0, self.num_classes, shape, np.int32))}


RESNET18 = ConvWorkload("ResNet-18 (64-512)", 1.0)  # extract + merge only: its parameters, no training
FULL = (ConvWorkload("ResNet-18 shape, 1/4 width (16-128)", 0.25),
        ConvWorkload("depth-split ResNet-34 shape, 1/4 width", 0.25, stage_sizes=(3, 4, 6, 3), depth_split=True))
QUICK = (ConvWorkload("ResNet-18 shape, 1/16 width (quick)", 1 / 16, batch=8, local_steps=4),
         ConvWorkload("depth-split ResNet-34 shape, 1/16 width (quick)", 1 / 16, stage_sizes=(3, 4, 6, 3),
                      depth_split=True, batch=8, local_steps=4))


def local_vs_convs(wl: ConvWorkload, reps: int) -> dict[str, Any]:
    """The vmapped local phase of channel IST against its sub-network's convolutions alone (study 1)."""
    pr = suite.prepare(wl, "ist")
    slots = pr.alg.sampler.slots(pr.alg.task.spec.group_sizes, wl.num_workers)
    convs = measure.record_convs(wl.model().subnet(slots), wl.example(), train=False)
    own, args = measure.phase_convs(convs)  # one worker's, in the fastest form: unbatched, top level
    t = measure.interleaved({"local": lambda: pr.local(pr.workers, pr.batches), "convs_one_step": lambda: own(*args)},
                            reps)
    conv_time = t["convs_one_step"].median * wl.local_steps * wl.num_workers
    return {"model": wl.name, "W": wl.num_workers, "K": wl.local_steps, "B": wl.batch, "convs": len(convs),
            "local_s": t["local"].median, "convs_alone_s": conv_time, "local_vs_convs": conv_time / t["local"].median,
            "timings": {k: v.as_dict() for k, v in t.items()}}


def run(quick: bool) -> dict[str, Any]:
    resnet, depth = QUICK if quick else FULL
    reps = 2 if quick else 5
    t0 = time.time()
    out: dict[str, Any] = suite.header(quick)
    print(f"1. local phase vs its own convolutions ({resnet.name})", flush=True)
    out["local_vs_convs"] = local_vs_convs(resnet, reps)
    print("2. extract + merge vs copy", flush=True)
    out["gather_scatter"] = suite.gather_scatter(resnet, [resnet.num_workers], reps)
    if not quick:
        out["gather_scatter"] += suite.gather_scatter(RESNET18, [RESNET18.num_workers], reps)
    print("3. round overhead", flush=True)
    out["round_overhead"] = suite.round_overhead(resnet, reps)
    print("4. throughput", flush=True)
    out["throughput"] = (suite.throughput(resnet, ["ist", "data_parallel", "local_sgd"], reps)
                         + suite.throughput(depth, ["resist", "local_sgd"], reps))
    out["targets"] = targets(out)
    out["wall_s"] = time.time() - t0
    return out


def targets(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's speed goals against what was measured."""
    rows = [("local phase / its convolutions alone", out["local_vs_convs"]["local_vs_convs"], ">=", 0.6)]
    for gs in out["gather_scatter"]:
        rows += [(f"extract + merge / copy of the bytes written ({gs['model']})", gs["extract_merge_vs_copy"], ">=",
                  0.5),
                 (f"extract + merge / copy of the same {gs['leaves']} arrays ({gs['model']})",
                  gs["extract_merge_vs_copy_leaves"], ">=", 0.5)]
    rows.append(measure.overhead_target(out["round_overhead"]))
    return measure.targets(rows)


def markdown(out: dict[str, Any]) -> str:
    lines = measure.heading("Conv benchmarks", out)
    lv = out["local_vs_convs"]
    lines += ["", f"Local phase {lv['local_s'] * 1e3:.1f} ms for W={lv['W']} x K={lv['K']} steps of B={lv['B']}; its "
                  f"{lv['convs']} convolutions alone {lv['convs_alone_s'] * 1e3:.1f} ms. "
                  + measure.round_line(out["round_overhead"]), "",
              markdown_table(["model", "algorithm", "W", "K", "B", "round (ms)", "samples/s"],
                             [[r["model"], r["algorithm"], str(r["W"]), str(r["K"]), str(r["B"]),
                               f"{r['round_s'] * 1e3:.1f}", f"{r['samples_per_s']:.0f}"] for r in out["throughput"]])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure.family_main(argv, name="conv", doc=__doc__, run=run, markdown=markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
