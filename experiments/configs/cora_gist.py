"""GIST on Cora (2,708 papers, 5,429 citations, 7 classes; Planetoid's standard split: 140 / 500 / 1,000 nodes).

A 2-layer GCN (Kipf and Welling) with 256 hidden features, LayerNorm without affine parameters after the hidden
layer (as GIST) and dropout 0.5 on the input and hidden features, trained full-graph: every step runs the whole graph and scores the 140 training nodes. GIST
partitions the hidden features among W=2 workers, each trains its 128-wide sub-GCN for K=10 steps, and the
pieces are written back; Adam lr 0.01 (reset every round), weight decay 5e-4, 30 rounds. The graph is the shared
input: every worker reads it, none copies it. Reads the Planetoid files from ``$ISTJAX_DATA_DIR/planetoid`` (or
``--config.dataset_kwargs.data_dir``); GraphSAGE is ``--config.model.name=graphsage``.

Command::

    ISTJAX_DATA_DIR=../shared/data istjax train --config=experiments/configs/cora_gist.py --workdir=runs/cora_gist

Result: ``docs/graphs.md`` (one seed, from a run whose results were not committed; being re-run on three seeds with a
committed results file, issue 20).
"""

import ml_collections

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "cora_gist"
    c.algorithm = "ist"
    c.dataset = "cora"
    c.model = ml_collections.ConfigDict({"name": "gcn", "hidden": (256,), "layer_norm": True, "dropout": 0.5})
    c.num_workers = 2
    c.local_steps = 10
    c.batch_size = 140  # every training node, every step (full-graph GCN training)
    c.sharding = "shared"  # every worker trains on the whole training set
    c.optimizer = "adam"
    c.learning_rate = 0.01
    c.weight_decay = 5e-4
    c.num_rounds = 30
    c.eval_every = 5
    c.checkpoint_every = 15
    c.target_accuracy = 0.75
    return c
