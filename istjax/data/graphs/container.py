"""The container every graph reader returns, :class:`GraphData`, and the feature normalisation they share.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from istjax.graph.graph import Graph

_MAX_DENSE = 1 << 31
"""Most elements a feature or label matrix may densify to (8 GiB of float32): a guard against a file whose
header claims an absurd shape."""


# --------------------------------------------------------------------------
# The container
# --------------------------------------------------------------------------


class GraphData(NamedTuple):
    """One graph with node labels and a transductive train / val / test split.

    Fields:
      name: the dataset's name (``"cora"``, ``"csbm"``, the ``.npz`` file's stem, ...).
      graph: the :class:`~istjax.graph.graph.Graph`, features ``[N, F] float32``, every undirected edge stored in
        both directions (unless read with ``read_npz(..., symmetric=False)``), no padding.
      labels: ``[N] int32`` in ``[0, num_classes)``; nodes without a known label (outside every split) hold 0.
      train_idx: ``[n_train] int32`` node indices, sorted.
      val_idx: ``[n_val] int32`` node indices, sorted, disjoint from train.
      test_idx: ``[n_test] int32`` node indices, sorted, disjoint from train and val.
      num_classes: number of classes.
    """

    name: str
    graph: Graph
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return int(self.graph.nodes.shape[1])

    def __repr__(self) -> str:
        return (
            f"GraphData(name={self.name!r}, nodes={self.num_nodes}, features={self.num_features}, "
            f"edges={self.graph.num_edges}, classes={self.num_classes}, split={len(self.train_idx)}/"
            f"{len(self.val_idx)}/{len(self.test_idx)})"
        )


def _row_normalize(features: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (summed in float64), as GCN preprocesses features; rows summing to 0 stay as
    they are."""
    sums = features.sum(axis=1, dtype=np.float64)
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums != 0)
    scale[sums == 0] = 1.0
    return features.astype(np.float32) * scale.astype(np.float32)[:, None]
