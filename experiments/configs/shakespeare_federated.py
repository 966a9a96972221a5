"""Shakespeare by speaking role (issue 58): each role of each play a client (``data.name=shakespeare_roles``: 1,022
clients of 64-character windows, median 18 windows, largest 829), 10 sampled a round (C = 0.01), client SGD, on the
text family's transformer at a quarter of its size (2 layers, 4 heads, width 64, context 64), so that FedSGD's
thousands of rounds fit the 2-core machine.

``--config=experiments/configs/shakespeare_federated.py:ARM`` with ARM one of

* ``fedsgd``: each sampled client one gradient of all its (bounded) data, ``clients.batch_size="all"``;
* ``fedavg``: each sampled client E = 1 epoch of its data at B = 8 windows a round (at most 8 local steps).

Every client bounded at 64 windows (``clients.max_examples``, a seeded subset of a bigger role's for the whole run):
a round's K follows its largest client, so Hamlet's 829 windows would pad every sampled client, median 18, to 104
steps of B = 8; TFF's Shakespeare baselines bound their clients the same way. The learning rates here are starting
points: the federated study's tuning stage chooses each arm's own on a tuning split.

Result: not measured (no committed run). The study that reads this config (issue 58's Shakespeare half) is still to
run.
"""

from istjax.launch.config import default_config, use_model

ARMS = ("fedsgd", "fedavg")


def get_config(arg=None):
    arm = arg or "fedavg"
    if arm not in ARMS:
        raise ValueError(f"shakespeare_federated.py:{arg}: name one of {', '.join(ARMS)}, e.g. "
                         f"--config=experiments/configs/shakespeare_federated.py:fedavg.")
    c = default_config()
    c.name = "shakespeare_federated"
    use_model(c, "transformer", num_layers=2, embed_dim=64, num_heads=4, mlp_dim=256, context=64)
    c.data.name = "shakespeare_roles"
    c.data.kwargs.context = 64
    c.algorithm.name = arm
    c.clients.split = "natural"
    c.clients.max_examples = 64
    c.clients.fraction, c.num_workers = 0.01, 10
    c.clients.epochs = 1
    c.clients.batch_size = "all" if arm == "fedsgd" else 8
    c.optimizer, c.learning_rate = "sgd", 0.5 if arm == "fedsgd" else 0.2
    c.num_rounds = 2000 if arm == "fedsgd" else 200
    c.eval_every, c.checkpoint_every = 20, 100
    c.eval_batch_size, c.eval_train_examples = 256, 512
    return c
