"""The IST paper's 3-layer speech model on `synthetic_speech`: MLP 4096-8192-8192-35 (arXiv 1910.02120).

Same data and setting as `speech2_ist.py` (SGD lr 0.01, batch 128, K=20, W=4). The hidden-to-hidden weight
(8192 x 8192) is split on both axes, so each worker receives 1/W^2 of it. 100M parameters: the full-width
evaluation dominates a short CPU run, so it is done every 5 rounds on the test set and 1000 training examples, and
the 400 MB state is checkpointed only at the end (and on SIGINT/SIGTERM).

Command::

    istjax train --config=experiments/configs/speech3_ist.py --workdir=runs/speech3_ist

Result: not measured (no committed run; the run prints its own summary). The committed speech studies are the keywords
generalisation study (``python -m experiments.mlp.studies keywords``) and the time-to-accuracy study on real spoken
digits (``docs/network.md``).
"""

import pathlib
import runpy


def get_config(arg=None):
    """The paper's setting of `speech2_ist.py` (SGD lr 0.01, B=128, K=20, W=4) on the 3-layer 4096-8192-8192-35 MLP."""
    c = runpy.run_path(str(pathlib.Path(__file__).with_name("speech2_ist.py")))["get_config"](arg)
    c.name = "speech3_ist"
    c.model.hidden = (8192, 8192)
    c.eval_train_examples = 1000
    c.checkpoint_every = 20
    return c
