"""The evaluation of a run's global model: `make_evaluator` gives ``evaluate(state)``, the full-width model in test
mode on the whole test set and on (a prefix of) the training set, example-weighted means over equal chunks put on
device once (`Evaluator`, which also times each chunk shape's first call: its compilation).

`istjax.launch.driver.train_and_evaluate` evaluates with it every ``eval_every`` rounds; `istjax.launch.restore`
evaluates a saved run with it (``istjax eval``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

import istjax.data as data_lib
from istjax.core import contract
from istjax.core.state import TrainState
from istjax.core.task import Task
from istjax.data.drift import Drift

__all__ = ["Evaluator", "make_evaluator"]


def make_evaluator(task: Task, dataset: data_lib.Dataset, *, batch_size: int, train_examples: int = 0,
                   evaluate_fn: Optional[Callable] = None, log: Optional[Callable[[str], None]] = None,
                   drift: Optional[Drift] = None) -> "Evaluator":
    """``evaluate(state) -> {test_loss, test_accuracy, train_loss, train_accuracy}`` of the full-width model, plus
    ``test_<metric>`` and ``train_<metric>`` for every other metric the task's evaluation returns (a multi-label
    model's ``precision_at_k``, `istjax.xmc.loss`; a metric returned as ``<name>_numerator`` and
    ``<name>_denominator`` is reported as ``<name>``, the ratio of their means over the split: ``psp_at_k``).

    The model runs in test mode (`istjax.Task.evaluate`: running statistics where the model keeps them, and any
    test-time transform it declares). The test set is evaluated whole; the training set's first ``train_examples``
    examples (0: all). Chunks of ``batch_size`` (`istjax.data.eval_batches`) are put on device once; results are
    example-weighted means. Chunks are equal (``len // batch_size`` of them), never shorter than ``batch_size`` nor
    than the task's ``min_eval_batch`` (a model with batch-statistics BatchNorm normalises each chunk with its own
    statistics). ``evaluate_fn`` replaces ``task.evaluate`` (a runtime that evaluates a sharded state in place:
    `istjax.runtimes.RuntimeHandle.evaluate`). A split smaller than ``min_eval_batch`` (your own table's test set) is
    evaluated as one batch, and ``log`` is told that its score depends on the split's size. With a ``drift``
    (`istjax.data.drift`), a state that has completed ``drift.at_round`` rounds or more is scored against the
    permuted labels, the concept its next round trains on.
    """
    evaluate_fn = task.evaluate if evaluate_fn is None else evaluate_fn

    def chunk_scores(params, model_state, x, y, shared):
        return evaluate_fn(params, model_state, {"x": x, "y": y}, shared)  # (loss, {metric: value})

    size = max(int(batch_size), task.min_eval_batch)

    def put(x, y):
        # Equal chunks of at least `size` examples (no short last chunk: with batch-statistics BatchNorm a chunk's
        # statistics are its own); a split smaller than `size` is one chunk.
        chunks = np.array_split(np.arange(len(y)), max(1, len(y) // size))
        return [(jnp.asarray(x[i]), jnp.asarray(y[i]), len(i)) for i in chunks if len(i)]

    n_train = len(dataset.train_y) if train_examples in (0, None) else min(train_examples, len(dataset.train_y))
    splits = {"test": put(dataset.test_x, dataset.test_y),
              "train": put(dataset.train_x[:n_train], dataset.train_y[:n_train])}
    small = {split: n for split, n in (("test", len(dataset.test_y)), ("train", n_train)) if n < task.min_eval_batch}
    if small and log is not None:
        log(_small_split_note(task, small))
    drifted = None if drift is None else {
        split: [(x, drift.relabel(y, drift.at_round), n) for x, y, n in chunks]
        for split, chunks in splits.items()}
    return Evaluator(jax.jit(chunk_scores), splits, dataset.shared,
                     drifted=None if drift is None else (drift.at_round, drifted))


class Evaluator:
    """``evaluate(state) -> {test_loss, test_accuracy, train_loss, train_accuracy}`` (`make_evaluator`): the jitted
    chunk function, the shared input passed as an argument (never folded into the program as a constant).
    ``compile_time`` counts the first call at each chunk shape: its compilation plus that one chunk's evaluation (an
    ahead-of-time compile cannot run under the MPI runtime: mpi4jax's ordered effects add a token argument).
    ``drifted``: ``(at_round, splits)``, the splits with the drifted concept's labels, scored from a state of
    ``at_round`` completed rounds on (`make_evaluator`)."""

    def __init__(self, chunk: Callable, splits: dict[str, list], shared: Any,
                 drifted: Optional[tuple[int, dict[str, list]]] = None):
        self.chunk, self.splits, self.shared, self.drifted = chunk, splits, shared, drifted
        self.seen: set = set()
        self.compile_time = 0.0

    def _scores(self, state: TrainState, x, y):
        args = (state.params, state.model_state, x, y, self.shared)
        key = (x.shape, y.shape)  # the state's and the shared input's shapes are the run's, fixed
        if key in self.seen:
            return self.chunk(*args)
        t = time.perf_counter()
        out = jax.block_until_ready(self.chunk(*args))
        self.compile_time += time.perf_counter() - t
        self.seen.add(key)
        return out

    def __call__(self, state: TrainState) -> dict[str, float]:
        out = {}
        splits = self.splits
        if self.drifted is not None and int(jax.device_get(state.round)) >= self.drifted[0]:
            splits = self.drifted[1]
        for split, chunks in splits.items():
            results = jax.device_get([(self._scores(state, x, y), n) for x, y, n in chunks])
            total = sum(n for _, n in results)
            out[f"{split}_loss"] = float(sum(float(l) * n for (l, _), n in results) / total)
            means = {name: float(sum(float(aux[name]) * n for (_, aux), n in results) / total)
                     for name in results[0][0][1]}  # every metric, example-weighted: "accuracy" first
            out.update({f"{split}_{name}": v for name, v in contract.ratios(means).items()})  # PSP@k's parts
        return out


def _small_split_note(task: Task, small: dict[str, int]) -> str:
    """The warning for splits evaluated as one batch smaller than ``task.min_eval_batch`` (`make_evaluator`)."""
    fix = contract.batch_statistics_fix(task.module)
    splits = " and ".join(f"the {split} split ({n} examples)" for split, n in small.items())
    return (f"note: {splits} evaluated as one batch, smaller than the {task.min_eval_batch} examples "
            f"{type(task.module).__name__} should be evaluated in: it normalises with the batch's statistics at test "
            f"time, so the score depends on the batch (docs/your_data.md)"
            + (f"; without that: {', '.join(f'model.{k}={v!r}' for k, v in fix.items())}." if fix else "."))
