"""Run configurations: every field `istjax.launch.driver.train_and_evaluate` reads, its default, and its validation.

A configuration is an ml_collections `ConfigDict` (the Flax-examples convention): experiment files under
``experiments/configs/`` define ``get_config()``, start from `default_config()` and override a few fields; the
command line overrides any field with ``--config.FIELD=VALUE``. This module is itself a valid config file (it has
`get_config`), which is how ``istjax train`` without ``--config`` finds the default study from any directory.

`validate` checks a configuration before anything is built or compiled and reports *every* problem at once, each
with the field, the value and the fix::

    >>> import istjax.launch.config as cfg
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
from istjax.core.errors import config_terms
from istjax.core.partition import SAMPLERS
from istjax.data.cluster_batches import FULL_GRAPH, GRAPH_BATCHES, clustered

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
    "RENAMED",
    "OPEN_SECTIONS",
    "MODEL_KEYS",
    "use_model",
    "model_module",
    "data_module",
    "load_config_data",
    "renamed",
    "upgrade_dict",
    "get_field",
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

    The config has five sections, each naming its registry entry (``name``) and that entry's options: ``algorithm``,
    ``sampler``, ``model``, ``data`` and ``runtime``; the fields of training (W, K, B, the optimizer and its schedule)
    and of the run (seed, evaluation, checkpoints) sit at the top. The flat fields of earlier versions are refused
    with the nested name to use (`RENAMED`), and old ``config.json`` files are read through `from_dict`.

    Measured on a 2-core CPU: see ``experiments/configs/default.py`` for the command and the result.
    """
    c = ml_collections.ConfigDict()
    c.name = "digits_ist"  # run name; `istjax train` without --workdir writes to ./runs/<name>-<timestamp>
    for add_fields in _FIELD_BUILDERS:
        add_fields(c)
    return c


def _algorithm_section(c: ml_collections.ConfigDict) -> None:
    """What is trained: the algorithm (`istjax.algorithms.ALGORITHMS`) and the options its factories take."""
    c.algorithm = ml_collections.ConfigDict()
    c.algorithm.name = "ist"  # "ist" | "data_parallel" | "local_sgd" | "resist" (model.name="depth_resnet")
    c.algorithm.optimizer_state = "reset"  # "reset": fresh optimizer state every round; "carry": travels with params
    # Model state (BatchNorm running statistics of models that keep them): "carry" (extracted and merged with the
    # channels they belong to) | "recompute" (recomputed on the merged model after every round).
    c.algorithm.model_state = "carry"
    # ResIST: each worker's minimum number of blocks per partitioned stage (0: dealt without overlap) and the 1/S
    # scaling of partitioned residual branches at test time.
    c.algorithm.min_depth = 0
    c.algorithm.test_scale = True


def _sampler_section(c: ml_collections.ConfigDict) -> None:
    """How the neurons are dealt (`istjax.core.partition.SAMPLERS`), for the algorithms that read a sampler."""
    c.sampler = ml_collections.ConfigDict()
    c.sampler.name = "uniform"  # "uniform" | "uniform_pad" | "overlapping" | "stratified" | "uneven" | "nested"
    c.sampler.min_units = 0  # overlapping: minimum units per worker per group
    c.sampler.num_owners = 1  # stratified (and ResIST's blocks): number of owner shards of every group
    c.sampler.weights = ()  # uneven: one positive weight per worker
    c.sampler.fractions = ()  # nested: one fraction in (0, 1] per worker
    # Per neuron group samplers, overriding `name` for the groups named (istjax.per_group), e.g.
    # --config.sampler.groups.block_0_0=overlapping deals that group with overlap (it may then be smaller than W).
    c.sampler.groups = ml_collections.ConfigDict()


def _model_section(c: ml_collections.ConfigDict) -> None:
    """The model: `name` from istjax.models.MODELS and that module's fields (``istjax.models.model_fields(name)``
    lists them; num_classes comes from the data). Its neuron groups come from the module's partition_rules()."""
    c.model = ml_collections.ConfigDict()
    # "mlp", "cnn", "resnet", "preact_resnet", "vgg", "depth_resnet", "gcn", "graphsage", or one added with
    # register_model.
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
    # "digits" | "mnist1d" | "synthetic_speech" | "fashion_mnist" | graphs: "cora" | "citeseer" | "pubmed" | "csbm" |
    # "graph_npz" (istjax.data.DATASETS) | "tfds:<name>"
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


def _training_fields(c: ml_collections.ConfigDict) -> None:
    """`default_config`'s fields for how the model is trained: W, K, B, the optimizer and its schedule."""
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


def _run_fields(c: ml_collections.ConfigDict) -> None:
    """`default_config`'s fields for what a run records: seed, evaluation, checkpoints."""
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


# default_config's parts in order (`istjax train --help` prints their lines).
_FIELD_BUILDERS = (_algorithm_section, _sampler_section, _model_section, _data_section, _runtime_section,
                   _training_fields, _run_fields)

# The flat fields of earlier versions and where each now lives. A flat name (or, for the three flat sections, its
# prefix) is refused in a config or on the command line with the nested name; `from_dict` reads old config.json
# files through this table, so old runs stay resumable and comparable.
RENAMED = {
    "algorithm": "algorithm.name",
    "optimizer_state": "algorithm.optimizer_state",
    "model_state": "algorithm.model_state",
    "resist_min_depth": "algorithm.min_depth",
    "resist_test_scale": "algorithm.test_scale",
    "sampler": "sampler.name",
    "sampler_args": "sampler",
    "group_samplers": "sampler.groups",
    "dataset": "data.name",
    "dataset_kwargs": "data.kwargs",
    "sharding": "data.sharding",
    "augment": "data.augment",
    "augment_pad": "data.augment_pad",
    "graph_batches": "data.graph_batches",
    "num_clusters": "data.num_clusters",
    "clusters_per_step": "data.clusters_per_step",
    "cluster_method": "data.cluster_method",
    "backend": "runtime.name",
    "mpi_mode": "runtime.mode",
}
# The sections whose keys a config may add (a config file need not name them first): the loader's arguments, checked
# against the loader, and the per-group samplers, checked against the model's groups.
OPEN_SECTIONS = ("data.kwargs", "sampler.groups")


def renamed(field: str) -> Optional[str]:
    """The nested name of a flat field of earlier versions (``"backend"`` -> ``"runtime.name"``,
    ``"sampler_args.num_owners"`` -> ``"sampler.num_owners"``), or None when ``field`` is not one."""
    head, _, rest = field.partition(".")
    if head not in RENAMED:
        return None
    if head in ("algorithm", "sampler") and rest:  # already nested: algorithm.name, sampler.groups.x
        return None
    new = RENAMED[head]
    return f"{new}.{rest}" if rest else new


def get_config(arg: Optional[str] = None) -> ml_collections.ConfigDict:
    """Config-file entry point (``--config=istjax/config.py``): the default study."""
    del arg
    return default_config()


def to_dict(config: ml_collections.ConfigDict) -> dict:
    """A JSON-able plain dict of ``config`` (tuples become lists)."""
    return json.loads(config.to_json())


def from_dict(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A config from a plain dict (a run's ``config.json``): the defaults, with every field ``values`` gives.

    The open sections (``model``, ``data.kwargs``, ``sampler.groups``) are taken whole (their fields depend on the
    model and the loader). A ``config.json`` of an earlier, flat version is read through `RENAMED`. JSON's lists
    become the tuples a config holds, so a resumed run's config takes ``--config.model.hidden='(512,)'`` like any
    other (ml_collections cannot override a list field from the command line).
    """
    config = default_config()
    for field, value in _leaves(upgrade_dict(_as_tuples(dict(values)))):
        *parents, leaf = field.split(".")
        node = config
        for part in parents:
            if part not in node:
                with node.unlocked():
                    node[part] = ml_collections.ConfigDict()  # validate() names unknown sections
            node = node[part]
        if field in _WHOLE and isinstance(value, Mapping):
            value = ml_collections.ConfigDict(dict(value))
        if leaf in node and not (isinstance(node[leaf], ml_collections.ConfigDict) and field not in _WHOLE):
            node[leaf] = value
        else:
            with node.unlocked():
                node[leaf] = value  # validate() names unknown fields
    return config


_WHOLE = ("model", *OPEN_SECTIONS)  # sections taken whole from a config.json


def _leaves(tree: Mapping[str, Any], prefix: str = ""):
    """``(dotted field, value)`` of every leaf of ``tree``, the sections in `_WHOLE` as one leaf each."""
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and name not in _WHOLE:
            yield from _leaves(v, name + ".")
        else:
            yield name, v


def upgrade_dict(values: dict) -> dict:
    """``values`` with the flat fields of earlier versions moved to their sections (`RENAMED`)."""
    out: dict = {}

    def put(dotted: str, value) -> None:
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        if isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
            node[leaf].update(value)
        else:
            node[leaf] = value

    for key, value in values.items():
        flat = key in RENAMED and not (key in ("algorithm", "sampler") and isinstance(value, Mapping))
        put(RENAMED[key] if flat else key, value)
    return out


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
    """Fields where two (plain-dict) configs differ, as ``"field: a -> b"`` strings; ``ignore`` skips fields. A
    config of an earlier, flat version is compared under the nested names (`RENAMED`)."""
    fa, fb = flat_dict(upgrade_dict(dict(a))), flat_dict(upgrade_dict(dict(b)))
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
    """The `istjax.Sampler` the config names: ``sampler.name`` for every group, `istjax.per_group` where
    ``sampler.groups`` names groups (raises ValueError naming the field for bad arguments)."""
    from istjax.core import partition

    default = _one_sampler(config.sampler.name, config.sampler)
    if not len(config.sampler.groups):
        return default
    return partition.per_group({g: _one_sampler(s, config.sampler) for g, s in config.sampler.groups.items()},
                               default=default)


MODEL_KEYS = ("name", "module")  # the model section's own fields; every other one is the module's


def model_fields(config: ml_collections.ConfigDict) -> dict:
    """The config's ``model`` section minus ``name`` and ``module``: the module's fields."""
    return {k: v for k, v in to_dict(config.model).items() if k not in MODEL_KEYS}


def model_module(config: ml_collections.ConfigDict) -> str:
    """``model.module`` (``""`` when the config has none: a built-in or registered model)."""
    return config.model.get("module", "") or ""


def use_model(config: ml_collections.ConfigDict, name: str, module: str = "", **fields: Any) -> None:
    """Replaces ``config``'s model section: model ``name`` (from ``module``, `istjax.models.user`) with ``fields``
    and no field of the model the config held before. For config files built from `default_config`::

        c = default_config()
        use_model(c, "resmlp", "my_models.py:ResMLP", width=128, depth=3)
    """
    with config.unlocked():
        config.model = ml_collections.ConfigDict({"name": name, "module": module, **fields})


def _record_model_source(config: ml_collections.ConfigDict) -> None:
    """Sets ``model.module`` to where the model's class can be loaded again (an absolute file path), so the run's
    config.json is enough for `--resume` and `istjax eval` in a fresh process (`istjax.models.model_source`)."""
    import istjax.models as models

    try:
        source = models.model_source(config.model.name, model_module(config))
    except (ValueError, TypeError):
        return  # reported by the model check
    if source != model_module(config):
        with config.model.unlocked():
            config.model.module = source


def data_module(config: ml_collections.ConfigDict) -> str:
    """``data.module`` (``""`` for a dataset istjax ships, or a config.json written before the field existed)."""
    return config.data.get("module", "") or ""


def _record_data_source(config: ml_collections.ConfigDict) -> None:
    """Sets ``data.module`` to its file's absolute path, so the run's config.json loads the data again from any
    folder (`istjax.core.user_code.absolute`)."""
    from istjax.core.user_code import absolute

    spec = data_module(config)
    if spec and isinstance(spec, str) and absolute(spec) != spec:
        config.data.module = absolute(spec)


def load_config_data(config: ml_collections.ConfigDict):
    """The dataset the config names: a built-in loader's (``data.name``) or your function's (``data.module``), with
    ``data.kwargs``. Raises ValueError naming the field and the fix."""
    import istjax.data as data_lib

    kwargs = dict(config.data.kwargs)
    if data_module(config):
        return data_lib.load_module_dataset(data_module(config), **kwargs)._replace(name=str(config.data.name))
    return data_lib.load_dataset(config.data.name, **kwargs)


def make_task(config: ml_collections.ConfigDict, dataset):
    """The `istjax.Task` of the config's model on ``dataset`` (nothing is compiled: shapes come from eval_shape)."""
    import jax.numpy as jnp

    from istjax.core.task import classifier
    from istjax.models import build_model

    model = build_model(config.model.name, model_fields(config), num_classes=int(dataset.num_classes),
                        module=model_module(config))
    if clustered(dataset.shared):
        from istjax.graph.task import cluster_classifier

        return cluster_classifier(model, dataset.shared, num_classes=int(dataset.num_classes))
    return classifier(model, jnp.asarray(dataset.train_x[:2]), example_shared=dataset.shared,
                      num_classes=int(dataset.num_classes))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Problems:
    """The problems `validate` collects, and the checks that add to them (each names the field and the value)."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.config, self.list = config, []

    def add(self, problem: str) -> None:
        self.list.append(problem)

    def bad(self, field: str, msg: str) -> None:
        self.list.append(f"{field}={get_field(self.config, field)!r}: {msg}")

    def choice(self, field: str, options) -> bool:
        value = get_field(self.config, field)
        if value not in options:
            self.bad(field, f"unknown{close_matches(str(value), list(options))}; choose one of {list(options)}.")
            return False
        return True

    def positive(self, field: str) -> bool:
        v = get_field(self.config, field)
        if not _is_int(v) or v < 1:
            self.bad(field, "must be a positive integer.")
            return False
        return True

    def raise_any(self) -> None:
        if self.list:
            raise ConfigError(self.list)


class Checked(NamedTuple):
    """What checking a config built on the way, for `istjax.launch.driver.build` to use rather than build again:
    the loaded dataset (with its cluster table under graph_batches='clusters') and the task of the model on it
    (None where data was not loaded)."""

    dataset: Any
    task: Any


def validate(config: ml_collections.ConfigDict, *, load_data: bool = True):
    """`check` ``config``, returning only the loaded dataset (None when ``load_data`` is False)."""
    return check(config, load_data=load_data).dataset


def check(config: ml_collections.ConfigDict, *, load_data: bool = True) -> Checked:
    """Checks ``config`` before anything is compiled; raises `ConfigError` listing every problem found.

    Static checks: unknown fields (with close matches), names (algorithm, data, runtime, optimizer, sampler,
    sharding), positive counts, the model widths against W and the sampler (`Sampler.slots`, so a width that does
    not split is caught here, not in a trace). With ``load_data`` (default) the dataset is loaded (loaders cache) to
    check ``data.kwargs`` and that a worker's shard holds at least one batch.

    Returns:
      `Checked`: the loaded `istjax.data.Dataset` and the model's `istjax.Task` on it, built once here (None when
      ``load_data`` is False).
    """
    p = _Problems(config)
    _check_known_fields(config, p)
    p.raise_any()  # a missing field would fail every check below
    _record_model_source(config)
    _record_data_source(config)
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
    """Unknown fields (a typo in a config file would otherwise be silently ignored), flat fields of earlier versions
    (named with their nested place, `RENAMED`), sections set to a plain value, and missing fields."""
    known = flat_dict(to_dict(default_config()))
    given = flat_dict(to_dict(config))
    sections = {k.rsplit(".", 1)[0] for k in known if "." in k}
    for k in sorted(set(given) - set(known)):
        if k.startswith(("data.kwargs.", "model.", "sampler.groups.")):
            continue  # checked against the loader, the model's fields and the model's groups
        if k in sections:
            p.add(f"{k}={given[k]!r}: {k} is a section of the config; set its fields, e.g. "
                  f"{_section_fix(k, given[k])}.")
        elif renamed(k):
            new = renamed(k)
            p.add(f"{k}={given[k]!r}: the flat field {k!r} is now {new!r}; set --config.{new}={_flag_text(given[k])} "
                  f"(or config.{new} = {given[k]!r} in a config file).")
        else:
            p.add(f"{k}: unknown config field{close_matches(k, sorted(known))}. Remove it or fix its name; known "
                  f"fields are listed in istjax.launch.config.default_config().")
    optional = ("model.", "sampler.min_units", "sampler.num_owners", "sampler.weights", "sampler.fractions")
    plain = {k for k in given if k in sections}  # a section given a plain value, reported above
    for k in sorted(set(known) - set(given)):
        if (k.startswith(optional) and k != "model.name") or k.rsplit(".", 1)[0] in plain:
            continue
        p.add(f"{k}: missing from the config; start your get_config() from "
              f"istjax.launch.config.default_config() so every field has its default.")


def _flag_text(value) -> str:
    """``value`` as it is written after ``--config.FIELD=`` (a string bare, anything else as its literal)."""
    return value if isinstance(value, str) else repr(tuple(value) if isinstance(value, list) else value)


def _section_fix(section: str, value) -> str:
    """How to set what a plain value given to ``section`` most likely meant."""
    name = f"{section}.name"
    if name in flat_dict(to_dict(default_config())):
        return f"--config.{name}={_flag_text(value)}"
    return f"--config.{section}.<field>=..."


def _check_names(config, p: _Problems) -> dict[str, bool]:
    """Every field that names a registry entry or a policy; which of the algorithm, dataset and sampler are known."""
    import istjax.data as data_lib

    ok = {"algorithm": p.choice("algorithm.name", ALGORITHMS.names()),
          "dataset": _check_data_name(config, p),
          "sampler": p.choice("sampler.name", SAMPLERS.names())}
    p.choice("data.sharding", data_lib.SHARDINGS)
    p.choice("optimizer", OPTIMIZERS)
    p.choice("algorithm.optimizer_state", ("reset", "carry"))
    p.choice("algorithm.model_state", ("carry", "recompute"))
    for g, s in config.sampler.groups.items():
        if s not in SAMPLERS:
            p.bad(f"sampler.groups.{g}", f"unknown sampler{close_matches(str(s), SAMPLERS.names())}; choose one "
                                         f"of {SAMPLERS.names()}.")
            ok["sampler"] = False
    return ok


def _check_data_name(config, p: _Problems) -> bool:
    """``data.name`` names a shipped dataset, or (with ``data.module``) your data, under a name of its own."""
    import istjax.data as data_lib

    spec = data_module(config)
    if not spec:
        return str(config.data.name).startswith("tfds:") or p.choice("data.name", data_lib.DATASETS)
    if not isinstance(spec, str):
        p.bad("data.module", "give 'path/to/file.py:function' or 'package.module:function'.")
        return False
    name = str(config.data.name)
    if name in data_lib.DATASETS or name.startswith("tfds:") or not name:
        fn = spec.rsplit(":", 1)[-1].split(".")[-1] or "my_data"
        p.add(f"data.name={name!r} with data.module={spec!r}: {name!r} names a dataset istjax ships, but data.module "
              f"loads your own; give yours its own name, e.g. --config.data.name={fn}.")
        return False
    return True


def _check_numbers(config, p: _Problems) -> bool:
    """Counts, the learning rate and its schedule, the target, the runtime's own fields. True when num_workers and
    batch_size are positive integers (the checks that divide by them can run)."""
    import istjax.runtimes as runtimes

    ok = {f: p.positive(f) for f in ("num_workers", "local_steps", "batch_size", "num_rounds", "eval_every",
                                     "checkpoint_every", "max_to_keep", "eval_batch_size")}
    if p.choice("runtime.name", runtimes.names()):
        _check_runtime_options(config, p, runtimes.get(config.runtime.name).config_options)
        if runtimes.get(config.runtime.name).multi_process:
            _check_mpi(config, p.list, p.choice, workers_ok=ok["num_workers"])
        else:
            _check_single_launch(config, p)
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
            dataset = load_config_data(config)
        except (ValueError, TypeError) as e:
            p.add(str(e) if data_module(config) else
                  f"data.kwargs={to_dict(config.data.kwargs)!r} for data.name={config.data.name!r}: {e}")
    if not isinstance(config.data.augment, bool):
        p.bad("data.augment", "must be True or False.")
    if not _is_int(config.data.augment_pad) or config.data.augment_pad < 0:
        p.bad("data.augment_pad", "must be an integer >= 0 (pixels of zero padding before the random crop).")
    if dataset is not None and config.data.augment is True and np.ndim(dataset.train_x) != 4:
        p.bad("data.augment", f"crops and flips images [N, H, W, C], but data.name={config.data.name!r} holds "
                         f"{np.shape(dataset.train_x)[1:]}-shaped examples. Use an image dataset (e.g. fashion_mnist) "
                         f"or data.augment=False.")
    clusters = _check_graph_batches(config, dataset, p.bad, p.choice)
    if clusters is not None:
        return clusters
    if dataset is not None and counts_ok:
        n, w, b = len(dataset.train_y), config.num_workers, config.batch_size
        shard = n // w if config.data.sharding == "disjoint" else n
        if b > shard:
            p.add(f"batch_size={b}: larger than a worker's shard ({n} training examples / num_workers={w} = {shard} "
                  f"with data.sharding={config.data.sharding!r}). Use batch_size <= {shard}, fewer workers, or "
                  f"data.sharding='shared'.")
    return dataset


def _check_model_fields(config, p: _Problems) -> bool:
    """The model's name and fields, before the data is known (num_classes stands in)."""
    import istjax.models as models

    try:
        models.build_model(config.model.name, model_fields(config), num_classes=2, module=model_module(config))
    except ValueError as e:
        p.add(str(e))
        return False
    return True


def _check_graph_batches(config, dataset, bad, choice):
    """Checks the graph-batching fields; with ``graph_batches="clusters"`` on a graph dataset returns the dataset
    with the cluster table in its shared input (`istjax.graph.task.with_clusters`), else None."""
    from istjax.graph.clusters import METHODS

    if not choice("data.graph_batches", GRAPH_BATCHES) or config.data.graph_batches == FULL_GRAPH:
        return None
    choice("data.cluster_method", METHODS)
    for field in ("data.num_clusters", "data.clusters_per_step"):
        if not _is_int(get_field(config, field)) or get_field(config, field) < 1:
            bad(field, "must be a positive integer.")
            return None
    if config.data.clusters_per_step > config.data.num_clusters:
        bad("data.clusters_per_step", f"must be at most data.num_clusters={config.data.num_clusters}.")
        return None
    if dataset is None:
        return None
    if not dataset.shared or "graph" not in dataset.shared:
        bad("data.graph_batches", f"cuts a graph into clusters, but data.name={config.data.name!r} has no graph. Use a "
                             f"graph dataset (cora, citeseer, pubmed, csbm) or data.graph_batches='full'.")
        return None
    n = dataset.shared["graph"].num_nodes
    if config.data.num_clusters > n:
        bad("data.num_clusters", f"the graph has only {n} nodes; use at most {n} clusters.")
        return None
    from istjax.graph.task import with_clusters

    train_idx = np.asarray(dataset.train_x).astype(np.int64)
    labels = np.zeros((n,), np.int32)
    labels[train_idx] = dataset.train_y
    try:
        shared = with_clusters(dataset.shared, labels, train_idx, int(config.data.num_clusters),
                               method=config.data.cluster_method, seed=int(config.seed))
    except (ImportError, ValueError) as e:
        bad("data.cluster_method", str(e))
        return None
    return dataset._replace(shared=shared)


def _check_runtime_options(config, p: _Problems, reads: tuple[str, ...]) -> None:
    """A ``runtime`` field the chosen runtime does not read, set to other than its default, is refused, not ignored
    (``runtime.mode=sharded`` with ``runtime.name=simulate``)."""
    import istjax.runtimes as runtimes

    defaults = default_config().runtime
    for field in sorted(set(defaults) - {"name", *reads}):
        if field in config.runtime and config.runtime[field] != defaults[field]:
            users = [n for n in runtimes.names() if field in runtimes.get(n).config_options]
            p.bad(f"runtime.{field}", f"runtime.name={config.runtime.name!r} does not read it, so it would change "
                                      f"nothing; it is read by runtime.name in {users}. Drop it, or set "
                                      f"--config.runtime.name={users[0] if users else '...'}.")


def _check_single_launch(config, p: _Problems) -> None:
    """A runtime of one process, launched by mpiexec with several: every rank would train its own copy of the run
    into one workdir. Refused on every rank, before anything is written."""
    from istjax.launch.metrics import process_count

    n = process_count()
    if n > 1:
        p.bad("runtime.name", f"runs every worker in one process, but mpiexec launched {n} processes: each would train "
                              f"its own copy of the run into the same workdir. Add --config.runtime.name=mpi (`mpiexec "
                              f"-n {n} istjax train --config.runtime.name=mpi ...`), or run `istjax train` without "
                              f"mpiexec.")


def _check_mpi(config, problems: list[str], choice, *, workers_ok: bool) -> None:
    """runtime.name='mpi': a launch by mpiexec, W a multiple of the process count and, with mode='sharded', what that
    mode needs, each with the command-line fix (`istjax.runtimes.mpi` refuses the same in the Python API's terms)."""
    from istjax.launch.metrics import process_count
    from istjax.runtimes.mpi import MODES, check_fit

    n = process_count()
    if n < 2:
        problems.append("runtime.name='mpi': runs the workers on several processes, but this is one process (not "
                        "launched by mpiexec, or mpiexec -n 1). Launch it as `mpiexec -n 2 istjax train "
                        "--config.runtime.name=mpi ...` (mpiexec is in .venv/bin), or use "
                        "--config.runtime.name=simulate.")
    if not choice("runtime.mode", MODES) or n < 2:
        return
    if workers_ok:
        try:
            check_fit(int(config.num_workers), n, fix="--config.num_workers=")
        except ValueError as e:
            problems.append(str(e))
    if config.runtime.mode == "sharded" and config.algorithm.name in ALGORITHMS:
        _check_sharded(config, problems, n)


def _check_sharded(config, problems: list[str], n: int) -> None:
    """runtime.mode='sharded' for an algorithm that exchanges subnetworks: each process holds 1/N of the groups dealt
    stratified by N owners, so the algorithm must deal some that way: through the sampler it reads (IST:
    ``sampler.name=stratified``, ``sampler.num_owners=N``, for every group or some in ``sampler.groups``) or its own
    ``num_owners`` option (ResIST). Algorithms that exchange replicas or gradients are refused by the runtime
    (`istjax.runtimes.mpi.mpi_runtime`: there is nothing to shard)."""
    from istjax.algorithms import Exchange
    from istjax.core.partition import owner_counts

    entry = ALGORITHMS.get(config.algorithm.name)
    caps = entry.capabilities
    if caps.exchange is not Exchange.SUBNETWORKS:
        return
    other = "or --config.runtime.mode=parameter_server"
    if not caps.sharded:
        problems.append(f"algorithm.name={config.algorithm.name!r} with runtime.mode='sharded': "
                        f"{caps.not_sharded_because.replace('1/N', f'1/{n}')}. Use "
                        f"--config.runtime.mode=parameter_server.")
        return
    if config.algorithm.model_state == "recompute" and not _owner_statistics(config):
        problems.append(f"algorithm.model_state='recompute' with runtime.mode='sharded': recomputing the statistics "
                        f"is a forward pass of the whole merged model, which no rank holds, and model "
                        f"{config.model.name!r} gives no owner_statistics method to run it from each rank's part "
                        f"(the channel-partitioned cnn, resnet and vgg do). Use --config.algorithm.model_state=carry "
                        f"{other}.")
    if "num_owners" in entry.options:  # the algorithm stratifies its own groups (ResIST's blocks)
        if config.sampler.num_owners != n:
            problems.append(f"runtime.mode='sharded' on {n} processes: algorithm.name={config.algorithm.name!r} "
                            f"deals its groups stratified by sampler.num_owners={config.sampler.num_owners} owners; each "
                            f"process owns 1/{n}. Add --config.sampler.num_owners={n}, {other}.")
        return
    try:
        sampler = make_sampler(config)
    except ValueError:
        return  # reported by the sampler's own check
    groups = dict.fromkeys([*config.sampler.groups, "(any other group)"], 0)
    if n not in owner_counts(sampler, groups).values():
        stratified = config.sampler.name == "stratified"
        has = f"sampler.name={config.sampler.name!r}"
        has += f" with num_owners={config.sampler.num_owners}" if stratified else ""
        has += f" and sampler.groups={to_dict(config.sampler.groups)!r}" if len(config.sampler.groups) else ""
        problems.append(f"runtime.mode='sharded' on {n} processes: each process owns 1/{n} of the neuron groups dealt "
                        f"stratified by {n} owners, but the config has {has}, which deals none that way. Add "
                        f"--config.sampler.name=stratified --config.sampler.num_owners={n}, {other}.")


def _owner_statistics(config) -> bool:
    """Whether the config's model class gives ``owner_statistics`` (`istjax.core.contract`); True for a model the
    model check reports instead."""
    from istjax.models import model_class

    try:
        cls = model_class(config.model.name, model_module(config))
    except ValueError:
        return True
    return callable(getattr(cls, "owner_statistics", None))


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
        problems.append(f"algorithm.name='resist' with model.name={config.model.name!r}: ResIST deals residual blocks, "
                        f"so it needs model.name='depth_resnet'.")
        return
    if not _is_int(config.algorithm.min_depth) or config.algorithm.min_depth < 0:
        problems.append(f"algorithm.min_depth={config.algorithm.min_depth!r}: must be an integer >= 0.")
        return
    try:
        resist_sampler(groups, int(config.num_workers), int(config.algorithm.min_depth))
    except ValueError as e:
        problems.append(f"model.stage_sizes={tuple(task.module.stage_sizes)!r} with num_workers={config.num_workers} "
                        f"and algorithm.min_depth={config.algorithm.min_depth}: {e}")


def _sizes_text(config) -> str:
    """The model fields that set sizes (tuples and integers), as ``model.hidden=(512,)``, for messages."""
    shown = [f"model.{k}={tuple(v) if isinstance(v, list) else v!r}" for k, v in model_fields(config).items()
             if isinstance(v, (list, tuple)) or _is_int(v)]
    return ", ".join(shown) or f"model.name={config.model.name!r}"


def _check_groups(config, dataset, problems: list[str], sampler_ok: bool):
    """The model's task on the data, built once and returned (None when it cannot be built); its neuron groups
    (from its spec) checked against ``sampler.groups``, W and the sampler."""
    try:
        task = make_task(config, dataset)
    except (TypeError, ValueError) as e:
        problems.append(f"model.name={config.model.name!r} on data.name={config.data.name!r}: {e}")
        return None
    _check_task(config, dataset, task, problems, sampler_ok)
    return task


def _check_task(config, dataset, task, problems: list[str], sampler_ok: bool) -> None:
    from istjax.core import contract
    from istjax.core.task import MIN_BATCH_STATISTICS_SPLIT

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
    if smallest < min(task.min_eval_batch, MIN_BATCH_STATISTICS_SPLIT):
        fix = " ".join(f"--config.model.{k}={v}" for k, v in contract.batch_statistics_fix(task.module).items())
        problems.append(f"data.name={config.data.name!r}: a split of {smallest} examples; model {config.model.name!r} "
                        f"normalises with the statistics of the batch it is given at test time, and a batch under "
                        f"{MIN_BATCH_STATISTICS_SPLIT} examples scores another, worse model. Use more examples"
                        f"{' (data.kwargs)' if not data_module(config) else ''}, or the model without test-time "
                        f"batch statistics{': ' + fix if fix else ''}.")
    groups = dict(task.spec.group_sizes)
    unknown = sorted(set(config.sampler.groups) - set(groups))
    for g in unknown:
        problems.append(f"sampler.groups.{g}={config.sampler.groups[g]!r}: model {config.model.name!r} has no neuron "
                        f"group {g!r}{close_matches(g, sorted(groups))}; its groups are {sorted(groups)}.")
    if not sampler_ok:  # an unknown algorithm or sampler is reported already
        return
    caps = ALGORITHMS.get(config.algorithm.name).capabilities
    if caps.needs is ModelNeeds.NEURON_GROUPS and not groups:
        problems.append(f"algorithm.name={config.algorithm.name!r} with model.name={config.model.name!r}: the model "
                        f"has no neuron group, so it would train as local SGD. {task.no_groups_reason} Or use "
                        f"algorithm.name='local_sgd'.")
    if caps.needs is ModelNeeds.DEPTH_SPLIT:
        _check_resist(config, task, problems)
        return
    if not caps.samples_partition or unknown or not groups:
        return
    try:
        make_sampler(config).slots(groups, int(config.num_workers))
    except ValueError as e:
        where = f"sampler.name={config.sampler.name!r}" + (f", sampler.groups={to_dict(config.sampler.groups)!r}"
                                                 if len(config.sampler.groups) else "")
        problems.append(f"{_sizes_text(config)} with num_workers={config.num_workers} and {where}: "
                        f"{config_terms(e)}")


def get_field(config, field: str):
    """The value of a dotted ``field`` (``"runtime.mode"``) of ``config``."""
    v = config
    for part in field.split("."):
        v = v[part]
    return v
