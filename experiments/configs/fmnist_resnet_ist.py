"""IST on a ResNet-18-shaped network (channels partitioned) on Fashion-MNIST (60,000 / 10,000 real images).

ResNet-18's layout (basic blocks 2-2-2-2, BatchNorm with running statistics, 1x1 strided projection shortcuts) at
1/8 of its widths (8-16-32-64 channels) so that it trains on a CPU; W=2, K=10, B=32, SGD with momentum 0.9, lr
0.05 with weight decay 5e-4, step decay by 10 at 50 % and 75 % of 30 rounds, random crop (4 pixels of padding)
and horizontal flip; BatchNorm statistics recomputed on the merged model after every round. Every conv's output channels (and its BatchNorm) are a neuron group; a residual addition
ties both branches to one group. The same study with data parallel and local SGD, at W = 2 and 4, is one command
(see docs/images.md)::

    istjax compare --config=experiments/configs/fmnist_resnet_ist.py --workers 2,4 --workdir=runs/resnet_study

Command::

    istjax train --config=experiments/configs/fmnist_resnet_ist.py --workdir=runs/fmnist_resnet_ist

Result: ``experiments/images/results/diagnosis.json`` (the channel-IST diagnosis, three seeds per cell;
``python experiments/images/studies.py diagnosis``), rendered in docs/images.md.
"""

import ml_collections

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "fmnist_resnet_ist"
    c.algorithm = "ist"
    c.dataset = "fashion_mnist"
    c.model = ml_collections.ConfigDict({"name": "resnet", "stage_sizes": (2, 2, 2, 2),
                                         "widths": (64, 128, 256, 512), "width_multiplier": 1 / 8,
                                         "channel_partition": "all", "activation_scale": "none",
                                         "test_keep": 1.0})
    c.num_workers = 2
    c.local_steps = 10
    c.batch_size = 32
    c.optimizer = "momentum"
    c.momentum = 0.9
    c.learning_rate = 0.05
    c.weight_decay = 5e-4
    c.lr_schedule = "step"
    c.lr_decay_at = (0.5, 0.75)
    c.augment = True
    # BatchNorm running statistics recomputed on the merged model after every round: statistics a quarter- or
    # half-width worker gathered do not describe the full-width network (carried, the test loss was 1,734 after 4
    # rounds against 2.26 recomputed).
    c.model_state = "recompute"
    c.num_rounds = 30
    c.eval_every = 5
    c.checkpoint_every = 15
    c.target_accuracy = 0.8
    return c
