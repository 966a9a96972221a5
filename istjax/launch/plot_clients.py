"""Figures of a federated split (`istjax.data.clients`): who holds which classes, and how much each client holds.

* `plot_split`: clients x classes, each cell the share of the client's examples in that class (the colour), beside
  each client's size; IID reads as an even grey, the pathological split as two bright cells a row, Dirichlet skew in
  between.
* `plot_client_sizes`: a histogram of client sizes (Shakespeare's roles: characters per role), on a log axis when
  the sizes span more than two decades.

matplotlib is imported when a figure is drawn (the Agg backend, as `istjax.launch.plot`), never when this module is.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.data.clients import ClientSplit

__all__ = ["plot_client_sizes", "plot_split"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> pathlib.Path:
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return out


def plot_split(split: ClientSplit, labels: Any, num_classes: int, path: str | os.PathLike, *,
               title: Optional[str] = None) -> pathlib.Path:
    """Draws ``split`` into ``path`` (a PNG, parent folders made) and returns the path: left, the ``[N, C]`` share of
    each client's examples in each class (`ClientSplit.class_counts` over the client's size: rows sum to 1); right,
    each client's size. ``labels``: the ``[n]`` training labels the split was made from. Title: ``split.describe()``
    unless given."""
    counts = split.class_counts(labels, num_classes)
    sizes = counts.sum(axis=1)
    share = counts / np.maximum(sizes, 1)[:, None]
    plt = _pyplot()
    height = min(2.6 + 0.12 * split.num_clients, 9.0)
    fig, (ax, bar) = plt.subplots(1, 2, figsize=(8.0, height), sharey=True, layout="constrained",
                                  gridspec_kw={"width_ratios": [3, 1]})
    image = ax.imshow(share, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    if num_classes <= 20:
        ax.set_xticks(range(num_classes))
    fig.colorbar(image, ax=ax, label="share of the client's examples in the class", location="top", shrink=0.8)
    bar.barh(np.arange(split.num_clients), sizes, height=0.8, color="tab:gray")
    bar.set_xlabel("examples")
    bar.grid(True, axis="x", alpha=0.35)
    fig.suptitle(title if title is not None else split.describe(), fontsize=9)
    return _save(fig, path)


def plot_client_sizes(sizes: Sequence[int], path: str | os.PathLike, *, unit: str = "examples",
                      title: Optional[str] = None, bins: int = 30) -> pathlib.Path:
    """A histogram of ``sizes`` (``[N]``: one per client, in ``unit``, e.g. ``"characters"`` for Shakespeare's
    roles) into ``path``; log-spaced bins on a log axis when the largest is over 100 times the smallest."""
    s = np.asarray(sizes, dtype=np.float64).reshape(-1)
    if s.size == 0 or not np.all(np.isfinite(s)) or s.min() < 0:
        raise ArgError("sizes", list(s.shape), "sizes: give one non-negative size per client, at least one.", "")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    low, high = max(s.min(), 1.0), max(s.max(), 1.0)
    log = high / low > 100
    edges = np.geomspace(low, high * 1.0001, bins + 1) if log else bins
    ax.hist(np.maximum(s, low) if log else s, bins=edges, color="tab:blue", edgecolor="white")
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(f"{unit} per client" + (" (log scale)" if log else ""))
    ax.set_ylabel("clients")
    ax.grid(True, axis="y", alpha=0.35)
    median = float(np.median(s))
    ax.set_title(title if title is not None else
                 f"{s.size} clients, {unit}: {s.min():g}..{s.max():g}, median {median:g}", fontsize=9)
    return _save(fig, path)
