"""IST on MNIST-1D (4000 train / 1000 test, 40 features; generated offline by the mnist1d package).

MLP 40-512-512-10 (two neuron groups, the hidden-to-hidden weight is split on both axes), W=4, K=10, B=32, SGD
lr 0.1, 150 rounds (192,000 samples: 48 passes over the 4000 training examples).

Command::

    istjax train --config=experiments/configs/mnist1d_ist.py --workdir=runs/mnist1d_ist

Result: ``experiments/mlp/results/mnist1d.json`` (three seeds, with IST and the two baselines at the same
samples; ``python -m experiments.mlp.studies mnist1d`` regenerates it), rendered in the README's headline table.
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "mnist1d_ist"
    c.algorithm.name = "ist"
    c.data.name = "mnist1d"
    c.model.hidden = (512, 512)
    c.num_rounds = 150
    c.eval_every = 10
    c.checkpoint_every = 50
    c.target_accuracy = 0.6
    return c
