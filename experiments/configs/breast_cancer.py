"""IST on your own data: scikit-learn's breast-cancer table (427 train / 142 test, 30 features, 2 classes) through
``data.module`` (``experiments/your_data/breast_cancer.py:breast_cancer``), the paper's MLP 30-512-2, W=4, K=5, B=16,
40 rounds (12,800 samples, about 30 epochs), every algorithm at the same samples.

Command::

    istjax train --config=experiments/configs/breast_cancer.py --workdir=runs/breast_cancer
    istjax train --config=experiments/configs/breast_cancer.py --config.algorithm.name=data_parallel ...

Result: row ``ist`` of ``experiments/mlp/results/breast_cancer.json`` (three seeds, IST, data parallel and local SGD;
``python -m experiments.mlp.studies breast_cancer`` regenerates it), rendered in ``docs/your_data.md``.
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "breast_cancer"
    c.data.name = "breast_cancer"
    c.data.module = "../your_data/breast_cancer.py:breast_cancer"  # relative to this file: read from beside it
    c.num_workers, c.local_steps, c.batch_size, c.num_rounds = 4, 5, 16, 40
    c.eval_every = 4
    c.target_accuracy = 0.95
    return c
