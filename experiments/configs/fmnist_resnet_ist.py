"""IST on a ResNet-18-shaped network (channels partitioned) on Fashion-MNIST (60,000 / 10,000 real images).

ResNet-18's layout (basic blocks 2-2-2-2, BatchNorm with running statistics, 1x1 strided projection shortcuts) at
1/8 of its widths (8-16-32-64 channels) so that it trains on a CPU; W=2, B=32, SGD with momentum 0.9 (reset at
every repartition), lr 0.1 with weight decay 5e-4, step decay by 10 at 50 % and 75 % of the rounds, random crop (4
pixels of padding) and horizontal flip; BatchNorm statistics recomputed on the merged model after every round.

The defaults (docs/images.md, "Why channel IST lagged"): only each block's inner channels are partitioned
(``model.channel_partition="inner"``; the residual streams, stem, projections and head are shared and averaged), a
sub-network rescales its inner activations by the inverse of the fraction it holds
(``model.activation_scale="train"``), and K = 20 local steps; the decomposition study re-measures each against its
alternative. ``:diagnosis`` is the setting before these choices (every conv's channels, the IST paper's layout, no
scaling, K = 10), kept for the precision study's image run.

``:w4`` is W = 4 with momentum carried across repartitions (``algorithm.optimizer_state="carry"``): the
decomposition study (issue 35, ``experiments/images/results/decompose.json``) found it better than the defaults at
W = 4 on five seeds, still moving fewer bytes than local SGD. At W = 2 the default keeps momentum reset: carried, it
is better there too but moves more bytes than local SGD (the momentum travels with the weights). The learning rate
is 0.1 (it was 0.05): the same study found 0.1 better than 0.05 at both W = 2 and W = 4 on five seeds, at no cost in
bytes. ``:w4`` and ``:diagnosis`` keep 0.05, the rate they were measured at (0.1 with momentum carried is
unmeasured).

Command::

    istjax train --config=experiments/configs/fmnist_resnet_ist.py --workdir=runs/fmnist_resnet_ist
    istjax train --config=experiments/configs/fmnist_resnet_ist.py:w4 --workdir=runs/fmnist_resnet_ist_w4

Result: ``experiments/images/results/resnet.json`` (against data parallel and local SGD at a quarter width and 600
rounds; ``python -m experiments.images.studies resnet``) and ``experiments/images/results/decompose.json`` (where the
gap goes, three budgets, the variants re-checked; ``python -m experiments.images.studies decompose``), rendered in
docs/images.md.
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    if arg not in (None, "", "diagnosis", "w4"):
        raise ValueError(f"fmnist_resnet_ist.py:{arg}: unknown setting; use no suffix (the defaults, W = 2), :w4 "
                         f"(W = 4, momentum carried) or :diagnosis (the paper's layout, before the defaults).")
    before = arg == "diagnosis"
    c = default_config()
    c.name = "fmnist_resnet_ist"
    c.algorithm.name = "ist"
    c.data.name = "fashion_mnist"
    c.model = ml_collections.ConfigDict({"name": "resnet", "stage_sizes": (2, 2, 2, 2),
                                         "widths": (64, 128, 256, 512), "width_multiplier": 1 / 8,
                                         "channel_partition": "all" if before else "inner",
                                         "activation_scale": "none" if before else "train",
                                         "test_keep": 1.0,
                                         # "running" statistics (recomputed or carried, below) or "batch" (batch
                                         # statistics at test time too; evaluated in batches of >= 256)
                                         "batch_norm": "running"})
    c.num_workers = 4 if arg == "w4" else 2
    c.local_steps = 10 if before else 20
    c.batch_size = 32
    c.optimizer = "momentum"
    c.momentum = 0.9
    # 0.1: better than 0.05 at W = 2 and 4 in the decomposition (five seeds); :w4 and :diagnosis as measured
    c.learning_rate = 0.05 if arg in ("w4", "diagnosis") else 0.1
    c.weight_decay = 5e-4
    c.lr_schedule = "step"
    c.lr_decay_at = (0.5, 0.75)
    c.data.augment = True
    # BatchNorm running statistics recomputed on the merged model after every round: statistics a quarter- or
    # half-width worker gathered do not describe the full-width network (carried, the test loss was 1,734 after 4
    # rounds against 2.26 recomputed).
    c.algorithm.model_state = "recompute"
    # momentum re-created at every repartition, except at W = 4 (:w4), where carrying it was measurably better
    c.algorithm.optimizer_state = "carry" if arg == "w4" else "reset"
    c.num_rounds = 30
    c.eval_every = 5
    c.checkpoint_every = 15
    c.target_accuracy = 0.8
    return c
