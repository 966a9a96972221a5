"""Data-parallel SGD on MNIST-1D, the baseline for `mnist1d_ist.py` at equal samples seen (192,000).

Command::

    istjax train --config=experiments/configs/mnist1d_data_parallel.py --workdir=runs/mnist1d_data_parallel

Expected result (measured on a shared 2-core CPU):
test accuracy 0.650 after 150 rounds (192,000 samples; 0.6 at round 60), about 116 ms per round; each worker moves
11.6 MB each way per round.
"""

from istjax.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "mnist1d_data_parallel"
    c.algorithm = "data_parallel"
    c.dataset = "mnist1d"
    c.model.hidden = (512, 512)
    c.num_rounds = 150
    c.eval_every = 10
    c.checkpoint_every = 50
    c.target_accuracy = 0.6
    return c
