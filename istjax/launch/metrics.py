"""Metric records of a run: one JSON object per evaluation in ``metrics.jsonl``, mirrored to TensorBoard.

The schema of a record (`RECORD_FIELDS` always present; others may be added)::

    round                      rounds completed
    step                       optimizer steps per worker so far, round * K
    samples_seen               training examples consumed by all workers, round * W * K * B
    wall_time_s                seconds spent in training rounds so far (compilation, evaluation and checkpoints
                               excluded; accumulated across resumes)
    train_loss, train_accuracy the global (full-width) model on the training set (or its first
                               ``eval_train_examples``)
    test_loss, test_accuracy   the global model on the whole test set
    round_loss                 mean over workers and local steps of the losses the workers saw in the last round
                               (for IST: sub-network losses)
    bytes_sent_per_worker      bytes one worker sends per round (analytic `Algorithm.comm`, or measured by the
    bytes_received_per_worker  backend when it reports ``measured_bytes_sent`` / ``measured_bytes_received``)
    bytes_total                bytes moved so far by all workers, both directions
    algorithm, num_workers     what produced it

The round's loss split (`istjax.algorithms.base.loss_split`, with ``runtime.loss_split``; every runtime but MPI's
sharded mode), computed on the evaluation round (and every ``loss_split_every``-th round: each the mean over the
``split_rounds`` rounds that computed it since the previous record), on the batch every worker trained last:

    worker_train_loss          the workers' own loss after their K steps (IST: their sub-networks), training mode
    merged_train_loss          the collected model on the same batches, training mode (batch statistics)
    merged_test_loss           the same in test mode (running statistics, the test-time network)
    merge_cost                 merged_train_loss - worker_train_loss: what collecting lost of what the workers fitted

Only the primary process writes (`istjax.core.process.is_primary`, the one answer to which process that is): under
``mpiexec`` every rank runs the driver, rank 0 records.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any, Optional

from istjax.core.process import is_primary as is_primary
from istjax.core.process import process_count as process_count
from istjax.core.process import process_index as process_index

__all__ = ["COUNTED", "METRIC_LABELS", "RECORD_FIELDS", "SPLIT", "metrics_text", "is_primary", "process_count",
           "process_index", "MetricWriter", "read_metrics", "truncate_metrics", "write_atomic"]

SPLIT = ("worker_train_loss", "merged_train_loss", "merged_test_loss", "merge_cost")  # the round's loss split
# What a round counted, where an algorithm reports it (dynamic averaging's models moved, its workers that violated
# the condition, those averaged, its full synchronisations): a record carries each one's sum over its rounds.
COUNTED = ("model_transfers", "violations", "synced_workers", "full_sync")

RECORD_FIELDS = ("round", "step", "samples_seen", "wall_time_s", "train_loss", "train_accuracy", "test_loss",
                 "test_accuracy", "round_loss", "bytes_sent_per_worker", "bytes_received_per_worker", "bytes_total",
                 "algorithm", "num_workers")


#: How a summary names its final metrics when its data names none of its own (``summary["metric_labels"]``, e.g. a
#: language model's `istjax.data.text.METRIC_LABELS`): summary key -> label, in the order printed.
METRIC_LABELS = {"test_accuracy": "test accuracy", "test_loss": "test loss", "train_loss": "train loss"}


def metrics_text(summary: dict[str, Any]) -> str:
    """A summary's final metrics, each named as its data names it (``summary["metric_labels"]``, else
    `METRIC_LABELS`): ``"test accuracy 0.9722, test loss 0.0913, train loss 0.0121"``, or for text
    ``"validation nats/char 2.3093, train nats/char 2.2510, validation next-character accuracy 0.3120"``."""
    labels = summary.get("metric_labels") or METRIC_LABELS
    return ", ".join(f"{label} {summary[key]:.4f}" for key, label in labels.items() if summary.get(key) is not None)


def format_bytes(n: Optional[float]) -> str:
    """``1234567 -> "1.23 MB"`` (decimal units, three significant digits); None -> ``"-"``."""
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return str(n)


def format_mean_std(mean: Optional[float], std: Optional[float], n: int, digits: int = 3) -> str:
    """A mean over seeds with its sample standard deviation and count: ``'0.972 ± 0.004 (3 seeds)'``,
    ``'0.771 (1 seed)'`` (a standard deviation of None, as one seed gives, is left out); None -> ``"-"``."""
    if mean is None:
        return "-"
    seeds = "1 seed" if n == 1 else f"{n} seeds"
    if n == 1 or std is None:
        return f"{mean:.{digits}f} ({seeds})"
    return f"{mean:.{digits}f} ± {std:.{digits}f} ({seeds})"


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a temporary file and a rename, so a reader (another rank of an MPI run
    checking the workdir while the primary writes it) sees the old file or the new one whole, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (``getrusage``; Linux reports KiB, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def _jsonable(v: Any) -> Any:
    """Python scalars for numpy/JAX scalars; non-finite floats as None (strict JSON has no NaN)."""
    if hasattr(v, "item") and getattr(v, "shape", None) == ():
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricWriter:
    """Appends records to ``workdir/metrics.jsonl`` and writes their numbers to TensorBoard (tensorboardX).

    Args:
      workdir: the run directory.
      enabled: write at all (default: `is_primary()`); a disabled writer accepts and drops records.
      purge_step: when resuming from round r, pass r + 1 so TensorBoard drops events a crashed run logged after
        its last checkpoint.

    Example::

        with MetricWriter(workdir) as w:
            w.write({"round": 10, "test_accuracy": 0.9, ...})
    """

    def __init__(self, workdir: str | os.PathLike, *, enabled: Optional[bool] = None,
                 purge_step: Optional[int] = None):
        self.workdir = pathlib.Path(workdir)
        self.enabled = is_primary() if enabled is None else enabled
        self.path = self.workdir / "metrics.jsonl"
        self._tb = None
        if self.enabled:
            self.workdir.mkdir(parents=True, exist_ok=True)
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.workdir / "tensorboard"), purge_step=purge_step, flush_secs=10)

    def write(self, record: dict[str, Any]) -> None:
        """Appends one record (a line of JSON) and logs its numeric fields at step ``record["round"]``."""
        if not self.enabled:
            return
        record = {k: _jsonable(v) for k, v in record.items()}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        step = int(record.get("round", 0))
        for k, v in record.items():
            if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._tb.add_scalar(k, v, global_step=step)
        self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> "MetricWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file (or of ``RUN_DIR/metrics.jsonl`` given a run directory)."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def truncate_metrics(path: str | os.PathLike, last_round: int) -> int:
    """Drops records with ``round > last_round`` (written after the checkpoint a run resumes from).

    Also drops a half-written last line. Returns the number of records kept.
    """
    path = pathlib.Path(path)
    if not path.exists():
        return 0
    kept = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("round", 0) <= last_round:
                kept.append(line if line.endswith("\n") else line + "\n")
    write_atomic(path, "".join(kept))
    return len(kept)
