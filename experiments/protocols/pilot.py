"""The pilot that placed `experiments.protocols.study.DELTAS` (``python -m experiments.protocols.pilot``): along a run
of periodic averaging (the ``dynamic`` study's ``periodic`` cell, seed 0) at each rate of the study's grid, the
squared distance ``||w_i - r||^2`` each of the 8 workers drifts in one round (b = 5 steps of plain SGD, B = 32) from
the last full average: a probe round of dynamic averaging at delta = inf from the periodic state, whose flags
(`istjax.algorithms.dynamic.flags`) are printed as median, min and max over the workers at a few rounds. It trains on
the training clips and reads no test clip."""

import jax
import numpy as np

import istjax.launch.driver as driver
from experiments.grid import REPO
from experiments.protocols import study
from istjax.algorithms.dynamic import flags
from istjax.launch.study import plan

PROBES = (0, 1, 5, 20, 60, 119)


def _algorithm(cell, lr: float, delta: float):
    config = plan([cell], [0], "/nonexistent", root=REPO)[0].config
    config.learning_rate, config.algorithm.delta = lr, delta
    return driver.build(config)


def one_rate(cell, lr: float) -> str:
    """The drift per round at rate ``lr`` along periodic averaging, in words."""
    experiment = _algorithm(cell, lr, 0.0)
    periodic, never = experiment.algorithm, _algorithm(cell, lr, float("inf")).algorithm
    state = periodic.init(jax.random.key(0))
    step, probe = jax.jit(periodic.round), jax.jit(never.round)
    out = []
    for r in range(study.ROUNDS["dynamic"]):
        batches = experiment.batch_fn(state.round)
        if r in PROBES:
            drifted, _ = probe(state, batches)
            d = np.asarray(flags(state.opt_state.reference, drifted.opt_state.workers.params))
            out.append(f"round {r}: median {np.median(d):.4g} (min {d.min():.4g}, max {d.max():.4g})")
        state, metrics = step(state, batches)
    return f"lr {lr}: " + "; ".join(out) + f"; final train loss {float(metrics['train_loss']):.3f}"


def main() -> None:
    cell = study.cells("dynamic")[0]
    for lr in study.LEARNING_RATES:
        print(one_rate(cell, lr), flush=True)


if __name__ == "__main__":
    main()
