"""IST on synthetic extreme multi-label data sized for a 2-core machine (`istjax.data.extreme.synthetic_xmc`: 8,000 /
2,000 points, 5,000 sparse features, 1,000 power-law labels, about 4 labels and 26 nonzero features a point).

`istjax.models.SparseMLP` (embedding bag -> 512 hidden -> 1,000 labels, softmax loss over each point's label set),
IST with W = 2 workers (hidden units dealt stratified by 2 owners), K = 10 local Adam steps of 128 points, 40 rounds. Test accuracy is P@1 (the top label is a
true one); the evaluation also records P@3, P@5 and nDCG@5.

Commands::

    istjax train --config=experiments/configs/xmc_synthetic_ist.py --workdir=runs/xmc_synthetic
    mpiexec -n 2 istjax train --config=experiments/configs/xmc_synthetic_ist.py --config.runtime.name=mpi \
        --config.runtime.mode=sharded --workdir=runs/xmc_synthetic_mpi

The second holds the model in shards: no process ever holds all of it (`istjax.runtimes.mpi`). The tensor-parallel
baseline on the same data and model (every layer split across the 2 processes, activations exchanged every step;
`istjax.algorithms.tensor`)::

    mpiexec -n 2 istjax train --config=experiments/configs/xmc_synthetic_ist.py \
        --config.algorithm.name=tensor_parallel --config.runtime.name=mpi --workdir=runs/xmc_synthetic_tp

Result: not measured (no committed run of this config; the committed extreme studies train
``xmc_synthetic_study_ist.py`` and ``xmc_debian_ist.py``, docs/extreme.md).
"""

import ml_collections

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "xmc_synthetic_ist"
    c.algorithm.name = "ist"
    c.data.name = "xmc_synthetic"
    c.model = ml_collections.ConfigDict({"name": "sparse_mlp", "hidden": (512,), "loss": "softmax", "rescale": True})
    c.num_workers = 2
    # Hidden units dealt stratified by 2 owners: the same partitions as uniform dealing in simulate, and what the
    # sharded MPI mode on 2 processes needs (a fixed-size all-to-all per round).
    c.sampler.name = "stratified"
    c.sampler.num_owners = 2
    c.local_steps = 10
    c.batch_size = 128
    c.optimizer = "adam"
    c.learning_rate = 1e-3
    c.num_rounds = 40
    c.eval_every = 10
    c.eval_batch_size = 500
    c.checkpoint_every = 20
    c.target_accuracy = 0.5
    return c
