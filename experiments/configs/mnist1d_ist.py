"""IST on MNIST-1D (4000 train / 1000 test, 40 features; generated offline by the mnist1d package).

MLP 40-512-512-10 (two neuron groups, the hidden-to-hidden weight is split on both axes), W=4, K=10, B=32, SGD
lr 0.1, 150 rounds (192,000 samples: 48 passes over the 4000 training examples).

Command::

    istjax train --config=experiments/configs/mnist1d_ist.py --workdir=runs/mnist1d_ist

Expected result (measured on a shared 2-core CPU):
test accuracy 0.583 after 150 rounds (192,000 samples; 0.6 not reached), about 5 ms per round; each worker moves 93
kB each way per round. At equal samples IST trails the full-model baselines here (0.650 / 0.643): each worker trains
a quarter-width network whose 512 x 512 weight it holds 1/16 of.
"""

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "mnist1d_ist"
    c.algorithm = "ist"
    c.dataset = "mnist1d"
    c.model.hidden = (512, 512)
    c.num_rounds = 150
    c.eval_every = 10
    c.checkpoint_every = 50
    c.target_accuracy = 0.6
    return c
