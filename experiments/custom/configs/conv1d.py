"""The 1-D CNN of experiments/custom/conv1d.py (a model istjax does not ship) on MNIST-1D, through model.module.

IST with W = 4, K = 10, B = 32, SGD lr 0.1, 150 rounds (192,000 samples). ``get_config("scale")``, ``"norm"`` or
``"batchnorm"`` picks a remedy (docs/ist_fit.md); override ``--config.algorithm.name`` for the baselines.

Command::

    istjax train --config=experiments/custom/configs/conv1d.py:none --workdir=runs/conv1d_none

Result: ``experiments/custom/results/fit.json`` (three seeds per cell; ``python -m experiments.custom.fit``
regenerates it), rendered in docs/ist_fit.md.
"""

import os

from istjax.launch.config import default_config, use_model

MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conv1d.py") + ":Conv1D"


def get_config(arg="none"):
    c = default_config()
    c.name = f"conv1d_{arg or 'none'}"
    c.algorithm.name = "ist"
    c.data.name = "mnist1d"
    use_model(c, "conv1d", MODEL, channels=(32, 64), remedy=arg or "none")
    c.optimizer = "sgd"
    c.learning_rate = 0.1
    c.num_rounds = 150
    c.eval_every = 10
    c.checkpoint_every = 50
    c.target_accuracy = 0.6
    return c
