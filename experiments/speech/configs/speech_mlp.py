"""The IST paper's Google Speech Commands study (Yuan et al., arXiv 1910.02120, section 5): MLPs on 4096 log-mel
features (128 mels x 32 frames), IST vs data parallel vs local SGD at 2, 4 and 8 workers and several local-step
counts K.

The config argument is ``MODEL[,ALGORITHM[,W[,K]]]``:

* ``MODEL``: ``mlp2`` (4096 -> 4096 -> 35, the paper's 2-layer net), ``mlp3`` (4096 -> 8192 -> 8192 -> 35, the
  3-layer net), or ``mlp2_small`` (4096 -> 512 -> 35, a version that runs on a 2-core CPU in minutes);
* ``ALGORITHM``: ``ist`` (default), ``data_parallel`` or ``local_sgd``;
* ``W``: workers, 2, 4 or 8 (default 4); ``K``: local steps per round (default 20; the paper used 20 to 80).

Everything else is the paper's: linear layers without bias, batch-statistics BatchNorm after each hidden layer and
an affine-free BatchNorm on the logits, plain SGD with learning rate 0.01, batch 128 per worker, write-back
without averaging (IST). Data: the shipped ``synthetic_speech`` stand-in (20000 train / 4000 test clips of 4096
log-mel-like features, 35 classes); for the real data see ``docs/datasets.md`` (TFDS ``speech_commands`` through
``istjax.data.tfds.load_tfds``, 12 classes in TFDS's version).

Commands (one run, then the three algorithms at 2, 4 and 8 workers under one budget, then a K sweep)::

    istjax train --config=experiments/speech/configs/speech_mlp.py:mlp2,ist,4,20 --workdir=runs/speech/mlp2_ist_W4_K20
    istjax compare --config=experiments/speech/configs/speech_mlp.py:mlp2 --workers 2,4,8 --workdir=runs/speech/mlp2_K20
    for K in 20 40 80; do
      istjax compare --config=experiments/speech/configs/speech_mlp.py:mlp3 --config.local_steps=$K \
          --workers 2,4,8 --workdir=runs/speech/mlp3_K$K
    done
    istjax plot runs/speech/mlp2_K20/*_W4 --out runs/speech/mlp2_K20_W4.png

What to expect. On the real Google Speech Commands the paper reports final test accuracy (data parallel / local
SGD / IST) .7938 / .7998 / .8153 for the 2-layer and .7950 / .7992 / .8327 for the 3-layer net, and IST reaching
77% 4.2x (2-layer) and 6.1x (3-layer) faster than local SGD on 2 to 8 cloud CPU instances. On the synthetic stand-in
the absolute accuracies differ (it is a generated, easier or harder task depending on ``class_sep`` and
``noise_scale``); what should carry over is the ordering of communication (IST moves 1/W^2 to 1/W of the model per
worker per round, local SGD all of it, data parallel all of it K times) and IST's accuracy staying close to local
SGD's at equal samples. The full-size ``mlp2``/``mlp3`` runs need a GPU or hours of CPU; ``mlp2_small`` runs here:
``istjax compare --config=experiments/speech/configs/speech_mlp.py:mlp2_small --workers 2,4 --workdir=runs/speech/small``
(its numbers: run it; they are measured, not quoted).

Result: not measured (no committed run: the real data cannot be downloaded here, and the paper's figures above are
its own, on the real data).
"""

from istjax.launch.config import default_config

MODELS = {"mlp2": (4096,), "mlp3": (8192, 8192), "mlp2_small": (512,)}
ALGORITHMS = ("ist", "data_parallel", "local_sgd")


def get_config(arg=None):
    parts = [p.strip() for p in (arg or "mlp2").split(",")]
    if len(parts) > 4:
        raise ValueError(f"config argument {arg!r}: expected MODEL[,ALGORITHM[,W[,K]]], e.g. 'mlp2,ist,4,20'.")
    model = parts[0]
    algorithm = parts[1] if len(parts) > 1 else "ist"
    workers = int(parts[2]) if len(parts) > 2 else 4
    local_steps = int(parts[3]) if len(parts) > 3 else 20
    if model not in MODELS:
        raise ValueError(f"config argument MODEL={model!r}: choose one of {sorted(MODELS)}.")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"config argument ALGORITHM={algorithm!r}: choose one of {list(ALGORITHMS)}.")

    c = default_config()
    c.name = f"speech_{model}_{algorithm}_W{workers}_K{local_steps}"
    c.algorithm.name = algorithm
    c.data.name = "synthetic_speech"  # 20000 x 4096, 35 classes; see docs/datasets.md for the real speech_commands
    c.model.hidden = MODELS[model]
    c.model.batch_norm = True
    c.model.output_batch_norm = True
    c.num_workers = workers
    c.local_steps = local_steps
    c.batch_size = 128
    c.optimizer = "sgd"
    c.learning_rate = 0.01
    c.algorithm.optimizer_state = "reset"
    # 78 rounds: 40 epochs of the 20000 training clips at W=4, K=20, B=128 (W * K * B = 10240 samples a round).
    c.num_rounds = 40 * 20000 // (4 * 20 * 128)
    c.eval_every = 25
    c.eval_batch_size = 1000
    c.eval_train_examples = 2000
    c.checkpoint_every = 250
    c.target_accuracy = None
    return c
