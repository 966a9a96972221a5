"""GIST on Cora (2,708 papers, 5,429 citations, 7 classes; Planetoid's standard split: 140 / 500 / 1,000 nodes).

Kipf and Welling's recipe (a 2-layer GCN, ReLU, dropout 0.5 on the input features and the hidden layer, L2 weight
decay 5e-4, Adam lr 0.01, 200 full-batch steps, row-normalised features, ``D^-1/2 (A + I) D^-1/2``) at 256 hidden
features, so that GIST has features to deal: W=2 workers each train a 128-wide sub-GCN for K=10 full-graph steps
(every step runs the whole graph and scores the 140 training nodes), the pieces are written back, 20 rounds (200
steps per worker). Adam's moments travel with the parameters they belong to (``optimizer_state="carry"``), so W=1
is exactly full-model training. No LayerNorm: with it the 256-wide GCN fits the 140 training nodes to a near-zero
loss and loses about 4 points of test accuracy (``docs/graphs.md``, the recipe study). Two differences from the paper's code
remain: the weight decay covers every parameter (the paper's only the first layer's kernel) and the layers have
biases. The graph is the shared input: every worker reads it, none copies it. Reads the Planetoid files from
``$ISTJAX_DATA_DIR/planetoid`` (or ``--config.data.kwargs.data_dir``); GraphSAGE is
``--config.model.name=graphsage``, the paper's 16 hidden features ``--config.model.hidden='(16,)'``.

Command::

    ISTJAX_DATA_DIR=../shared/data istjax train --config=experiments/configs/cora_gist.py --workdir=runs/cora_gist

Result: ``experiments/graphs/results/gist_cora.json`` (three seeds: GCN and GraphSAGE at W = 1, 2, 4, 8 and the
paper's 16-wide GCN; ``python -m experiments.graphs.studies cora`` regenerates it), rendered in ``docs/graphs.md``.
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "cora_gist"
    c.algorithm.name = "ist"
    c.data.name = "cora"
    c.model = ml_collections.ConfigDict({"name": "gcn", "hidden": (256,), "layer_norm": False, "dropout": 0.5})
    c.num_workers = 2
    c.local_steps = 10
    c.batch_size = 140  # every training node, every step (full-graph GCN training)
    c.data.sharding = "shared"  # every worker trains on the whole training set
    c.optimizer = "adam"
    c.learning_rate = 0.01
    c.weight_decay = 5e-4
    c.algorithm.optimizer_state = "carry"  # Adam's moments are dealt and merged with their parameters: W=1 = full training
    c.num_rounds = 20  # x K = 10: Kipf and Welling's 200 steps
    c.eval_every = 10
    c.checkpoint_every = 10
    c.target_accuracy = 0.75
    return c
