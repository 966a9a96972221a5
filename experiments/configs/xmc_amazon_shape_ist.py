"""IST at Amazon-670k's shape, for memory: synthetic extreme multi-label data (`istjax.data.extreme.synthetic_xmc`) with
135,909 sparse features and 670,088 power-law labels (Amazon-670k has 670,091; three fewer so that tensor
parallelism's equal label blocks divide them on 2, 4 or 8 ranks), the IST paper's Amazon-670k network (embedding bag
-> H hidden -> the labels, softmax loss over each point's label set), W = 4 workers dealt stratified by 4 owners, K = 5
local Adam steps of 128 points.

What it shows is memory and time per round, not accuracy: a few rounds on 4,096 points (the study,
``experiments/extreme/study.py --config experiments/configs/xmc_amazon_shape_ist.py``, runs every arm under a memory
limit per rank). At H = 512 the model has 413 M parameters (1.54 GiB in float32); the sharded mode on 4 processes
gives each a quarter, and each draws only its quarter (`istjax.core.tiled_init`).

Command (about 20 GiB of memory in all: four ranks of about 5 GiB, `docs/extreme.md`)::

    mpiexec -n 4 istjax train --config=experiments/configs/xmc_amazon_shape_ist.py --config.runtime.name=mpi \\
        --config.runtime.mode=sharded --workdir=runs/xmc_amazon_shape

Result: memory and time, not accuracy (one seed, 2 rounds): this config, H = 512 on 4 sharded ranks, fits 5.25 GiB a
rank at a peak RSS of 5.0 GiB and 36.4 s a round, in ``experiments/extreme/results/amazon_shape.json`` (every arm
and width; ``python -m experiments.extreme.study``), rendered in docs/extreme.md.
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "xmc_amazon_shape_ist"
    c.algorithm.name = "ist"
    c.data.name = "xmc_synthetic"
    c.data.kwargs = ml_collections.ConfigDict({"num_train": 4096, "num_test": 256, "num_features": 135_909,
                                               "num_labels": 670_088})
    c.model = ml_collections.ConfigDict({"name": "sparse_mlp", "hidden": (512,), "loss": "softmax", "rescale": True})
    c.num_workers = 4
    c.sampler.name = "stratified"
    c.sampler.num_owners = 4
    c.local_steps = 5
    c.batch_size = 128
    c.optimizer = "adam"
    c.learning_rate = 1e-3
    c.num_rounds = 2
    c.eval_every = 2
    c.eval_batch_size = 64  # a chunk's logits: 64 x 670,088 floats, 164 MiB
    c.eval_train_examples = 128
    c.checkpoint_every = 2
    return c
