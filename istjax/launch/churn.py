"""Prediction churn (Anil et al. 2018): the fraction of test examples on which two models predict different classes.

`churn(a, b)` compares the newest verified checkpoints of two saved runs (any algorithm, any runtime: each is
restored on one process, `istjax.launch.restore.restore_run`); `group_churn(run)` compares the groups of one
codistillation run with each other (its state holds every group's model). Both read each model's test-time
predictions (`istjax.Task.logits`) on the run's own test split, in batches of its ``eval_batch_size``; the two runs of
`churn` must share a data set and a test split.
"""

from __future__ import annotations

import itertools
import pathlib
from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np

from istjax.algorithms.codistill import Codistill
from istjax.launch.config import ConfigError
from istjax.launch.restore import restore_run

__all__ = ["churn", "disagreement", "group_churn", "test_predictions"]

Path = Union[str, pathlib.Path]


def disagreement(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of positions where two arrays of predicted classes differ."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"disagreement: predictions of shapes {a.shape} and {b.shape}; need two equal, non-empty "
                         f"shapes (the same test examples).")
    return float(np.mean(a != b))


def test_predictions(task: Any, dataset: Any, params: Any, model_state: Any, batch_size: int) -> np.ndarray:
    """`[N]` the predicted class of every test example: the argmax of the task's test-time logits, in batches."""
    if task.logits is None:
        raise ConfigError(["churn compares predicted classes, but this run's task gives no predictions "
                           "(task.logits): a model built with istjax.classifier does."])
    predict = jax.jit(lambda p, s, x: jnp.argmax(task.logits(p, s, {"x": x}, dataset.shared, train=False)[0], -1))
    x = np.asarray(dataset.test_x)
    return np.concatenate([np.asarray(predict(params, model_state, x[i:i + batch_size]))
                           for i in range(0, len(x), max(1, int(batch_size)))])


def _run_predictions(workdir: Path) -> tuple[np.ndarray, str]:
    config, experiment, state, _ = restore_run(workdir)
    name = f"{config.data.name} {dict(config.data.kwargs)}"
    return test_predictions(experiment.task, experiment.dataset, state.params, state.model_state,
                            int(config.eval_batch_size)), name


def churn(a: Path, b: Path) -> float:
    """The prediction churn between the final models of the saved runs ``a`` and ``b`` (module docstring)."""
    (pa, da), (pb, db) = _run_predictions(a), _run_predictions(b)
    if da != db or pa.shape != pb.shape:
        raise ConfigError([f"churn compares two models on one test split, but {a} tests on {da} ({len(pa)} "
                           f"examples) and {b} on {db} ({len(pb)}): compare runs of the same data."])
    return disagreement(pa, pb)


def group_churn(workdir: Path) -> dict[str, float]:
    """The prediction churn between every two groups of the codistillation run ``workdir`` (``"0-1"``, ...), and
    their mean (``"mean"``)."""
    config, experiment, state, _ = restore_run(workdir)
    if not isinstance(experiment.algorithm.protocol, Codistill):
        raise ConfigError([f"group_churn reads the groups of a codistillation run, but {workdir} ran "
                           f"algorithm.name={config.algorithm.name!r}; compare two runs with churn(a, b)."])
    params, model_state = state.opt_state.groups
    count = jax.tree.leaves(params)[0].shape[0]
    preds = [test_predictions(experiment.task, experiment.dataset, jax.tree.map(lambda v: v[g], params),
                              jax.tree.map(lambda v: v[g], model_state), int(config.eval_batch_size))
             for g in range(count)]
    out = {f"{i}-{j}": disagreement(preds[i], preds[j]) for i, j in itertools.combinations(range(count), 2)}
    return {**out, "mean": float(np.mean(list(out.values())))}
