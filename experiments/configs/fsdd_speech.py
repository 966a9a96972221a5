"""The IST paper's speech MLPs on real spoken digits (FSDD), for the time-to-accuracy studies on a slow network.

``--config=experiments/configs/fsdd_speech.py:2`` is the paper's 2-layer model (4096 log-mel features -> 4096 ->
10 classes), ``:3`` a 3-layer one narrower than the paper's (4096 -> 4096 -> 4096 -> 10, where the paper's is
4096 -> 8192 -> 8192 -> 35); FSDD has 10 classes where Google Speech
Commands has 35. The paper's setting otherwise: BatchNorm with batch statistics, no biases, plain SGD lr 0.01,
batch 128, K = 20 local steps. The data: `istjax.data.speech.load_fsdd` (2,700 train / 300 test clips, read from
``$ISTJAX_DATA_DIR/fsdd-recordings.tar.gz``). ``algorithm`` is IST here; the studies override it
(``--config.algorithm.name=data_parallel`` / ``local_sgd``) and set the backend to MPI across shaped links
(`experiments/network/time_to_accuracy.py`).

Command (one process)::

    istjax train --config=experiments/configs/fsdd_speech.py:2 --workdir=runs/fsdd2_ist

Result: ``experiments/network/results.json`` (time to 0.9 across shaped links, rendered in docs/network.md;
``python -m experiments.network.time_to_accuracy`` regenerates it).
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    layers = int(arg or 2)
    if layers not in (2, 3):
        raise ValueError(f"fsdd_speech.py:{arg}: the paper's speech models have 2 or 3 layers; use :2 or :3.")
    c = default_config()
    c.name = "fsdd_speech"
    c.algorithm.name = "ist"
    c.data.name = "fsdd"
    c.model.hidden = (4096,) * (layers - 1)
    c.num_workers = 2
    c.local_steps = 20
    c.batch_size = 128
    c.optimizer = "sgd"
    c.learning_rate = 0.01
    c.num_rounds = 20
    c.eval_every = 1
    c.eval_train_examples = 1000
    c.checkpoint_every = 20
    c.target_accuracy = 0.9
    return c
