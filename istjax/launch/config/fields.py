"""What a run config is: its sections and fields, their defaults and meaning (`default_config`), and reading them.

A configuration is an ml_collections `ConfigDict` (the Flax-examples convention): experiment files under
``experiments/configs/`` define ``get_config()``, start from `default_config()` and override a few fields; the
command line overrides any field with ``--config.FIELD=VALUE``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

import ml_collections
from ml_collections import config_dict

__all__ = ["OPTIMIZERS", "RUN_CONTROL_FIELDS", "MODEL_KEYS", "ConfigError", "default_config", "to_dict",
           "flat_dict", "get_field", "close_matches", "model_fields", "model_module", "data_module", "use_model"]

#: The local optimizers a config may name (``optimizer``).
OPTIMIZERS = ("sgd", "momentum", "adam", "lars", "lamb")

#: Fields that change how a run is driven, not what it computes: a run may be resumed with new values for them (say,
#: more rounds). Every other field must match the checkpoint's config exactly.
RUN_CONTROL_FIELDS = ("name", "num_rounds", "eval_every", "checkpoint_every", "max_to_keep", "eval_batch_size",
                      "eval_train_examples", "target_accuracy", "target_loss", "stop_at_target", "progress",
                      "runtime.memory_limit", "runtime.loss_split", "loss_split_every", "runtime.slow_rank",
                      "runtime.slow_factor")


class ConfigError(ValueError):
    """A configuration (or a workdir/config mismatch) that cannot run. ``problems`` lists each one; one problem is
    the message itself (one line), several are listed under a count."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
            return
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the config:\n{lines}")


def default_config() -> ml_collections.ConfigDict:
    """The default study, IST on scikit-learn's digits, with every field the driver knows and its meaning.

    The config has five sections, each naming its registry entry (``name``) and that entry's options: ``algorithm``,
    ``sampler``, ``model``, ``data`` and ``runtime``, and ``clients``, the federated algorithms' clients; the fields
    of training (W, K, B, the optimizer and its schedule) and of the run (seed, evaluation, checkpoints) sit at the
    top. The flat fields of earlier versions are refused
    with the nested name to use (`RENAMED`), and old ``config.json`` files are read through `from_dict`.

    Measured on a 2-core CPU: see ``experiments/configs/default.py`` for the command and the result.
    """
    c = ml_collections.ConfigDict()
    c.name = "digits_ist"  # run name; `istjax train` without --workdir writes to ./runs/<name>-<timestamp>
    for add_fields in FIELD_BUILDERS:
        add_fields(c)
    return c


def _algorithm_section(c: ml_collections.ConfigDict) -> None:
    """What is trained: the algorithm (`istjax.algorithms.ALGORITHMS`) and the options its factories take."""
    c.algorithm = ml_collections.ConfigDict()
    # A name in istjax.algorithms.ALGORITHMS (`istjax train --help` lists every registered one and what it needs).
    c.algorithm.name = "ist"
    c.algorithm.optimizer_state = "reset"  # "reset": fresh optimizer state every round; "carry": travels with params
    # Model state (BatchNorm running statistics of models that keep them): "carry" (extracted and merged with the
    # channels they belong to) | "recompute" (recomputed on the merged model after every round).
    c.algorithm.model_state = "carry"
    # "recompute": each worker's first recompute_batches batches of the round (1 to local_steps) are what the
    # statistics are recomputed from.
    c.algorithm.recompute_batches = 1
    # ResIST: each worker's minimum number of blocks per partitioned stage (0: dealt without overlap) and the 1/S
    # scaling of partitioned residual branches at test time.
    c.algorithm.min_depth = 0
    c.algorithm.test_scale = True
    # DiLoCo: the outer optimizer (SGD with Nesterov momentum) on the replicas' average change; the paper's values.
    c.algorithm.outer_learning_rate = 0.7
    c.algorithm.outer_momentum = 0.9
    # Compressed exchanges (local_sgd, diloco; istjax.core.compress): the round's change crosses as "powersgd" (rank
    # compression_rank factors of each matrix, after compression_start uncompressed exchanges) | "top_k" (each
    # tensor's compression_fraction largest entries), what is not sent kept in the worker's residual | "none".
    c.algorithm.compression = "none"
    c.algorithm.compression_rank = 2
    c.algorithm.compression_fraction = 0.01
    c.algorithm.compression_start = 0
    # Federated algorithms (fedavg, fedsgd, fedist; istjax.algorithms.federated): the server optimizer of the clients'
    # weighted mean change, "sgd" (FedAvg; server_momentum > 0: FedAvgM) | "adam" (FedAdam), and its settings.
    c.algorithm.server_optimizer = "sgd"
    c.algorithm.server_learning_rate = 1.0  # 1.0 with sgd and no momentum: the new model is the clients' mean
    c.algorithm.server_momentum = 0.0  # heavy-ball momentum of server_optimizer="sgd" (FedAvgM: 0.9)
    c.algorithm.prox_mu = 0.0  # FedProx: mu / 2 * ||w - w_global||^2 added to every local step's loss; 0: none
    # Consensus ADMM (admm): rho / 2 * ||x - z + u_i||^2 added to every local step's loss, u_i the worker's dual.
    c.algorithm.rho = 0.1
    # Dynamic model averaging (dynamic_averaging): the divergence threshold delta of ||w_i - r||^2 (0: every round).
    c.algorithm.delta = 0.1
    # Codistillation (codistillation): groups of num_workers / groups replicas; each group's loss adds distill_weight x
    # KL(the other groups' predictions || its own), their copies exchanged every teacher_every rounds, from burn_in on.
    c.algorithm.groups = 2
    c.algorithm.distill_weight = 1.0
    c.algorithm.teacher_every = 1
    c.algorithm.burn_in = 0


def _sampler_section(c: ml_collections.ConfigDict) -> None:
    """How the neurons are dealt (`istjax.core.partition.SAMPLERS`), for the algorithms that read a sampler."""
    c.sampler = ml_collections.ConfigDict()
    c.sampler.name = "uniform"  # a name in istjax.core.partition.SAMPLERS (`istjax train --help` lists them)
    c.sampler.min_units = 0  # overlapping: minimum units per worker per group
    c.sampler.num_owners = 1  # stratified (and ResIST's blocks): number of owner shards of every group
    c.sampler.weights = ()  # uneven: one positive weight per worker
    c.sampler.fractions = ()  # nested: one fraction in (0, 1] per worker
    c.sampler.shuffle = True  # nested: a fresh order each round; False: the same leading units, never repartitioned
    # Per neuron group samplers, overriding `name` for the groups named (istjax.per_group), e.g.
    # --config.sampler.groups.block_0_0=overlapping deals that group with overlap (it may then be smaller than W).
    c.sampler.groups = ml_collections.ConfigDict()


def _clients_section(c: ml_collections.ConfigDict) -> None:
    """The federated clients (`istjax.data.clients`, `istjax.data.client_batches`), read by the algorithms whose
    registry entry takes ``clients`` (fedavg, fedsgd, fedist): the training set split into clients, the clients drawn a
    round and their local work. Every worker is then a sampled client's slot, and K is derived, not ``local_steps``."""
    c.clients = ml_collections.ConfigDict()
    # Read by the federated algorithms only (fedavg, fedsgd, fedist: num_workers is the client slots of a round, each
    # worker a sampled client's slot); another algorithm refuses a field set here.
    # How the training set is split (seeded by `seed`): "iid" (a shuffled equal split) | "dirichlet" (label skew:
    # each class over the clients in Dir(alpha) proportions) | "shards" (McMahan et al.'s: sorted by label, cut into
    # shards_per_client * num_clients shards, shards_per_client per client) | "natural" (the data set's own clients:
    # data.name=fsdd's speakers, shakespeare_roles' speaking roles; num_clients is then the data's, not set here).
    c.clients.split = "iid"
    c.clients.num_clients = 100  # N, the clients of the split (not read by split="natural")
    c.clients.alpha = 0.5  # split="dirichlet": the concentration, > 0 (0.1: strong skew; large: nearly IID)
    c.clients.min_size = 10  # split="dirichlet": the fewest examples a client may hold (the draw is repeated)
    c.clients.shards_per_client = 2  # split="shards": shards per client (their count must divide the examples)
    # The most examples a client holds, 0: no bound. A bigger client keeps a seeded random subset of its own for the
    # run (Shakespeare's largest role holds 829 windows, the median 18: K follows the largest client, so bound it).
    c.clients.max_examples = 0
    # C, the fraction of the clients drawn each round, M = max(1, round(C * num_clients)); 0.0: M = num_workers.
    # num_workers must be the round's slots: M on one process; under mpiexec -n P (runtime.name=mpi), M rounded up
    # to a multiple of P, the slots past the M clients padding that trains nothing (M = 3 on P = 2: num_workers=4).
    c.clients.fraction = 0.0
    c.clients.epochs = 1  # E, passes over its own data a sampled client makes each round
    # B, each client step's examples: 0 (the run's batch_size), a number (--config.clients.batch_size=10) or "all"
    # (each epoch one full-batch step: FedSGD's). K = epochs * ceil(largest client / B) steps a round, the same for
    # every client (a smaller one's extra steps are zero-weight fill, changing nothing); local_steps is not used.
    c.clients.batch_size = config_dict.FieldReference(0, field_type=object)


def _model_section(c: ml_collections.ConfigDict) -> None:
    """The model: `name` from istjax.models.MODELS and that module's fields (``istjax.models.model_fields(name)``
    lists them; num_classes comes from the data). Its neuron groups come from the module's partition_rules()."""
    c.model = ml_collections.ConfigDict()
    # A name in istjax.models.MODELS: a shipped model or one added with register_model (`istjax train --help` lists
    # every registered one).
    c.model.name = "mlp"
    # Where a model of your own lives: "path/to/file.py:ClassName" (no PYTHONPATH needed) or "package.module:Class";
    # "" for a model istjax ships or one added with register_model. A run records it, with the file's absolute path,
    # so `--resume` and `istjax eval` of the run need nothing else (docs/custom_models.md).
    c.model.module = ""
    c.model.hidden = (512,)  # hidden widths of the MLP; each hidden layer is one neuron group "hidden_i"
    c.model.batch_norm = True  # batch-statistics BatchNorm after every hidden layer (the IST paper's model)
    c.model.output_batch_norm = True  # BatchNorm without affine parameters on the logits (the paper's last layer)


def _data_section(c: ml_collections.ConfigDict) -> None:
    """The data set (`istjax.data.DATASETS`), its loader's arguments, and how workers read it."""
    c.data = ml_collections.ConfigDict()
    # A name in istjax.data.DATASETS: a shipped data set or one added with istjax.data.register_dataset (`istjax train
    # --help` lists every registered one), or "tfds:<name>" (a set prepared with tensorflow-datasets).
    c.data.name = "digits"
    # Your own data: "path/to/file.py:function" (no PYTHONPATH needed) or "package.module:function", a function
    # returning an istjax.data.Dataset (istjax.data.from_arrays), called with data.kwargs; data.name is then your
    # data's name. A run records it with the file's absolute path, so --resume, eval, compare and plot need nothing
    # else (docs/your_data.md).
    c.data.module = ""
    # Passed to istjax.data.load_dataset(name, **kwargs); new keys may be given on the command line
    # (--config.data.kwargs.num_train=5000).
    c.data.kwargs = ml_collections.ConfigDict()
    c.data.sharding = "disjoint"  # "disjoint": worker w samples only its shard; "shared": every worker the whole set
    # A study's tuning runs (istjax.launch.tuning): > 0 holds out this last fraction of the *training* examples as
    # the evaluated split and trains on the rest; the reported split is not read (istjax.data.tuning). 0: off.
    c.data.tuning_fraction = 0.0
    # Concept drift (istjax.data.drift): > 0 permutes the class labels (a cycle through every class, drawn from
    # drift_seed) from this round on, in the batches and the evaluation alike; 0: off.
    c.data.drift_round = 0
    c.data.drift_seed = 0
    c.data.augment = False  # random crop (zero padding of augment_pad pixels) and horizontal flip of image batches
    c.data.augment_pad = 4
    # Graph datasets (GIST): "full" (every step runs the model over the whole graph; a batch is batch_size training
    # nodes) | "clusters" (Cluster-GCN: the graph is cut into num_clusters clusters by cluster_method, "metis" |
    # "random" | "auto"; a step trains on the subgraph of clusters_per_step clusters; batch_size is unused).
    c.data.graph_batches = "full"
    c.data.num_clusters = 16
    c.data.clusters_per_step = 1
    c.data.cluster_method = "metis"


def _runtime_section(c: ml_collections.ConfigDict) -> None:
    """Where the workers run (`istjax.runtimes`) and the runtime's options."""
    c.runtime = ml_collections.ConfigDict()
    c.runtime.name = "simulate"  # any name in istjax.runtimes.names() ("mpi": under mpiexec)
    c.runtime.mode = "parameter_server"  # runtime "mpi": "parameter_server" | "sharded" (see istjax.runtimes.mpi)
    # Evaluation rounds also report where the loss went (istjax.algorithms.loss_split: the workers' own loss after
    # their K steps, the merged model's on the same batches, train and test mode) in metrics.jsonl (loss_split_every:
    # more rounds); False saves its forward passes. Every runtime but MPI's sharded mode (no rank holds the merged
    # model) computes it.
    c.runtime.loss_split = True
    # Each process's memory cap, every runtime: bytes (an int) or a size ("800MiB", "1.5GiB", "2GB"); 0: no cap. Before
    # the first round every rank predicts what it will hold (its state share, the compiled round's outputs and
    # temporaries, the process so far) and refuses with both numbers when that is over the cap (istjax.core.memory).
    c.runtime.memory_limit = config_dict.FieldReference(0, field_type=object)
    # A straggler, every runtime with processes (mpi): the process slow_rank sleeps (slow_factor - 1) x its own
    # round's time after every round, so it runs slow_factor times slower and the others wait for it wherever they
    # synchronise; recorded in config.json and logged at the start. slow_rank -1: none.
    c.runtime.slow_rank = -1
    c.runtime.slow_factor = 1.0


def _training_fields(c: ml_collections.ConfigDict) -> None:
    """`default_config`'s fields for how the model is trained: W, K, B, the optimizer and its schedule."""
    c.num_workers = 4  # W (a federated algorithm: the client slots of a round, clients.fraction's comment)
    # K, optimizer steps per round (every algorithm consumes [W, K, B] examples per round); a federated algorithm's
    # K is derived from its clients (clients.epochs, clients.batch_size) and this field is not used.
    c.local_steps = 10
    c.batch_size = 32  # B, examples per worker per step
    c.num_rounds = 60  # rounds to train; samples seen = num_rounds * W * K * B
    # "sgd" | "momentum" | "adam" | "lars" (You et al. 2017: momentum SGD, each matrix's step scaled by
    # trust_coefficient * ||w|| / ||g + weight_decay * w||) | "lamb" (You et al. 2020: Adam's step, each matrix's
    # scaled by trust_coefficient * ||w|| / ||step||); lars and lamb leave vectors (biases, norms) unscaled and undecayed.
    c.optimizer = "sgd"
    c.learning_rate = 0.1
    # The linear scaling rule (Goyal et al. 2017): learning_rate is the rate for optimizer steps of this many examples;
    # the run trains at learning_rate * (examples a step reads) / lr_reference_batch, a step reading W * B examples
    # under an algorithm that averages every step's gradients (data_parallel), B otherwise. 0: learning_rate as given.
    # Pair it with warmup_rounds, as the rule's authors do.
    c.lr_reference_batch = 0
    c.momentum = 0.9  # used by optimizer="momentum" and "lars"
    c.trust_coefficient = 0.0  # lars / lamb: the trust ratio's coefficient; 0: the paper's (lars 0.001, lamb 1.0)
    # L2 weight decay, every optimizer: added to the gradients (as torch's SGD weight_decay); lars adds it before its
    # trust ratio and lamb to Adam's step (decoupled, as their papers do), matrices only.
    c.weight_decay = 0.0
    # Learning-rate schedule, counted in rounds (so IST and its baselines share one schedule; istjax.core.schedule):
    # "constant" | "step" (times lr_decay_factor at each fraction lr_decay_at of the run) | "cosine" (to 0).
    c.lr_schedule = "constant"
    c.lr_decay_at = (0.5, 0.75)
    c.lr_decay_factor = 0.1
    c.warmup_rounds = 0  # linear warm-up over the first rounds (0: none)
    c.lr_schedule_rounds = 0  # the schedule's length; 0: num_rounds (a resume may then not change num_rounds)
    # Precision (istjax.core.precision): parameters, optimizer state and loss are float32 either way.
    c.compute_dtype = "float32"  # "float32" | "bfloat16": the dtype the model computes in (float32 accumulation)
    c.exchange_dtype = "float32"  # "float32" | "bfloat16": what crosses between workers and server (half the bytes)
    # Under a bfloat16 exchange, what a worker sends back: "delta" (its change, added to the float32 master) or
    # "params" (its values, written over the master).
    c.exchange_values = "delta"


def _run_fields(c: ml_collections.ConfigDict) -> None:
    """`default_config`'s fields for what a run records: seed, evaluation, checkpoints."""
    c.seed = 0  # seeds the initial parameters, the partitions and the data streams
    # Evaluation, logging, checkpoints.
    c.eval_every = 5  # rounds between evaluations of the global model (the last round is always evaluated)
    # The loss split (runtime.loss_split) runs on the evaluation rounds; n > 0: on every n-th round too, the record
    # carrying the mean of those since the last (1: every round). Its forward passes cost a fifth of a small round.
    c.loss_split_every = 0
    c.eval_batch_size = 1000  # evaluation chunk size; at least 256 for models that use batch statistics at test time
    c.eval_train_examples = 2000  # the train loss is measured on this many training examples (0: all)
    c.checkpoint_every = 20  # rounds between checkpoints (also at the end and on SIGINT/SIGTERM)
    c.max_to_keep = 3  # checkpoints kept
    # Report the time and samples to this test accuracy (the task's own: P@1 for XMC); None, the default: no target,
    # and no target line in the summary. A config that studies time to accuracy sets its own (a float field).
    c.target_accuracy = config_dict.FieldReference(None, field_type=float)
    # Or to this test loss, reached at or below it (a language model's validation nats/char: lower is better); a
    # run has one target, so at most one of the two is set (istjax.launch.config.target decides "reached").
    c.target_loss = config_dict.FieldReference(None, field_type=float)
    c.stop_at_target = False  # stop after the first evaluation that reaches the target (time-to-target runs)
    c.progress = True  # tqdm progress bar


# default_config's parts in order (`istjax train --help` prints their lines).
FIELD_BUILDERS = (_algorithm_section, _sampler_section, _clients_section, _model_section, _data_section,
                  _runtime_section, _training_fields, _run_fields)

# The flat fields of earlier versions and where each now lives. A flat name (or, for the three flat sections, its
# prefix) is refused in a config or on the command line with the nested name; `from_dict` reads old config.json




def to_dict(config: ml_collections.ConfigDict) -> dict:
    """A JSON-able plain dict of ``config`` (tuples become lists)."""
    return json.loads(config.to_json())


def flat_dict(tree, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"hidden": [8]}} -> {"model.hidden": [8]}``; sequences become lists."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, (Mapping, ml_collections.ConfigDict)) and not isinstance(v, str):
            out.update(flat_dict(dict(v.items()), name + "."))
        else:
            out[name] = list(v) if isinstance(v, tuple) else v
    return out


def get_field(config, field: str):
    """The value of a dotted ``field`` (``"runtime.mode"``) of ``config``."""
    v = config
    for part in field.split("."):
        v = v[part]
    return v


def close_matches(name: str, known: list[str]) -> str:
    """`` (did you mean 'a', 'b'?)`` or an empty string."""
    last = name.split(".")[-1]
    hits = [h for h in difflib.get_close_matches(name, known, n=3, cutoff=0.6)  # the field's own name must be close
            if difflib.SequenceMatcher(None, last, h.split(".")[-1]).ratio() >= 0.6]
    if not hits:  # also match on the last path component: "hidden" -> "model.hidden"
        hits = [k for k in known if k.split(".")[-1] == name.split(".")[-1]]
    return f" (did you mean {', '.join(repr(h) for h in hits)}?)" if hits else ""


#: The model section's own fields; every other one is the module's.
MODEL_KEYS = ("name", "module")  # the model section's own fields; every other one is the module's


def model_fields(config: ml_collections.ConfigDict) -> dict:
    """The config's ``model`` section minus ``name`` and ``module``: the module's fields."""
    return {k: v for k, v in to_dict(config.model).items() if k not in MODEL_KEYS}


def model_module(config: ml_collections.ConfigDict) -> str:
    """``model.module`` (``""`` when the config has none: a built-in or registered model)."""
    return config.model.get("module", "") or ""


def data_module(config: ml_collections.ConfigDict) -> str:
    """``data.module`` (``""`` for a dataset istjax ships, or a config.json written before the field existed)."""
    return config.data.get("module", "") or ""


def use_model(config: ml_collections.ConfigDict, name: str, module: str = "", **fields: Any) -> None:
    """Replaces ``config``'s model section: model ``name`` (from ``module``, `istjax.models.user`) with ``fields``
    and no field of the model the config held before. For config files built from `default_config`::

        c = default_config()
        use_model(c, "resmlp", "my_models.py:ResMLP", width=128, depth=3)
    """
    with config.unlocked():
        config.model = ml_collections.ConfigDict({"name": name, "module": module, **fields})
