"""IST on synthetic extreme multi-label data sized for the extreme study on a 2-core machine
(`istjax.data.extreme.synthetic_xmc`: 20,000 / 5,000 points, 20,000 sparse features, 2,000 power-law labels, about 4
labels and 26 nonzero features a point, label-dependent features plus noise, so that a wider H helps up to about
the number of labels).

Its shape puts the memory in the model rather than in the data: 22,000 weights a hidden unit, most in the embedding
bag, whose rows a step reads only for its points' features, so a wide H costs memory more than time. The recipe is
the Debian study's (`experiments/configs/xmc_debian_ist.py`): `istjax.models.SparseMLP` (embedding bag -> H hidden
-> the labels, softmax loss over each point's label set), IST with W = 2 workers dealt stratified by 2 owners, K =
10 local Adam steps of 128 points (moments reset every round).

Commands::

    istjax train --config=experiments/configs/xmc_synthetic_study_ist.py --workdir=runs/xmc_synthetic_study
    python -m experiments.extreme.study --config experiments/configs/xmc_synthetic_study_ist.py --cap 1.4GiB \\
        --widths 512,1024,2048,4096 --arms ist:2,ist:4,data_parallel:2,local_sgd:2,tensor_parallel:2 \\
        --samples 102400 --out experiments/extreme/results/synthetic.json --figure docs/figures/extreme_synthetic.png

Result: P@1 0.915 ± 0.001 (3 seeds) at this config's H = 1024 on 2 sharded ranks for 102,400 samples, PSP@1 0.314 ±
0.001, in ``experiments/extreme/results/synthetic.json`` (every arm and width under 1.40 GiB a rank), rendered in
docs/extreme.md.
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "xmc_synthetic_study_ist"
    c.algorithm.name = "ist"
    c.data.name = "xmc_synthetic"
    c.data.kwargs = ml_collections.ConfigDict({"num_train": 20_000, "num_test": 5_000, "num_features": 20_000,
                                               "num_labels": 2_000})
    c.model = ml_collections.ConfigDict({"name": "sparse_mlp", "hidden": (1024,), "loss": "softmax", "rescale": True})
    c.num_workers = 2
    c.sampler.name = "stratified"
    c.sampler.num_owners = 2
    c.local_steps = 10
    c.batch_size = 128
    c.optimizer = "adam"
    c.learning_rate = 1e-3
    c.num_rounds = 40  # 102,400 samples: about 5 epochs
    c.eval_every = 20
    c.eval_batch_size = 1000
    c.eval_train_examples = 2000
    c.checkpoint_every = 40
    c.target_accuracy = 0.4
    return c
