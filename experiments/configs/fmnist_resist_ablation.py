"""ResIST's ablation in miniature: five configs, one per step of the paper's Table (arXiv 2107.00961), on
Fashion-MNIST. Pick a step after a colon::

    istjax train --config=experiments/configs/fmnist_resist_ablation.py:naive --workdir=runs/ablation/1_naive

======================  ==============================================================================  ======
step                    what changes (cumulative)                                                       paper
======================  ==============================================================================  ======
``naive``               post-activation ResNet; every block of every stage dealt, strided first blocks  66.3
                        too (the worker without a first block trains its shortcut alone); no scaling
``share_strided``       the first (strided) block of every stage shared and averaged                     68.3
``one_section``         only the deepest stage's blocks dealt, the rest shared                          84.3
``test_scale``          partitioned residual branches scaled at test time (fraction of the stage a      91.5
                        worker trains: 1/W)
``preactivation``       pre-activation blocks (the default step)                                        92.0
======================  ==============================================================================  ======

The paper's numbers are CIFAR-10 test accuracy with a deep ResNet; here: stages of 3, 3 and 9 basic blocks at 4, 8
and 16 channels, W=2, K=10, B=32, SGD with momentum 0.9 re-created every round, lr 0.05, weight decay 5e-4, step
decay by 10 at 50 % and 75 % of 40 rounds, random crop and flip. All five steps, then one table::

    python -m experiments.images.studies ablation --workdir=runs/ablation

Result: ``experiments/images/results/ablation.json`` (the five steps at 150 rounds, three seeds each;
``python -m experiments.images.studies ablation``), rendered in docs/images.md.
"""

import ml_collections

from istjax.launch.config import default_config

STEPS = ("naive", "share_strided", "one_section", "test_scale", "preactivation")


def get_config(arg=None):
    step = arg or "preactivation"
    if step not in STEPS:
        raise ValueError(f"fmnist_resist_ablation.py:{step}: unknown step; choose one of {', '.join(STEPS)} "
                         f"(e.g. --config=experiments/configs/fmnist_resist_ablation.py:naive).")
    at = STEPS.index(step)
    c = default_config()
    c.name = "fmnist_resist_ablation" if arg is None else f"fmnist_resist_ablation_{at + 1}_{step}"
    c.algorithm.name = "resist"
    c.data.name = "fashion_mnist"
    c.model = ml_collections.ConfigDict({
        "name": "depth_resnet", "stage_sizes": (3, 3, 9), "widths": (16, 32, 64), "width_multiplier": 0.25,
        "partition_strided": at < 1,  # naive: strided first blocks dealt too
        "partitioned_stages": (0, 1, 2) if at < 2 else (2,),  # from one_section on: the deepest stage only
        "preactivation": at >= 4,
    })
    c.algorithm.test_scale = at >= 3
    c.num_workers = 2
    c.local_steps = 10
    c.batch_size = 32
    c.optimizer = "momentum"
    c.momentum = 0.9
    c.algorithm.optimizer_state = "reset"
    c.learning_rate = 0.05
    c.weight_decay = 5e-4
    c.lr_schedule = "step"
    c.lr_decay_at = (0.5, 0.75)
    c.data.augment = True
    # BatchNorm statistics carried with the blocks (those of the shallow sub-networks, which the test-time scaling
    # matches; recomputed on the full unscaled network they gave 0.148 against 0.304 after 12 rounds).
    c.algorithm.model_state = "carry"
    c.num_rounds = 40
    c.eval_every = 10
    c.checkpoint_every = 20
    return c
