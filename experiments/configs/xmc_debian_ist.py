"""IST on xmc-debian-deps: predict a Debian package's dependencies (15,186 labels, about 5 a package) from the words
of its description (31,435 tf-idf features, about 30 nonzero a package); 43,333 training and 10,345 test packages.

`istjax.models.SparseMLP` (embedding bag -> 512 hidden -> 15,186 labels, softmax loss over each package's label
set; a worker's hidden units rescaled by H / h as in inverted dropout), IST with W = 2 workers (hidden units
dealt stratified by 2 owners, so the same config runs sharded on 2 processes), K = 10 local Adam steps of 128
packages. Test accuracy is P@1 (the top label is a true dependency);
the evaluation also records P@3, P@5 and nDCG@5. Reads ``$ISTJAX_DATA_DIR/xmc-debian-deps``.

Commands::

    ISTJAX_DATA_DIR=../shared/data istjax train --config=experiments/configs/xmc_debian_ist.py --workdir=runs/debian
    ISTJAX_DATA_DIR=../shared/data mpiexec -n 2 istjax train --config=experiments/configs/xmc_debian_ist.py \
        --config.runtime.name=mpi --config.runtime.mode=sharded --workdir=runs/debian_mpi

Result: P@1 0.530 ± 0.004 (3 seeds) at this config's H = 512 on 2 sharded ranks for 102,400 samples (40 of its 100
rounds), PSP@1 0.132 ± 0.001, in ``experiments/extreme/results/debian.json`` (every arm and width under 1.90 GiB a
rank; ``python -m experiments.extreme.study``), rendered in docs/extreme.md.
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "xmc_debian_ist"
    c.algorithm.name = "ist"
    c.data.name = "xmc_debian_deps"
    c.model = ml_collections.ConfigDict({"name": "sparse_mlp", "hidden": (512,), "loss": "softmax", "rescale": True})
    c.num_workers = 2
    c.sampler.name = "stratified"
    c.sampler.num_owners = 2
    # Adam's moments restart every round (optimizer_state="reset"): carried with their parameters they score higher,
    # but each rank then holds its shard's moments too, and under the study's cap the wider IST cells no longer fit
    # (docs/extreme.md).
    c.local_steps = 10
    c.batch_size = 128
    c.optimizer = "adam"
    c.learning_rate = 1e-3
    c.num_rounds = 100  # 256,000 samples: about 6 epochs
    c.eval_every = 20
    c.eval_batch_size = 1000
    c.eval_train_examples = 2000
    c.checkpoint_every = 50
    c.target_accuracy = 0.4
    return c
