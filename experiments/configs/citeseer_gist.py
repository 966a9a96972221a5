"""GIST on Citeseer (3,327 papers, 4,552 distinct citations, 6 classes; Planetoid's standard split: 120 / 500 / 1,000 nodes).

`cora_gist.py`'s recipe (Kipf and Welling's 2-layer GCN at 256 hidden features, dropout 0.5, weight decay 5e-4,
Adam 0.01, 200 full-batch steps; W=2, K=10, 20 rounds, Adam's moments carried) on Citeseer: a batch is the 120
training nodes. Citeseer's 15 test ids without a feature row get zero features (the standard loader's handling).

Command::

    ISTJAX_DATA_DIR=../shared/data istjax train --config=experiments/configs/citeseer_gist.py --workdir=runs/citeseer_gist

Result: ``experiments/graphs/results/gist_citeseer.json`` (three seeds: GCN and GraphSAGE at W = 1, 2, 4, 8 and the
paper's 16-wide GCN; ``python -m experiments.graphs.studies citeseer`` regenerates it), rendered in
``docs/graphs.md``.
"""

import pathlib
import runpy


def get_config(arg=None):
    """`cora_gist.py` on Citeseer."""
    c = runpy.run_path(str(pathlib.Path(__file__).with_name("cora_gist.py")))["get_config"](arg)
    c.name = "citeseer_gist"
    c.data.name = "citeseer"
    c.batch_size = 120  # every training node, every step
    c.target_accuracy = 0.65
    return c
