"""Node classification as an `istjax.Task`, for full-graph and Cluster-GCN mini-batch training.

Full graph (graphs that fit): the batch is ``{"x": node ids [B], "y": labels [B]}`` and the graph is the shared
input ``shared["graph"]``; the model runs over the whole graph and is scored at the batch's nodes. That is
`istjax.classifier` as it is: `node_classifier(model, data)` (so a batch with example weights, `istjax.core.weights`,
scores their weighted mean over its nodes; cluster mini-batches, below, refuse them).

Cluster mini-batches (graphs that do not): the graph's nodes are partitioned into C clusters
(`istjax.graph.clusters.partition_nodes`, METIS), and the shared input also holds the padded cluster table, the
labels and the training mask (`with_clusters`). A batch is ``{"x": cluster ids [q]}``: the step gathers those
clusters' induced subgraph on device (`istjax.graph.clusters.subgraph`), runs the model over it and averages the
loss over its training nodes. Evaluation still runs over the full graph (sparse, so it fits where training steps
would not). Every worker draws its own clusters as a pure function of (seed, round, worker)
(`istjax.data.cluster_batches.cluster_batch_fn`), covering every training node once per epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from istjax.core.errors import ArgError, Code
from istjax.core.task import Task, classifier, example_and_classes, is_dataset
from istjax.core.weights import example_weights
from istjax.graph import clusters as clusters_lib
from istjax.graph.graph import Graph

__all__ = ["cluster_classifier", "node_classifier", "with_clusters"]


def _graph_data(data: Any, num_classes: Optional[int], call: str) -> tuple[dict, Optional[int]]:
    """``(shared, num_classes)`` from a data set (its shared input and classes) or from a shared input."""
    if is_dataset(data):
        _, num_classes, shared = example_and_classes(data, num_classes, call=call)
        return shared, num_classes
    return data, num_classes


def node_classifier(model, shared: Any, batch_size: int = 2, *, num_classes: Optional[int] = None) -> Task:
    """Full-graph node classification: ``model(node ids, shared)`` scored at the batch's nodes. ``shared`` is the
    data set (its shared input and ``num_classes`` are read) or its shared input, with ``num_classes`` (required:
    the model's output width is checked against it)."""
    shared, num_classes = _graph_data(shared, num_classes, "node_classifier(model, data)")
    if num_classes is None:
        raise TypeError("node_classifier(model, shared): num_classes= is required (the data's number of classes, "
                        "checked against the model's output width before training). Pass the data set itself, "
                        "node_classifier(model, data), or num_classes=data.num_classes.")
    return classifier(model, jnp.zeros((batch_size,), jnp.float32), example_shared=shared, num_classes=num_classes)


def _classes_of_labels(model, labels) -> int:
    """The model's ``num_classes`` field, after checking that every label in ``labels`` has a logit."""
    width = getattr(model, "num_classes", None)
    if not isinstance(width, int):
        raise TypeError(f"cluster_classifier(model, shared): {type(model).__name__} has no num_classes field, so "
                        f"num_classes= is required (the data's number of classes): pass the data set, "
                        f"cluster_classifier(model, data), or num_classes=data.num_classes.")
    top = int(np.max(np.asarray(labels))) + 1
    if width < top:
        raise ArgError("model", width, f"cluster_classifier: shared['labels'] holds labels up to {top - 1}, but "
                                       f"{type(model).__name__} has num_classes={width} (labels past the logits give "
                                       f"a NaN loss);",
                       "build the model with the data's num_classes, or pass cluster_classifier(model, data).")
    return width


def with_clusters(shared: dict, labels: np.ndarray, train_idx: np.ndarray, num_clusters: int, *,
                  method: str = "metis", seed: int = 0, dataset: str = "") -> dict:
    """``shared`` plus what cluster mini-batches read: ``labels [N]``, ``train_mask [N]`` and ``clusters`` (the
    padded `istjax.graph.clusters.ClusterTable` of a ``method`` partition into ``num_clusters``). ``dataset`` names
    the data in the refusal of a ``shared`` without a graph."""
    if not isinstance(shared, Mapping) or "graph" not in shared:
        raise ArgError("shared", "clusters",
                       f"cuts a graph into clusters, but {dataset or 'the data'} has no graph.",
                       ("Use a graph dataset (cora, citeseer, pubmed, csbm), or",
                        Code("full-graph batches", {"graph_batches": "full"}), "."))
    graph: Graph = shared["graph"]
    n = graph.num_nodes
    train_mask = np.zeros((n,), bool)
    train_mask[np.asarray(train_idx)] = True
    assignment = clusters_lib.partition_nodes(graph, n, num_clusters, method=method, seed=seed)
    table = clusters_lib.cluster_table(graph, assignment, train_mask, num_clusters=num_clusters)
    return {**shared, "labels": jnp.asarray(labels, jnp.int32), "train_mask": jnp.asarray(train_mask),
            "clusters": table}


def cluster_classifier(model, shared: Any, *, num_classes: Optional[int] = None) -> Task:
    """A task whose training step reads a batch of cluster ids (see the module docstring); ``shared`` (or the data
    set's, when ``shared`` is the data set) must come from `with_clusters`. ``num_classes`` (read from a data set)
    is checked against the model's output width; without it, every label of ``shared["labels"]`` must be below the
    model's ``num_classes`` field. Evaluation, parameters and spec are `node_classifier`'s."""
    shared, num_classes = _graph_data(shared, num_classes, "cluster_classifier(model, data)")
    if not isinstance(shared, Mapping) or "clusters" not in shared:
        raise ArgError("shared", None, "cluster_classifier: shared has no 'clusters';",
                       "build it with istjax.graph.task.with_clusters(shared, labels, train_idx, num_clusters).")
    if num_classes is None:
        num_classes = _classes_of_labels(model, shared["labels"])
    base = node_classifier(model, shared, num_classes=num_classes)

    def train_loss(units):
        module = model if units is None else model.subnet(units)

        def loss(params, model_state, batch, shared=None):
            if example_weights(batch) is not None:  # static: refused before anything is traced further
                raise ArgError("batch", "weight",
                               "cluster_classifier: a batch of cluster ids weighs its nodes by the training mask; "
                               "per-example weights (batch['weight'], istjax.core.weights) would weigh clusters, "
                               "which this loss does not define;",
                               "train cluster mini-batches without them (client batches are for example data).")
            g, labels, mask = clusters_lib.subgraph(shared["clusters"], shared["graph"].nodes, shared["labels"],
                                                    shared["train_mask"], batch["x"].astype(jnp.int32))
            rngs = {"dropout": batch["rng"]} if "rng" in batch else None  # a step key, istjax.data.with_step_keys
            logits = module.apply({"params": params, **model_state}, g, True, method=type(module).propagate,
                                  rngs=rngs)
            weight = mask.astype(jnp.float32)
            count = jnp.maximum(jnp.sum(weight), jnp.float32(1))
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
            return jnp.sum(ce * weight) / count, ({"accuracy": jnp.sum(correct * weight) / count}, model_state)

        return loss

    return dataclasses.replace(base, train_loss=train_loss, example_x=jnp.zeros((2,), jnp.int32))


def evaluate_full_graph(task: Task, params, model_state, node_ids, labels, shared) -> tuple[jax.Array, dict]:
    """The full-graph test loss and accuracy at ``node_ids``, jitted (for scripts; the driver chunks the test set)."""
    return jax.jit(task.evaluate)(params, model_state, {"x": jnp.asarray(node_ids, jnp.float32),
                                                        "y": jnp.asarray(labels, jnp.int32)}, shared)
