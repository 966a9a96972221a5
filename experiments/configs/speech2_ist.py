"""The IST paper's 2-layer speech model on `synthetic_speech`: MLP 4096-4096-35 (arXiv 1910.02120, Google Speech).

`synthetic_speech` is a generated stand-in for Google Speech Commands log-mel features (20,000 train / 4,000 test
examples of 128 mels x 32 frames, 35 classes; see `istjax.data.load_synthetic_speech`): the real data cannot be
downloaded here, so its accuracy is not comparable with the paper's .8153. The paper's setting: BatchNorm with batch
statistics, no biases, plain SGD lr 0.01, batch 128, K=20 local steps. W=4 (the paper used 2 to 8). The number of
rounds is cut down so the run takes minutes on a CPU; raise it with ``--config.num_rounds=...``.

Command::

    istjax train --config=experiments/configs/speech2_ist.py --workdir=runs/speech2_ist

Result: not measured (no committed run; the run prints its own summary). The committed speech studies are the keywords
generalisation study (``python -m experiments.mlp.studies keywords``) and the time-to-accuracy study on real spoken
digits (``docs/network.md``).
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "speech2_ist"
    c.algorithm.name = "ist"
    c.data.name = "synthetic_speech"
    c.model.hidden = (4096,)
    c.num_workers = 4
    c.local_steps = 20
    c.batch_size = 128
    c.optimizer = "sgd"
    c.learning_rate = 0.01
    c.num_rounds = 20
    c.eval_every = 5
    c.eval_train_examples = 2000
    c.checkpoint_every = 10
    c.target_accuracy = 0.77
    return c
