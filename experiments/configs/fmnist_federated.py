"""Federated clients of Fashion-MNIST (issue 58): McMahan et al. 2017's 2NN (a 200-200 ReLU MLP) trained by 100
clients, a tenth of them (C = 0.1, 10 clients) sampled a round, client optimizer plain SGD.

``--config=experiments/configs/fmnist_federated.py:ARM[,SPLIT]``, one config per cell of the federated study
(``python -m experiments.federated.study``), with ARM one of

* ``fedsgd``: each sampled client one gradient of all its data (``clients.batch_size="all"``, one epoch);
* ``fedavg``: each sampled client E = 1 epoch of its data at the split's B a round;
* ``fedavgm``: ``fedavg`` with server momentum 0.9 (Hsu et al. 2019; the server's rate is tuned by the study);
* ``fedist``: IST on the sampled clients, each client training a tenth of every hidden layer's units
  (`istjax.algorithms.federated.fedist`), E and B as ``fedavg``'s;

and SPLIT one of

* ``shards`` (the default): the pathological split, two label-sorted shards of 300 examples a client, B = 10
  (60 local steps a round: the paper's ``E = 1, B = 10``);
* ``iid``, ``dir0.5``, ``dir0.1``: 600 examples a client drawn at random, or each class dealt over the clients in
  Dirichlet(0.5) or Dirichlet(0.1) proportions (Hsu et al.'s skew; at least 10 examples a client), B = 50 (a
  Dirichlet(0.1) client holds up to 2,710 examples, so B = 10 would pad every client to 271 steps a round).

The learning rates here are starting points: the study's tuning stage chooses every cell's own on a tuning split.

Result: the ``fedavg`` and ``fedavgm`` cells on ``iid``, ``dir0.5`` and ``dir0.1`` are measured
(``experiments/federated/results/momentum.json``, rendered in docs/federated.md: FedAvgM's gain small on every
split, and at Dirichlet 0.1 neither arm above the linear baseline in 200 rounds); the ``shards`` claim and the
``fedist`` cells are still to run.
"""

from istjax.launch.config import default_config

ARMS = ("fedsgd", "fedavg", "fedavgm", "fedist")
#: SPLIT -> (clients.split, its own settings, B)
SPLITS = {"shards": ("shards", {"shards_per_client": 2}, 10), "iid": ("iid", {}, 50),
          "dir0.5": ("dirichlet", {"alpha": 0.5, "min_size": 10}, 50),
          "dir0.1": ("dirichlet", {"alpha": 0.1, "min_size": 10}, 50)}


def _parse(arg):
    arm, _, split = (arg or "fedavg").partition(",")
    split = split or "shards"
    if arm not in ARMS or split not in SPLITS:
        raise ValueError(f"fmnist_federated.py:{arg}: name ARM[,SPLIT] with ARM one of {', '.join(ARMS)} and SPLIT "
                         f"one of {', '.join(SPLITS)}, e.g. --config=experiments/configs/fmnist_federated.py:"
                         f"fedavgm,dir0.1.")
    return arm, split


def get_config(arg=None):
    arm, split = _parse(arg)
    kind, settings, batch = SPLITS[split]
    c = default_config()
    c.name = "fmnist_federated"
    c.data.name = "fashion_mnist"
    c.model.hidden = (200, 200)
    c.algorithm.name = {"fedsgd": "fedsgd", "fedist": "fedist"}.get(arm, "fedavg")
    c.clients.split, c.clients.num_clients = kind, 100
    for field, value in settings.items():
        c.clients[field] = value
    c.clients.fraction, c.num_workers = 0.1, 10
    c.clients.epochs = 1
    c.clients.batch_size = "all" if arm == "fedsgd" else batch
    if arm == "fedavgm":
        c.algorithm.server_momentum = 0.9
    c.optimizer, c.learning_rate = "sgd", 0.1 if arm == "fedsgd" else 0.05
    c.num_rounds = 2000 if arm == "fedsgd" else 300
    c.eval_every, c.checkpoint_every, c.eval_train_examples = 10, 100, 2000
    return c
