"""Run configurations: every field `istjax.experiment.driver.train_and_evaluate` reads, its default, and its validation.

A configuration is an ml_collections `ConfigDict` (the Flax-examples convention): experiment files under
``experiments/configs/`` define ``get_config()``, start from `default_config()` and override a few fields; the
command line overrides any field with ``--config.FIELD=VALUE``. This module is itself a valid config file (it has
`get_config`), which is how ``istjax train`` without ``--config`` finds the default study from any directory.

`validate` checks a configuration before anything is built or compiled and reports *every* problem at once, each
with the field, the value and the fix::

    >>> import istjax.experiment.config as cfg
    >>> c = cfg.default_config()
    >>> c.num_workers, c.model.hidden = 3, (100,)
    >>> cfg.validate(c)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ConfigError: 1 problem(s) in the config:
      - model.hidden=(100,) with num_workers=3: neuron group 'hidden_0' has 100 units, not divisible ...
"""

from __future__ import annotations

import difflib
import json
import math
import pathlib
from collections.abc import Mapping
from typing import Any, NamedTuple, Optional

import ml_collections
import numpy as np
from ml_collections import config_dict

from istjax.algorithms import ALGORITHMS, ModelNeeds
from istjax.core.partition import SAMPLERS

__all__ = [
    "ALGORITHMS",
    "OPTIMIZERS",
    "SAMPLERS",
    "RUN_CONTROL_FIELDS",
    "ConfigError",
    "default_config",
    "get_config",
    "validate",
    "check",
    "Checked",
    "make_optimizer",
    "schedule_rounds",
    "run_control_fields",
    "make_sampler",
    "to_dict",
    "flat_dict",
    "from_dict",
    "load_run_config",
    "read_run_config",
    "differences",
    "close_matches",
]

OPTIMIZERS = ("sgd", "momentum", "adam")

# Fields that change how a run is driven, not what it computes: a run may be resumed with new values for them (say,
# more rounds). Every other field must match the checkpoint's config exactly.
RUN_CONTROL_FIELDS = ("name", "num_rounds", "eval_every", "checkpoint_every", "max_to_keep", "eval_batch_size",
                      "eval_train_examples", "target_accuracy", "stop_at_target", "progress")


class ConfigError(ValueError):
    """A configuration (or a workdir/config mismatch) that cannot run. ``problems`` lists each one."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the config:\n{lines}")


def default_config() -> ml_collections.ConfigDict:
    """The default study, IST on scikit-learn's digits, with every field the driver knows and its meaning.

    Measured on a 2-core CPU: see ``experiments/configs/default.py`` for the command and the result.
    """
    c = ml_collections.ConfigDict()
    c.name = "digits_ist"  # run name; `istjax train` without --workdir writes to ./runs/<name>-<timestamp>
    # What is trained.
    c.algorithm = "ist"  # "ist" | "data_parallel" | "local_sgd" | "resist" (model.name="depth_resnet")
    # "digits" | "mnist1d" | "synthetic_speech" | "fashion_mnist" | graphs: "cora" | "citeseer" | "pubmed" | "csbm" |
    # "graph_npz" (istjax.data.DATASETS) | "tfds:<name>"
    c.dataset = "digits"
    # Passed to istjax.data.load_dataset(dataset, **dataset_kwargs); new keys may be given on the command line
    # (--config.dataset_kwargs.num_train=5000).
    c.dataset_kwargs = ml_collections.ConfigDict()
    c.sharding = "disjoint"  # "disjoint": worker w samples only its shard; "shared": every worker the whole set
    c.augment = False  # random crop (zero padding of augment_pad pixels) and horizontal flip of image batches
    c.augment_pad = 4
    # Graph datasets (GIST): "full" (every step runs the model over the whole graph; a batch is batch_size training
    # nodes) | "clusters" (Cluster-GCN: the graph is cut into num_clusters clusters by cluster_method, "metis" |
    # "random" | "auto"; a step trains on the subgraph of clusters_per_step clusters; batch_size is unused).
    c.graph_batches = "full"
    c.num_clusters = 16
    c.clusters_per_step = 1
    c.cluster_method = "metis"
    # The model: `name` from istjax.models.MODELS ("mlp", "cnn", "resnet", "preact_resnet", "vgg", "depth_resnet",
    # "gcn", "graphsage", or one added with register_model) and that module's
    # fields (istjax.models.model_fields(name) lists them; num_classes comes from the data). Its neuron groups come
    # from the module's partition_rules().
    c.model = ml_collections.ConfigDict()
    c.model.name = "mlp"
    c.model.hidden = (512,)  # hidden widths of the MLP; each hidden layer is one neuron group "hidden_i"
    c.model.batch_norm = True  # batch-statistics BatchNorm after every hidden layer (the IST paper's model)
    c.model.output_batch_norm = True  # BatchNorm without affine parameters on the logits (the paper's last layer)
    # Model state (BatchNorm running statistics of models that keep them): "carry" (extracted and merged with the
    # channels they belong to) | "recompute" (recomputed on the merged model after every round).
    c.model_state = "carry"
    _training_fields(c)
    _run_fields(c)
    return c


def _training_fields(c: ml_collections.ConfigDict) -> None:
    """`default_config`'s fields for how the model is trained: W, K, B, the optimizer, its schedule, the partition."""
    c.num_workers = 4  # W
    c.local_steps = 10  # K, optimizer steps per round (every algorithm consumes [W, K, B] examples per round)
    c.batch_size = 32  # B, examples per worker per step
    c.num_rounds = 60  # rounds to train; samples seen = num_rounds * W * K * B
    c.optimizer = "sgd"  # "sgd" | "momentum" | "adam"
    c.learning_rate = 0.1
    c.momentum = 0.9  # used by optimizer="momentum"
    c.weight_decay = 0.0  # L2 weight decay added to the gradients (as torch's SGD weight_decay), every optimizer
    # Learning-rate schedule, counted in rounds (so IST and its baselines share one schedule; istjax.core.schedule):
    # "constant" | "step" (times lr_decay_factor at each fraction lr_decay_at of the run) | "cosine" (to 0).
    c.lr_schedule = "constant"
    c.lr_decay_at = (0.5, 0.75)
    c.lr_decay_factor = 0.1
    c.warmup_rounds = 0  # linear warm-up over the first rounds (0: none)
    c.lr_schedule_rounds = 0  # the schedule's length; 0: num_rounds (a resume may then not change num_rounds)
    c.optimizer_state = "reset"  # "reset": fresh optimizer state every round; "carry": travels with the params
    # IST partition: "uniform" | "uniform_pad" | "overlapping" | "stratified" | "uneven" | "nested".
    c.sampler = "uniform"
    c.sampler_args = ml_collections.ConfigDict()
    c.sampler_args.min_units = 0  # overlapping: minimum units per worker per group
    c.sampler_args.num_owners = 1  # stratified: number of owner shards of every group
    c.sampler_args.weights = ()  # uneven: one positive weight per worker
    c.sampler_args.fractions = ()  # nested: one fraction in (0, 1] per worker
    # Per neuron group samplers, overriding `sampler` for the groups named (istjax.per_group), e.g.
    # --config.group_samplers.block_0_0=overlapping deals that group with overlap (it may then be smaller than W).
    c.group_samplers = ml_collections.ConfigDict()
    # ResIST (algorithm="resist"): each worker's minimum number of blocks per partitioned stage (0: dealt without
    # overlap) and the 1/S scaling of partitioned residual branches at test time.
    c.resist_min_depth = 0
    c.resist_test_scale = True


def _run_fields(c: ml_collections.ConfigDict) -> None:
    """`default_config`'s fields for where it runs and what a run records: runtime, seed, evaluation, checkpoints."""
    c.backend = "simulate"  # where workers run; any name in istjax.runtimes.names() ("mpi": under mpiexec)
    c.mpi_mode = "parameter_server"  # backend="mpi": "parameter_server" | "sharded" (see istjax.runtimes.mpi)
    c.seed = 0  # seeds the initial parameters, the partitions and the data streams
    # Evaluation, logging, checkpoints.
    c.eval_every = 5  # rounds between evaluations of the global model (the last round is always evaluated)
    c.eval_batch_size = 1000  # evaluation chunk size; at least 256 for models that use batch statistics at test time
    c.eval_train_examples = 2000  # the train loss is measured on this many training examples (0: all)
    c.checkpoint_every = 20  # rounds between checkpoints (also at the end and on SIGINT/SIGTERM)
    c.max_to_keep = 3  # checkpoints kept
    # Report the time and samples to this test accuracy (None: do not); a float field that may be None.
    c.target_accuracy = config_dict.FieldReference(0.95, field_type=float)
    c.stop_at_target = False  # stop after the first evaluation at or above target_accuracy (time-to-accuracy runs)
    c.progress = True  # tqdm progress bar


def get_config(arg: Optional[str] = None) -> ml_collections.ConfigDict:
    """Config-file entry point (``--config=istjax/config.py``): the default study."""
    del arg
    return default_config()


def to_dict(config: ml_collections.ConfigDict) -> dict:
    """A JSON-able plain dict of ``config`` (tuples become lists)."""
    return json.loads(config.to_json())


def from_dict(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A config from a plain dict (a run's ``config.json``): the defaults, with every field ``values`` gives.

    The ``model`` section is taken whole (its fields depend on the model). JSON's lists become the tuples a config
    holds, so a resumed run's config takes ``--config.model.hidden='(512,)'`` like any other (ml_collections cannot
    override a list field from the command line).
    """
    config = default_config()
    for key, value in _as_tuples(dict(values)).items():
        if key in ("model", "dataset_kwargs", "group_samplers", "sampler_args") and isinstance(value, Mapping):
            config[key] = ml_collections.ConfigDict(dict(value))
        elif key in config:
            config[key] = value
        else:
            with config.unlocked():
                config[key] = value  # validate() names unknown fields
    return config


def _as_tuples(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _as_tuples(v) for k, v in value.items()}
    return value


def load_run_config(workdir) -> ml_collections.ConfigDict:
    """The config a run directory was started with (its ``config.json``); `ConfigError` when there is none."""
    path = pathlib.Path(workdir) / "config.json"
    if not path.is_file():
        raise ConfigError([f"workdir={str(workdir)!r} holds no run (no config.json); pass the --workdir of an "
                           f"`istjax train` run."])
    values = read_run_config(path)
    try:
        return from_dict(values)
    except (ValueError, TypeError) as e:
        raise ConfigError([f"{path}: not a readable run config ({e}); it was not written by istjax, or was "
                           f"edited by hand."]) from e


def read_run_config(path) -> dict:
    """A run's ``config.json`` as a plain dict; `ConfigError` naming the file and the fix when it does not parse (cut
    short by a full disk or a copy, or edited by hand)."""
    try:
        values = json.loads(pathlib.Path(path).read_text())
        if not isinstance(values, dict):
            raise ValueError(f"a JSON {type(values).__name__}, not an object")
    except ValueError as e:
        raise ConfigError([f"{path}: not a readable run config ({e}); it was cut short or edited by hand. Start the "
                           f"run over with --overwrite, or choose another --workdir."]) from None
    return values


def flat_dict(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"hidden": [8]}} -> {"model.hidden": [8]}``; sequences become lists."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, (Mapping, ml_collections.ConfigDict)) and not isinstance(v, str):
            out.update(flat_dict(dict(v.items()), name + "."))
        else:
            out[name] = list(v) if isinstance(v, tuple) else v
    return out


def differences(a: Mapping[str, Any], b: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    """Fields where two (plain-dict) configs differ, as ``"field: a -> b"`` strings; ``ignore`` skips fields."""
    fa, fb = flat_dict(a), flat_dict(b)
    out = []
    for k in sorted(set(fa) | set(fb)):
        if k.split(".")[0] in ignore:
            continue
        if fa.get(k, "<absent>") != fb.get(k, "<absent>"):
            out.append(f"{k}: {fa.get(k, '<absent>')!r} -> {fb.get(k, '<absent>')!r}")
    return out


def close_matches(name: str, known: list[str]) -> str:
    """`` (did you mean 'a', 'b'?)`` or an empty string."""
    last = name.split(".")[-1]
    hits = [h for h in difflib.get_close_matches(name, known, n=3, cutoff=0.6)  # the field's own name must be close
            if difflib.SequenceMatcher(None, last, h.split(".")[-1]).ratio() >= 0.6]
    if not hits:  # also match on the last path component: "hidden" -> "model.hidden"
        hits = [k for k in known if k.split(".")[-1] == name.split(".")[-1]]
    return f" (did you mean {', '.join(repr(h) for h in hits)}?)" if hits else ""


def make_optimizer(config: ml_collections.ConfigDict):
    """The optax transformation the config names (validated values assumed): the optimizer, L2 weight decay on the
    gradients when ``weight_decay`` is set, and the round-counted learning-rate schedule
    (`istjax.core.schedule.round_scheduled`) unless it is constant."""
    import optax

    from istjax.core.schedule import make_schedule, round_scheduled

    lr = float(config.learning_rate)
    if config.optimizer == "sgd":
        opt = optax.sgd(lr)
    elif config.optimizer == "momentum":
        opt = optax.sgd(lr, momentum=float(config.momentum))
    elif config.optimizer == "adam":
        opt = optax.adam(lr)
    else:
        raise ValueError(f"optimizer={config.optimizer!r}: choose one of {OPTIMIZERS}.")
    if float(config.weight_decay):
        opt = optax.chain(optax.add_decayed_weights(float(config.weight_decay)), opt)
    schedule = make_schedule(config.lr_schedule, num_rounds=schedule_rounds(config),
                             decay_at=tuple(config.lr_decay_at), factor=float(config.lr_decay_factor),
                             warmup_rounds=int(config.warmup_rounds))
    return opt if schedule is None else round_scheduled(opt, schedule)


def schedule_rounds(config) -> int:
    """The learning-rate schedule's length in rounds: ``lr_schedule_rounds``, or ``num_rounds`` when it is 0."""
    return int(config.lr_schedule_rounds) or int(config.num_rounds)


def run_control_fields(config_dict: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields a resume may change: `RUN_CONTROL_FIELDS`, less ``num_rounds`` when the learning-rate schedule is
    measured in it (then more rounds would change every round's learning rate)."""
    scheduled = config_dict.get("lr_schedule", "constant") != "constant" or int(config_dict.get("warmup_rounds", 0))
    if scheduled and not int(config_dict.get("lr_schedule_rounds", 0)):
        return tuple(f for f in RUN_CONTROL_FIELDS if f != "num_rounds")
    return RUN_CONTROL_FIELDS


def _one_sampler(name: str, args):
    return SAMPLERS.get(name).build(args)


def make_sampler(config: ml_collections.ConfigDict):
    """The `istjax.Sampler` the config names: ``sampler`` for every group, `istjax.per_group` where
    ``group_samplers`` names groups (raises ValueError naming the field for bad arguments)."""
    from istjax.core import partition

    default = _one_sampler(config.sampler, config.sampler_args)
    if not len(config.group_samplers):
        return default
    return partition.per_group({g: _one_sampler(s, config.sampler_args) for g, s in config.group_samplers.items()},
                               default=default)


def model_fields(config: ml_collections.ConfigDict) -> dict:
    """The config's ``model`` section minus ``name``: the module's fields."""
    return {k: v for k, v in to_dict(config.model).items() if k != "name"}


def make_task(config: ml_collections.ConfigDict, dataset):
    """The `istjax.Task` of the config's model on ``dataset`` (nothing is compiled: shapes come from eval_shape)."""
    import jax.numpy as jnp

    from istjax.core.task import classifier
    from istjax.models import build_model

    model = build_model(config.model.name, model_fields(config), num_classes=int(dataset.num_classes))
    if dataset.shared and "clusters" in dataset.shared:
        from istjax.graph.task import cluster_classifier

        return cluster_classifier(model, dataset.shared)
    return classifier(model, jnp.asarray(dataset.train_x[:2]), example_shared=dataset.shared)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Problems:
    """The problems `validate` collects, and the checks that add to them (each names the field and the value)."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.config, self.list = config, []

    def add(self, problem: str) -> None:
        self.list.append(problem)

    def bad(self, field: str, msg: str) -> None:
        self.list.append(f"{field}={_get(self.config, field)!r}: {msg}")

    def choice(self, field: str, options) -> bool:
        value = _get(self.config, field)
        if value not in options:
            self.bad(field, f"unknown{close_matches(str(value), list(options))}; choose one of {list(options)}.")
            return False
        return True

    def positive(self, field: str) -> bool:
        v = _get(self.config, field)
        if not _is_int(v) or v < 1:
            self.bad(field, "must be a positive integer.")
            return False
        return True

    def raise_any(self) -> None:
        if self.list:
            raise ConfigError(self.list)


class Checked(NamedTuple):
    """What checking a config built on the way, for `istjax.experiment.driver.build` to use rather than build again:
    the loaded dataset (with its cluster table under graph_batches='clusters') and the task of the model on it
    (None where data was not loaded)."""

    dataset: Any
    task: Any


def validate(config: ml_collections.ConfigDict, *, load_data: bool = True):
    """`check` ``config``, returning only the loaded dataset (None when ``load_data`` is False)."""
    return check(config, load_data=load_data).dataset


def check(config: ml_collections.ConfigDict, *, load_data: bool = True) -> Checked:
    """Checks ``config`` before anything is compiled; raises `ConfigError` listing every problem found.

    Static checks: unknown fields (with close matches), names (algorithm, dataset, backend, optimizer, sampler,
    sharding), positive counts, the model widths against W and the sampler (`Sampler.slots`, so a width that does
    not split is caught here, not in a trace). With ``load_data`` (default) the dataset is loaded (loaders cache) to
    check ``dataset_kwargs`` and that a worker's shard holds at least one batch.

    Returns:
      `Checked`: the loaded `istjax.data.Dataset` and the model's `istjax.Task` on it, built once here (None when
      ``load_data`` is False).
    """
    p = _Problems(config)
    _check_known_fields(config, p)
    p.raise_any()  # a missing field would fail every check below
    names_ok = _check_names(config, p)
    counts_ok = _check_numbers(config, p)
    dataset = _check_data(config, p, load_data and names_ok["dataset"], counts_ok)
    model_ok = _check_model_fields(config, p)
    task = None
    if dataset is not None and model_ok:
        task = _check_groups(config, dataset, p.list, names_ok["algorithm"] and names_ok["sampler"] and counts_ok)
    p.raise_any()
    return Checked(dataset, task)


def _check_known_fields(config, p: _Problems) -> None:
    """Unknown fields (a typo in a config file would otherwise be silently ignored) and missing ones."""
    known = flat_dict(to_dict(default_config()))
    given = flat_dict(to_dict(config))
    for k in sorted(set(given) - set(known)):
        if k.startswith(("dataset_kwargs.", "model.", "group_samplers.")):
            continue  # checked against the loader, the model's fields and the model's groups
        p.add(f"{k}: unknown config field{close_matches(k, sorted(known))}. Remove it or fix its name; known fields "
              f"are listed in istjax.experiment.config.default_config().")
    missing = sorted(k for k in set(known) - set(given)
                     if not k.startswith(("dataset_kwargs.", "sampler_args.", "model.")) or k == "model.name")
    for k in missing:
        p.add(f"{k}: missing from the config; start your get_config() from "
              f"istjax.experiment.config.default_config() so every field has its default.")


def _check_names(config, p: _Problems) -> dict[str, bool]:
    """Every field that names a registry entry or a policy; which of the algorithm, dataset and sampler are known."""
    import istjax.data as data_lib

    ok = {"algorithm": p.choice("algorithm", ALGORITHMS.names()),
          "dataset": str(config.dataset).startswith("tfds:") or p.choice("dataset", data_lib.DATASETS),
          "sampler": p.choice("sampler", SAMPLERS.names())}
    p.choice("sharding", data_lib.SHARDINGS)
    p.choice("optimizer", OPTIMIZERS)
    p.choice("optimizer_state", ("reset", "carry"))
    p.choice("model_state", ("carry", "recompute"))
    for g, s in config.group_samplers.items():
        if s not in SAMPLERS:
            p.bad(f"group_samplers.{g}", f"unknown sampler{close_matches(str(s), SAMPLERS.names())}; choose one "
                                         f"of {SAMPLERS.names()}.")
            ok["sampler"] = False
    return ok


def _check_numbers(config, p: _Problems) -> bool:
    """Counts, the learning rate and its schedule, the target, the runtime's own fields. True when num_workers and
    batch_size are positive integers (the checks that divide by them can run)."""
    import istjax.runtimes as runtimes

    ok = {f: p.positive(f) for f in ("num_workers", "local_steps", "batch_size", "num_rounds", "eval_every",
                                     "checkpoint_every", "max_to_keep", "eval_batch_size")}
    if p.choice("backend", runtimes.names()) and runtimes.get(config.backend).multi_process:
        _check_mpi(config, p.list, p.choice, workers_ok=ok["num_workers"])
    if not _is_int(config.eval_train_examples) or config.eval_train_examples < 0:
        p.bad("eval_train_examples", "must be an integer >= 0 (0: the whole training set).")
    if not _is_int(config.seed):
        p.bad("seed", "must be an integer.")
    lr = config.learning_rate
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
        p.bad("learning_rate", "must be a positive finite number, e.g. 0.1.")
    if not isinstance(config.momentum, (int, float)) or not 0 <= config.momentum < 1:
        p.bad("momentum", "must be in [0, 1), e.g. 0.9.")
    _check_schedule(config, p.bad, p.choice)
    t = config.target_accuracy
    if t is not None and (not isinstance(t, (int, float)) or not 0 < t <= 1):
        p.bad("target_accuracy", "must be a fraction in (0, 1], e.g. 0.95, or unset.")
    if not isinstance(config.stop_at_target, bool):
        p.bad("stop_at_target", "must be True or False.")
    elif config.stop_at_target and t is None:
        p.bad("stop_at_target", "needs a target: set --config.target_accuracy=0.9 (or leave stop_at_target False).")
    return ok["num_workers"] and ok["batch_size"]


def _check_data(config, p: _Problems, load_data: bool, counts_ok: bool):
    """The dataset loaded (with ``load_data``) and checked against augmentation, graph batching and the batch size;
    the dataset the run trains on (with its cluster table under graph_batches='clusters'), or None."""
    import istjax.data as data_lib

    dataset = None
    if load_data:
        try:
            dataset = data_lib.load_dataset(config.dataset, **dict(config.dataset_kwargs))
        except (ValueError, TypeError) as e:
            p.add(f"dataset_kwargs={to_dict(config.dataset_kwargs)!r} for dataset={config.dataset!r}: {e}")
    if not isinstance(config.augment, bool):
        p.bad("augment", "must be True or False.")
    if not _is_int(config.augment_pad) or config.augment_pad < 0:
        p.bad("augment_pad", "must be an integer >= 0 (pixels of zero padding before the random crop).")
    if dataset is not None and config.augment is True and np.ndim(dataset.train_x) != 4:
        p.bad("augment", f"crops and flips images [N, H, W, C], but dataset={config.dataset!r} holds "
                         f"{np.shape(dataset.train_x)[1:]}-shaped examples. Use an image dataset (e.g. fashion_mnist) "
                         f"or augment=False.")
    clusters = _check_graph_batches(config, dataset, p.bad, p.choice)
    if clusters is not None:
        return clusters
    if dataset is not None and counts_ok:
        n, w, b = len(dataset.train_y), config.num_workers, config.batch_size
        shard = n // w if config.sharding == "disjoint" else n
        if b > shard:
            p.add(f"batch_size={b}: larger than a worker's shard ({n} training examples / num_workers={w} = {shard} "
                  f"with sharding={config.sharding!r}). Use batch_size <= {shard}, fewer workers, or "
                  f"sharding='shared'.")
    return dataset


def _check_model_fields(config, p: _Problems) -> bool:
    """The model's name and fields, before the data is known (num_classes stands in)."""
    import istjax.models as models

    try:
        models.build_model(config.model.name, model_fields(config), num_classes=2)
    except ValueError as e:
        p.add(str(e))
        return False
    return True


def _check_graph_batches(config, dataset, bad, choice):
    """Checks the graph-batching fields; with ``graph_batches="clusters"`` on a graph dataset returns the dataset
    with the cluster table in its shared input (`istjax.graph.task.with_clusters`), else None."""
    from istjax.graph.clusters import METHODS

    if not choice("graph_batches", ("full", "clusters")) or config.graph_batches == "full":
        return None
    choice("cluster_method", METHODS)
    for field in ("num_clusters", "clusters_per_step"):
        if not _is_int(config[field]) or config[field] < 1:
            bad(field, "must be a positive integer.")
            return None
    if config.clusters_per_step > config.num_clusters:
        bad("clusters_per_step", f"must be at most num_clusters={config.num_clusters}.")
        return None
    if dataset is None:
        return None
    if not dataset.shared or "graph" not in dataset.shared:
        bad("graph_batches", f"cuts a graph into clusters, but dataset={config.dataset!r} has no graph. Use a "
                             f"graph dataset (cora, citeseer, pubmed, csbm) or graph_batches='full'.")
        return None
    n = dataset.shared["graph"].num_nodes
    if config.num_clusters > n:
        bad("num_clusters", f"the graph has only {n} nodes; use at most {n} clusters.")
        return None
    from istjax.graph.task import with_clusters

    train_idx = np.asarray(dataset.train_x).astype(np.int64)
    labels = np.zeros((n,), np.int32)
    labels[train_idx] = dataset.train_y
    try:
        shared = with_clusters(dataset.shared, labels, train_idx, int(config.num_clusters),
                               method=config.cluster_method, seed=int(config.seed))
    except (ImportError, ValueError) as e:
        bad("cluster_method", str(e))
        return None
    return dataset._replace(shared=shared)


def _check_mpi(config, problems: list[str], choice, *, workers_ok: bool) -> None:
    """backend='mpi': a launch by mpiexec, W a multiple of the process count and, with mpi_mode='sharded', what that
    mode needs, each with the command-line fix (`istjax.runtimes.mpi` refuses the same in the Python API's terms)."""
    from istjax.experiment.metrics import process_count
    from istjax.runtimes.mpi import MODES, check_fit

    n = process_count()
    if n < 2:
        problems.append("backend='mpi': runs the workers on several processes, but this is one process (not launched "
                        "by mpiexec, or mpiexec -n 1). Launch it as `mpiexec -n 2 istjax train --config.backend=mpi "
                        "...` (mpiexec is in .venv/bin), or use --config.backend=simulate.")
    if not choice("mpi_mode", MODES) or n < 2:
        return
    if workers_ok:
        try:
            check_fit(int(config.num_workers), n, fix="--config.num_workers=")
        except ValueError as e:
            problems.append(str(e))
    if config.mpi_mode == "sharded" and config.algorithm in ALGORITHMS:
        _check_sharded(config, problems, n)


def _check_sharded(config, problems: list[str], n: int) -> None:
    """mpi_mode='sharded' for an algorithm that exchanges subnetworks: each process holds 1/N of the groups dealt
    stratified by N owners, so the algorithm must deal some that way: through the sampler it reads (IST:
    ``sampler=stratified``, ``num_owners=N``, for every group or some in ``group_samplers``) or its own
    ``num_owners`` option (ResIST). Algorithms that exchange replicas or gradients run in it as they are."""
    from istjax.algorithms import Exchange
    from istjax.core.partition import owner_counts

    entry = ALGORITHMS.get(config.algorithm)
    caps = entry.capabilities
    if caps.exchange is not Exchange.SUBNETWORKS:
        return
    other = "or --config.mpi_mode=parameter_server"
    if not caps.sharded:
        problems.append(f"algorithm={config.algorithm!r} with mpi_mode='sharded': "
                        f"{caps.not_sharded_because.replace('1/N', f'1/{n}')}. Use --config.mpi_mode=parameter_server.")
        return
    if config.model_state == "recompute":
        problems.append(f"model_state='recompute' with mpi_mode='sharded': recomputing the statistics is a forward "
                        f"pass of the whole merged model, which no rank holds. Use --config.model_state=carry {other}.")
    if "num_owners" in entry.options:  # the algorithm stratifies its own groups (ResIST's blocks)
        if config.sampler_args.num_owners != n:
            problems.append(f"mpi_mode='sharded' on {n} processes: algorithm={config.algorithm!r} deals its groups "
                            f"stratified by sampler_args.num_owners={config.sampler_args.num_owners} owners; each "
                            f"process owns 1/{n}. Add --config.sampler_args.num_owners={n}, {other}.")
        return
    try:
        sampler = make_sampler(config)
    except ValueError:
        return  # reported by the sampler's own check
    groups = dict.fromkeys([*config.group_samplers, "(any other group)"], 0)
    if n not in owner_counts(sampler, groups).values():
        stratified = config.sampler == "stratified"
        has = f"sampler={config.sampler!r}"
        has += f" with num_owners={config.sampler_args.num_owners}" if stratified else ""
        has += f" and group_samplers={to_dict(config.group_samplers)!r}" if len(config.group_samplers) else ""
        problems.append(f"mpi_mode='sharded' on {n} processes: each process owns 1/{n} of the neuron groups dealt "
                        f"stratified by {n} owners, but the config has {has}, which deals none that way. Add "
                        f"--config.sampler=stratified --config.sampler_args.num_owners={n}, {other}.")


def _check_schedule(config, bad, choice) -> None:
    from istjax.core.schedule import SCHEDULES

    choice("lr_schedule", SCHEDULES)
    wd = config.weight_decay
    if not isinstance(wd, (int, float)) or isinstance(wd, bool) or not 0 <= wd < 1:
        bad("weight_decay", "must be a number in [0, 1), e.g. 5e-4.")
    at = config.lr_decay_at
    if not isinstance(at, (tuple, list)) or not all(isinstance(f, (int, float)) and 0 < f < 1 for f in at):
        bad("lr_decay_at", "must be fractions of the run in (0, 1), e.g. (0.5, 0.75).")
    factor = config.lr_decay_factor
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 0 < factor <= 1:
        bad("lr_decay_factor", "must be in (0, 1], e.g. 0.1.")
    for field in ("warmup_rounds", "lr_schedule_rounds"):
        if not _is_int(config[field]) or config[field] < 0:
            bad(field, "must be an integer >= 0.")


def _check_resist(config, task, problems: list[str]) -> None:
    from istjax.algorithms.resist import resist_sampler
    from istjax.core import contract

    groups = contract.block_groups(task.module)
    if groups is None:
        problems.append(f"algorithm='resist' with model.name={config.model.name!r}: ResIST deals residual blocks, "
                        f"so it needs model.name='depth_resnet'.")
        return
    if not _is_int(config.resist_min_depth) or config.resist_min_depth < 0:
        problems.append(f"resist_min_depth={config.resist_min_depth!r}: must be an integer >= 0.")
        return
    try:
        resist_sampler(groups, int(config.num_workers), int(config.resist_min_depth))
    except ValueError as e:
        problems.append(f"model.stage_sizes={tuple(task.module.stage_sizes)!r} with num_workers={config.num_workers} "
                        f"and resist_min_depth={config.resist_min_depth}: {e}")


def _sizes_text(config) -> str:
    """The model fields that set sizes (tuples and integers), as ``model.hidden=(512,)``, for messages."""
    shown = [f"model.{k}={tuple(v) if isinstance(v, list) else v!r}" for k, v in model_fields(config).items()
             if isinstance(v, (list, tuple)) or _is_int(v)]
    return ", ".join(shown) or f"model.name={config.model.name!r}"


def _check_groups(config, dataset, problems: list[str], sampler_ok: bool):
    """The model's task on the data, built once and returned (None when it cannot be built); its neuron groups
    (from its spec) checked against ``group_samplers``, W and the sampler."""
    try:
        task = make_task(config, dataset)
    except (TypeError, ValueError) as e:
        problems.append(f"model.name={config.model.name!r} on dataset={config.dataset!r}: {e}")
        return None
    _check_task(config, dataset, task, problems, sampler_ok)
    return task


def _check_task(config, dataset, task, problems: list[str], sampler_ok: bool) -> None:
    if int(config.eval_batch_size) < task.min_eval_batch:
        problems.append(f"eval_batch_size={config.eval_batch_size}: model {config.model.name!r} normalises with the "
                        f"statistics of the evaluation batch at test time, so a small batch evaluates another, worse "
                        f"model (measured on digits: batch 7 -> accuracy 0.77, 256 and up -> 0.97). Use at least "
                        f"{task.min_eval_batch} (istjax.core.task.MIN_BATCH_STATISTICS_EVAL).")
    train_eval = int(config.eval_train_examples)
    if 0 < train_eval < task.min_eval_batch:
        problems.append(f"eval_train_examples={train_eval}: model {config.model.name!r} normalises with batch "
                        f"statistics at test time; the training-set evaluation needs at least {task.min_eval_batch} "
                        f"examples (or 0: the whole training set).")
    smallest = min(len(dataset.test_y), len(dataset.train_y))
    if smallest < task.min_eval_batch:
        problems.append(f"dataset={config.dataset!r}: a split of {smallest} examples is smaller than the "
                        f"{task.min_eval_batch}-example evaluation batch that model {config.model.name!r} needs (it "
                        f"normalises with batch statistics at test time). Use more examples (dataset_kwargs) or a "
                        f"model with running statistics.")
    groups = dict(task.spec.group_sizes)
    unknown = sorted(set(config.group_samplers) - set(groups))
    for g in unknown:
        problems.append(f"group_samplers.{g}={config.group_samplers[g]!r}: model {config.model.name!r} has no neuron "
                        f"group {g!r}{close_matches(g, sorted(groups))}; its groups are {sorted(groups)}.")
    if not sampler_ok:  # an unknown algorithm or sampler is reported already
        return
    caps = ALGORITHMS.get(config.algorithm).capabilities
    if caps.needs is ModelNeeds.NEURON_GROUPS and not groups:
        problems.append(f"algorithm={config.algorithm!r} with model.name={config.model.name!r}: the model has no "
                        f"neuron group (its partition_rules() map no axis to a group), so it would train as local "
                        f"SGD. Use algorithm='local_sgd' or give the model partitioned axes.")
    if caps.needs is ModelNeeds.DEPTH_SPLIT:
        _check_resist(config, task, problems)
        return
    if not caps.samples_partition or unknown or not groups:
        return
    try:
        make_sampler(config).slots(groups, int(config.num_workers))
    except ValueError as e:
        where = f"sampler={config.sampler!r}" + (f", group_samplers={to_dict(config.group_samplers)!r}"
                                                 if len(config.group_samplers) else "")
        problems.append(f"{_sizes_text(config)} with num_workers={config.num_workers} and {where}: {e}")


def _get(config, field: str):
    v = config
    for part in field.split("."):
        v = v[part]
    return v
