"""The schema check of a run config: every field known, every name a registry entry, every number in range.

`check` reports *every* problem at once, each with the field, the value and the fix. It knows nothing of what a value
means for a model, a dataset or a runtime: those refusals are made by the library where the thing is built, and
`istjax.launch.config.build` reports them in the config's terms.
"""

from __future__ import annotations

import math

import ml_collections

from istjax.algorithms import ALGORITHMS
from istjax.core.process import process_count
from istjax.core.partition import SAMPLERS
from istjax.data.cluster_batches import FULL_GRAPH, GRAPH_BATCHES
from istjax.core.precision import DTYPES, EXCHANGE_VALUES
from istjax.launch.config.fields import (OPTIMIZERS, ConfigError, close_matches, data_module, default_config, flat_dict,
                                         get_field, to_dict)
from istjax.launch.config.federated import SPLITS, is_federated
from istjax.launch.config.migrate import renamed

__all__ = ["check", "schema_problems", "Problems"]


# The runtime section's fields every runtime honours (the driver reads them), never refused as unread.
DRIVER_RUNTIME_FIELDS = ("name", "memory_limit", "slow_rank", "slow_factor")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Problems:
    """The problems the schema check finds (``list``, each naming the field and the value) and the fields they
    name (``fields``: `build` skips a library call that reads one, rather than report it twice)."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.config, self.list, self.fields = config, [], set()

    def add(self, problem: str) -> None:
        self.list.append(problem)

    def bad(self, field: str, msg: str) -> None:
        self.fields.add(field)
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


def check(config: ml_collections.ConfigDict) -> None:
    """Checks ``config``'s schema; raises `ConfigError` listing every problem found.

    Unknown fields (with close matches) and the flat names of earlier versions, names that pick a registry entry or
    a policy, types and ranges of every number. What a value means for the model, the data or the runtime is checked
    where that thing is made, and reported by `istjax.launch.config.build` in the config's terms.
    """
    schema_problems(config).raise_any()


def schema_problems(config: ml_collections.ConfigDict) -> Problems:
    """`check`'s problems, not raised; raises at once only for unknown or missing fields (every other check reads
    the fields a config must have)."""
    p = Problems(config)
    _check_known_fields(config, p)
    p.raise_any()
    _check_names(config, p)
    _check_numbers(config, p)
    _check_data_fields(config, p)
    _check_clients(config, p)
    _check_algorithm_options(config, p)
    return p


def _check_known_fields(config, p: Problems) -> None:
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
    optional = ("model.", "sampler.min_units", "sampler.num_owners", "sampler.weights", "sampler.fractions",
                "sampler.shuffle")
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


def _check_names(config, p: Problems) -> dict[str, bool]:
    """Every field that names a registry entry or a policy; which of the algorithm, dataset and sampler are known."""
    import istjax.data as data_lib

    ok = {"algorithm": p.choice("algorithm.name", ALGORITHMS.names()),
          "dataset": _check_data_name(config, p),
          "sampler": p.choice("sampler.name", SAMPLERS.names())}
    p.choice("data.sharding", data_lib.SHARDINGS)
    p.choice("optimizer", OPTIMIZERS)
    p.choice("algorithm.optimizer_state", ("reset", "carry"))
    p.choice("algorithm.model_state", ("carry", "recompute"))
    for field, choices in (("compute_dtype", DTYPES), ("exchange_dtype", DTYPES), ("exchange_values", EXCHANGE_VALUES)):
        p.choice(field, choices)
    for g, s in config.sampler.groups.items():
        if s not in SAMPLERS:
            p.bad(f"sampler.groups.{g}", f"unknown sampler{close_matches(str(s), SAMPLERS.names())}; choose one "
                                         f"of {SAMPLERS.names()}.")
            ok["sampler"] = False
    return ok


def _check_data_name(config, p: Problems) -> bool:
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
        p.fields.add("data.name")
        p.add(f"data.name={name!r} with data.module={spec!r}: {name!r} names a dataset istjax ships, but data.module "
              f"loads your own; give yours its own name, e.g. --config.data.name={fn}.")
        return False
    return True


def _check_numbers(config, p: Problems) -> None:
    """Counts, the learning rate and its schedule, the target, the runtime's own fields."""
    import istjax.runtimes as runtimes

    for field in ("num_workers", "local_steps", "batch_size", "num_rounds", "eval_every", "checkpoint_every",
                  "max_to_keep", "eval_batch_size"):
        p.positive(field)
    if p.choice("runtime.name", runtimes.names()):
        _check_runtime_options(config, p, runtimes.get(config.runtime.name).config_options)
    if not _is_int(config.eval_train_examples) or config.eval_train_examples < 0:
        p.bad("eval_train_examples", "must be an integer >= 0 (0: the whole training set).")
    if not _is_int(config.loss_split_every) or config.loss_split_every < 0:
        p.bad("loss_split_every", "must be an integer >= 0 (0: the loss split on evaluation rounds only; n: every "
                                  "n-th round too).")
    if not _is_int(config.seed):
        p.bad("seed", "must be an integer.")
    if not _is_int(config.runtime.slow_rank) or config.runtime.slow_rank < -1:
        p.bad("runtime.slow_rank", "must be a process's rank (0, 1, ...) or -1 for no straggler.")
    elif config.runtime.slow_rank >= process_count():
        p.bad("runtime.slow_rank", f"this run has {process_count()} process(es), ranks 0..{process_count() - 1}; "
                                   f"pick one of them, or -1 for no straggler.")
    if not _is_number(config.runtime.slow_factor) or not 1 <= config.runtime.slow_factor < 1000:
        p.bad("runtime.slow_factor", "must be a number >= 1, e.g. 2.0 (that process runs twice as slow).")
    lr = config.learning_rate
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
        p.bad("learning_rate", "must be a positive finite number, e.g. 0.1.")
    if not isinstance(config.momentum, (int, float)) or not 0 <= config.momentum < 1:
        p.bad("momentum", "must be in [0, 1), e.g. 0.9.")
    _check_schedule(config, p.bad, p.choice)
    _check_target(config, p)


def _check_target(config, p: Problems) -> None:
    """The run's one target (`istjax.launch.config.target`): an accuracy fraction or a positive loss, not both, and
    one whenever ``stop_at_target`` is set."""
    t, loss = config.target_accuracy, config.target_loss
    if t is not None and (not isinstance(t, (int, float)) or not 0 < t <= 1):
        p.bad("target_accuracy", "must be a fraction in (0, 1], e.g. 0.95, or unset.")
    if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool) or not math.isfinite(loss)
                             or loss <= 0):
        p.bad("target_loss", "must be a positive finite loss (reached at or below it), e.g. 2.0, or unset.")
    elif loss is not None and t is not None:
        p.bad("target_loss", f"set with target_accuracy={t!r}, and a run has one target: keep one, with "
                             f"--config.target_accuracy=None (race to the loss) or --config.target_loss=None (to the "
                             f"accuracy).")
    if not isinstance(config.stop_at_target, bool):
        p.bad("stop_at_target", "must be True or False.")
    elif config.stop_at_target and t is None and loss is None:
        p.bad("stop_at_target", "needs a target: set --config.target_accuracy=0.9 (an accuracy, reached at or "
                                "above) or --config.target_loss=2.0 (a loss, reached at or below), or leave "
                                "stop_at_target False.")


def _check_runtime_options(config, p: Problems, reads: tuple[str, ...]) -> None:
    """A ``runtime`` field the chosen runtime does not read, set to other than its default, is refused, not ignored
    (``runtime.mode=sharded`` with ``runtime.name=simulate``)."""
    import istjax.runtimes as runtimes

    defaults = default_config().runtime
    for field in sorted(set(defaults) - {*DRIVER_RUNTIME_FIELDS, *reads}):
        if field in config.runtime and config.runtime[field] != defaults[field]:
            users = [n for n in runtimes.names() if field in runtimes.get(n).config_options]
            p.bad(f"runtime.{field}", f"runtime.name={config.runtime.name!r} does not read it, so it would change "
                                      f"nothing; it is read by runtime.name in {users}. Drop it, or set "
                                      f"--config.runtime.name={users[0] if users else '...'}.")


def _check_data_fields(config, p: Problems) -> None:
    """The data section's own fields: augmentation and graph batching (what they mean for the dataset is checked
    where the dataset is used: `istjax.data.augmented`, `istjax.graph.task.with_clusters`)."""
    from istjax.graph.clusters import METHODS

    if not isinstance(config.data.augment, bool):
        p.bad("data.augment", "must be True or False.")
    if not _is_int(config.data.augment_pad) or config.data.augment_pad < 0:
        p.bad("data.augment_pad", "must be an integer >= 0 (pixels of zero padding before the random crop).")
    f = config.data.tuning_fraction
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
        p.bad("data.tuning_fraction", "must be a fraction in [0, 1) of the training examples held out for tuning "
                                      "(0: none), e.g. 0.1.")
    _check_drift(config, p)
    if not p.choice("data.graph_batches", GRAPH_BATCHES) or config.data.graph_batches == FULL_GRAPH:
        return
    p.choice("data.cluster_method", METHODS)
    for field in ("data.num_clusters", "data.clusters_per_step"):
        p.positive(field)


def _check_drift(config, p: Problems) -> None:
    """``data.drift_round``: 0 (off) or a round (it may lie beyond ``num_rounds``: a run resumed for more rounds
    crosses it); ``data.drift_seed`` an integer >= 0."""
    at, seed = config.data.drift_round, config.data.drift_seed
    if not _is_int(at) or at < 0:
        p.bad("data.drift_round", "must be an integer >= 0: the round from which the labels are permuted (0: no "
                                  "drift).")
    if not _is_int(seed) or not 0 <= seed < 2**32:
        p.bad("data.drift_seed", "must be an integer in [0, 2**32): the seed of the labels' permutation.")


#: The ``algorithm`` fields a study's base config sets for every arm, which an algorithm without that choice ignores
#: (data parallel always carries its optimizer state; tensor parallel keeps no model state apart).
RUN_WIDE_ALGORITHM_FIELDS = ("optimizer_state", "model_state", "recompute_batches")


def _check_algorithm_options(config, p: Problems) -> None:
    """An ``algorithm`` field the chosen algorithm does not read (its registry entry's options), set to other than its
    default, is refused, not ignored (``algorithm.rho`` with ``algorithm.name=local_sgd``), naming the algorithms that
    read it; the run-wide ones (`RUN_WIDE_ALGORITHM_FIELDS`) excepted."""
    if config.algorithm.name not in ALGORITHMS:
        return  # an unknown algorithm: reported by the names' check
    defaults, reads = default_config().algorithm, ALGORITHMS.get(config.algorithm.name).options
    for field in sorted(set(defaults) - {"name", *reads, *RUN_WIDE_ALGORITHM_FIELDS}):
        if field in config.algorithm and config.algorithm[field] != defaults[field]:
            users = [n for n in ALGORITHMS.names() if field in ALGORITHMS.get(n).options]
            p.bad(f"algorithm.{field}", f"algorithm.name={config.algorithm.name!r} does not read it, so it would "
                                        f"change nothing; it is read by algorithm.name in {users}. Drop it, or set "
                                        f"--config.algorithm.name={users[0] if users else '...'}.")


def _check_clients(config, p: Problems) -> None:
    """The ``clients`` section: read by a federated algorithm only (`is_federated`; a field set for another one would
    change nothing, and is refused), each split's own fields by that split only; names and ranges. What the values
    mean for the data (a split that does not fit its examples, ``num_workers`` against the clients drawn a round) is
    refused where the clients and the algorithm are made (`istjax.launch.config.federated`)."""
    if config.algorithm.name not in ALGORITHMS:
        return  # an unknown algorithm: reported by the names' check
    defaults = default_config().clients
    changed = [f for f in sorted(defaults) if f in config.clients and config.clients[f] != defaults[f]]
    if not is_federated(config):
        users = [n for n in ALGORITHMS.names() if "clients" in ALGORITHMS.get(n).options]
        for f in changed:
            p.bad(f"clients.{f}", f"algorithm.name={config.algorithm.name!r} does not read the clients section, so it "
                                  f"would change nothing; federated algorithms do ({', '.join(users)}). Drop it, or "
                                  f"set --config.algorithm.name={users[0] if users else '...'}.")
        return
    if not p.choice("clients.split", SPLITS):
        return
    split = config.clients.split
    for f in (f for fs in SPLITS.values() for f in fs if f not in SPLITS[split] and f in changed):
        user = next(s for s, fs in SPLITS.items() if f in fs)
        p.bad(f"clients.{f}", f"clients.split={split!r} does not read it, so it would change nothing; it is read by "
                              f"clients.split={user!r}. Drop it, or set --config.clients.split={user}.")
    if split == "natural" and "num_clients" in changed:
        p.bad("clients.num_clients", "clients.split='natural' takes its clients from the data set (data.name's own: "
                                     "FSDD's speakers, Shakespeare's roles), so their number is the data's; drop "
                                     "clients.num_clients, or draw that many clients (--config.clients.split=iid).")
    for f in (*(() if split == "natural" else ("num_clients",)), "epochs",
              *(("shards_per_client",) if split == "shards" else ())):
        p.positive(f"clients.{f}")
    alpha = config.clients.alpha
    if split == "dirichlet" and (not _is_number(alpha) or not 0 < alpha < math.inf):
        p.bad("clients.alpha", "the Dirichlet concentration must be a number > 0, e.g. --config.clients.alpha=0.1 "
                               "(strong skew) or 0.5.")
    if split == "dirichlet" and (not _is_int(config.clients.min_size) or config.clients.min_size < 0):
        p.bad("clients.min_size", "must be an integer >= 0 (the fewest examples a client may hold), e.g. 10.")
    if not _is_int(config.clients.get("max_examples", 0)) or config.clients.get("max_examples", 0) < 0:
        p.bad("clients.max_examples", "must be an integer >= 1 (the most examples a client holds; a bigger one keeps "
                                      "a random subset), or 0 (no bound), e.g. --config.clients.max_examples=64.")
    f = config.clients.fraction
    if not _is_number(f) or not 0 <= f <= 1:
        p.bad("clients.fraction", "must be a fraction in (0, 1] of the clients drawn each round, or 0 (num_workers "
                                  "clients a round), e.g. --config.clients.fraction=0.1.")
    b = config.clients.batch_size
    if not isinstance(b, str) and (not _is_int(b) or b < 0):
        p.bad("clients.batch_size", "give each client step's examples, e.g. --config.clients.batch_size=10, or all "
                                    "(--config.clients.batch_size=all: each epoch one full-batch step), or 0 (the "
                                    "run's batch_size).")
    _check_federated_data(config, p)


def _check_federated_data(config, p: Problems) -> None:
    """The data fields a federated run cannot honour: a client reads its own examples (no shared sharding), as
    example batches (no Cluster-GCN subgraphs), not augmented."""
    name = f"algorithm.name={config.algorithm.name!r}"
    if config.data.sharding != "disjoint":
        p.bad("data.sharding", f"{name} trains each client on its own examples (clients.split), not on a shard of "
                               f"one set; drop it (--config.data.sharding=disjoint).")
    if config.data.graph_batches != FULL_GRAPH:
        p.bad("data.graph_batches", f"{name} draws example batches from each client's examples, not Cluster-GCN "
                                    f"subgraphs; drop it (--config.data.graph_batches={FULL_GRAPH}).")
    if config.data.augment is True:
        p.bad("data.augment", f"{name} does not augment its clients' batches; drop it (--config.data.augment=False).")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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
    for field in ("warmup_rounds", "lr_schedule_rounds", "lr_reference_batch"):
        if not _is_int(config[field]) or config[field] < 0:
            bad(field, "must be an integer >= 0.")
    tc = config.trust_coefficient
    if not _is_number(tc) or not math.isfinite(tc) or tc < 0:
        bad("trust_coefficient", "must be a finite number >= 0 (0: the optimizer's own, lars 0.001, lamb 1.0).")
