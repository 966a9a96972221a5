"""GIST on a generated graph (a contextual stochastic block model: 7 blocks, features informative at a chosen
signal-to-noise), so it runs on a fresh machine with no data at all.

10,000 nodes, average degree 10, 64 features, 300 training nodes per class; GraphSAGE (mean aggregator) with 256 hidden features and LayerNorm,
W=4 workers with 64 features each, K=10, Cluster-GCN mini-batches: the graph cut into 32 clusters by METIS, each
step one cluster's subgraph; Adam lr 0.01, 30 rounds. Evaluation runs over the full graph.

Command::

    istjax train --config=experiments/configs/csbm_gist.py --workdir=runs/csbm_gist

Result: not measured (no committed run). This config shows GIST on a graph that needs no data; the committed GIST studies (three
seeds) are on Cora and Citeseer: ``experiments/graphs/results/``, rendered in ``docs/graphs.md``.
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "csbm_gist"
    c.algorithm.name = "ist"
    c.data.name = "csbm"
    c.data.kwargs = ml_collections.ConfigDict({"num_nodes": 10_000, "num_classes": 7, "num_features": 64,
                                                  "avg_degree": 10.0, "train_per_class": 300,
                                                  "seed": 0})
    c.model = ml_collections.ConfigDict({"name": "graphsage", "hidden": (256,), "layer_norm": True})
    c.num_workers = 4
    c.local_steps = 10
    c.data.graph_batches = "clusters"
    c.data.num_clusters = 32
    c.data.clusters_per_step = 1
    c.data.cluster_method = "metis"
    c.optimizer = "adam"
    c.learning_rate = 0.01
    c.num_rounds = 30
    c.eval_every = 5
    c.checkpoint_every = 15
    c.target_accuracy = 0.8
    return c
