"""The IST paper's speech MLPs on the 35 Speech Commands keywords synthesised offline (`spoken_keywords`).

``--config=experiments/configs/keywords_speech.py:2`` (or ``:3``): the models and training of
`experiments/configs/fsdd_speech.py` on `istjax.data.keywords.load_spoken_keywords` (35 words x 100 clips by
espeak-ng in 160 voices with noise; the test clips are spoken by voices no training clip uses; generated once and
cached, about 10 s). The paper's second speech claim, that IST generalises at least as well as data parallel
(.8153 vs .7938 final test accuracy, 2-layer model), is checked on it at equal sample budgets with::

    istjax compare --config=experiments/configs/keywords_speech.py:2 --algorithms ist,data_parallel --workers 2 \\
        --workdir=runs/keywords_generalisation

Result: row ``ist`` of ``experiments/mlp/results/keywords.json`` (IST vs data parallel at equal samples, three seeds;
``python -m experiments.mlp.studies keywords``), rendered in docs/network.md ("Generalisation"); time to accuracy in
``experiments/network/results_keywords.json``.
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    layers = int(arg or 2)
    if layers not in (2, 3):
        raise ValueError(f"keywords_speech.py:{arg}: the paper's speech models have 2 or 3 layers; use :2 or :3.")
    c = default_config()
    c.name = "keywords_speech"
    c.algorithm.name = "ist"
    c.data.name = "spoken_keywords"
    c.model.hidden = (4096,) * (layers - 1)
    c.num_workers, c.local_steps, c.batch_size = 2, 20, 128
    c.optimizer, c.learning_rate = "sgd", 0.01
    c.num_rounds, c.eval_every, c.eval_train_examples, c.checkpoint_every = 40, 5, 1000, 20
    c.target_accuracy = 0.5
    return c
