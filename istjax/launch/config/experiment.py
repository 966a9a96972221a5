"""``build(config) -> Experiment``: everything a config describes, each piece made once by the library call it stands
for, in order: dataset, task, optimizer, a federated algorithm's clients (`istjax.launch.config.federated`), sampler,
algorithm bound to its runtime, batch function.

Every call runs under a `Collector`: a refusal the library makes (an `istjax.ArgError` naming its argument) is
reported under the config field that set that argument, in ``--config.`` spelling, and every step's refusal is
reported together, before anything compiles. A step whose input failed is skipped. The config's schema (unknown
fields, names, ranges) is checked first (`istjax.launch.config.check`); nothing here re-states a library refusal.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import ml_collections
import numpy as np
import optax

import istjax.data as data_lib
from istjax.algorithms import ALGORITHMS
from istjax.algorithms.base import Algorithm, ModelStatePolicy
from istjax.core import contract
from istjax.core.memory import parse_bytes
from istjax.core.task import Task, check_evaluation
from istjax.data.cluster_batches import cluster_batch_fn, clustered
from istjax.data.drift import Drift, drift_for, drifting
from istjax.launch.config.check import schema_problems
from istjax.launch.config.collect import FAILED, Collector
from istjax.launch.config.federated import (Clients, client_batches, clients_text, is_federated, local_steps_text,
                                            make_clients)
from istjax.launch.config.fields import data_module, model_fields, model_module, to_dict
from istjax.launch.config.parts import load_config_data, make_optimizer, make_sampler, make_task, record_sources

__all__ = ["Experiment", "build", "own_rows", "option_fields"]


class Experiment(NamedTuple):
    """Everything a config describes, each piece built once (`build`).

    Attributes:
      config: the checked config.
      dataset: the loaded data (with its cluster table under graph_batches='clusters').
      task: the task the algorithm trains and the driver evaluates (ResIST's carries its scaled test-time network).
      algorithm: bound to the config's runtime.
      batch_fn: ``round -> batches`` for every worker.
      clients: a federated run's clients (`istjax.launch.config.federated.Clients`: the split, the sampler, their
        K), None for every other algorithm.
      drift: the stream's concept drift (``data.drift_round``, `istjax.data.drift`): the batches' labels and the
        evaluation's follow it; None without one.
    """

    config: ml_collections.ConfigDict
    dataset: data_lib.Dataset
    task: Task
    algorithm: Algorithm
    batch_fn: data_lib.BatchFn
    clients: Optional[Clients] = None
    drift: Optional[Drift] = None


def build(config: ml_collections.ConfigDict) -> Experiment:
    """The `Experiment` ``config`` describes; `ConfigError` listing every problem, each under its field, when the
    library refuses any piece (module docstring)."""
    schema = schema_problems(config)
    record_sources(config)
    c = Collector(config, schema.list, schema.fields)
    _refuse_single_process_runtime_under_mpiexec(config, c)
    c.step(lambda: parse_bytes(config.runtime.memory_limit), {"memory_limit": "runtime.memory_limit"}, "")
    dataset = _dataset(config, c)
    task = _task(config, dataset, c)
    optimizer = c.step(lambda: make_optimizer(config), _OPTIMIZER_FIELDS, "optimizer")
    # A federated algorithm's clients (the split, the sampler, their batches) first: their K is its local_steps.
    clients = make_clients(config, dataset, c) if is_federated(config) else None
    algorithm = _algorithm(config, task, optimizer, c, clients)
    batch_fn = _batches(config, dataset, task, algorithm, c, clients)
    drift = _drift(config, dataset, c)
    c.raise_any()
    if drift is not None:
        batch_fn = drifting(batch_fn, drift)
    if getattr(batch_fn, "rows", None) is not None:  # this process holds its workers' examples, and evaluation's
        n = int(config.eval_train_examples) or len(dataset.train_y)
        clients = None if dataset.train_clients is None else dataset.train_clients[:n]
        dataset = dataset._replace(train_x=dataset.train_x[:n], train_y=dataset.train_y[:n], train_clients=clients)
    # The algorithm's own task: the one it trains and the one to evaluate (ResIST's scales its partitioned branches).
    return Experiment(config, dataset, algorithm.task, algorithm, batch_fn, clients, drift)


# ----------------------------------------------------------------------------------------------------------------
# The steps, in order. Each maps the arguments of the library call it makes to the config fields that set them.


def _dataset(config, c: Collector):
    """The dataset, with its cluster table under ``data.graph_batches='clusters'``."""
    fields = {"name": "data.name", "module": "data.module", "kwargs": "data.kwargs", "sharding": "data.sharding",
              "tuning_fraction": "data.tuning_fraction"}
    fields.update({k: f"data.kwargs.{k}" for k in config.data.kwargs})
    where = "" if data_module(config) else (f"data.kwargs={to_dict(config.data.kwargs)!r} for "
                                            f"data.name={config.data.name!r}")
    dataset = c.step(lambda: load_config_data(config), fields, where)
    if dataset is FAILED:
        return FAILED
    if config.data.graph_batches != "clusters":
        return dataset
    return c.step(lambda: _with_clusters(config, dataset),
                  {"num_clusters": "data.num_clusters", "method": "data.cluster_method",
                   "shared": "data.graph_batches", "seed": "seed"}, "data.graph_batches='clusters'")


def _drift(config, dataset, c: Collector) -> Optional[Drift]:
    """The stream's concept drift (``data.drift_round`` > 0, its permutation from ``data.drift_seed``), or None."""
    if dataset is FAILED or not config.data.drift_round:
        return None
    drift = c.step(lambda: drift_for(dataset, config.data.drift_round, config.data.drift_seed),
                   {"drift_round": "data.drift_round", "seed": "data.drift_seed"}, f"data.name={config.data.name!r}")
    return None if drift is FAILED else drift


def _with_clusters(config, dataset: data_lib.Dataset) -> data_lib.Dataset:
    """``dataset`` with the cluster table of its graph in its shared input (`istjax.graph.task.with_clusters`)."""
    from istjax.graph.task import with_clusters

    shared = dataset.shared or {}
    n = shared["graph"].num_nodes if "graph" in shared else 0
    train_idx = np.asarray(dataset.train_x).astype(np.int64) if n else None
    labels = np.zeros((n,), np.int32)
    if n:
        labels[train_idx] = dataset.train_y
    shared = with_clusters(shared, labels, train_idx, int(config.data.num_clusters),
                           method=config.data.cluster_method, seed=int(config.seed), dataset=f"data.name={config.data.name!r}")
    return dataset._replace(shared=shared)


def _sizes_text(config) -> str:
    """The model fields that set sizes (tuples and integers), as ``model.hidden=(512,)``, for messages."""
    shown = [f"model.{k}={tuple(v) if isinstance(v, (list, tuple)) else v!r}" for k, v in model_fields(config).items()
             if isinstance(v, (list, tuple)) or (isinstance(v, int) and not isinstance(v, bool))]
    return ", ".join(shown) or f"model.name={config.model.name!r}"


def _task(config, dataset, c: Collector):
    """The model (its fields checked even when the data failed) and its task on the data, whose evaluation is then
    checked against ``eval_batch_size``, ``eval_train_examples`` and the splits' sizes."""
    import istjax.models as models

    fields = {k: f"model.{k}" for k in model_fields(config)}
    fields.update({"name": "model.name", "module": "model.module", "compute_dtype": "compute_dtype"})
    num_classes = 2 if dataset is FAILED else int(dataset.num_classes)
    feature_ids = 1 if dataset is FAILED else dataset.num_feature_ids  # a placeholder, like num_classes, so the
    module = c.step(lambda: models.build_model(config.model.name, model_fields(config), num_classes=num_classes,
                                               module=model_module(config), num_feature_ids=feature_ids,
                                               label_weights=None if dataset is FAILED else dataset.label_weights,
                                               compute_dtype=config.compute_dtype),
                    fields, "")  # model's own fields are checked even when the data failed
    task = c.step(lambda: make_task(config, dataset, module), fields,
                  f"model.name={config.model.name!r} on data.name={config.data.name!r}", inputs=(module, dataset))
    sizes = {} if dataset is FAILED else {"test": len(dataset.test_y), "train": len(dataset.train_y)}
    c.step(lambda: check_evaluation(task, sizes, batch_size=int(config.eval_batch_size),
                                    train_examples=int(config.eval_train_examples)),
           {"batch_size": "eval_batch_size", "train_examples": "eval_train_examples", "dataset": "data.name"}, "",
           inputs=(task,))
    return task


_OPTIMIZER_FIELDS = {f: f for f in ("optimizer", "learning_rate", "momentum", "weight_decay", "trust_coefficient",
                                     "lr_reference_batch", "lr_schedule",
                                     "lr_decay_at", "lr_decay_factor", "warmup_rounds", "lr_schedule_rounds",
                                     "num_rounds")}
#: Factory options that are settings of the whole run, read from the config's top level, not its ``algorithm``
#: section: an algorithm that asks for one (`AlgorithmEntry.options`) gets the run's value.
RUN_OPTIONS = ("batch_size", "exchange_dtype", "exchange_values")
_SAMPLER_FIELDS = {"name": "sampler.name", "min_units": "sampler.min_units", "num_owners": "sampler.num_owners",
                   "weights": "sampler.weights", "fractions": "sampler.fractions", "shuffle": "sampler.shuffle",
                   "samplers": "sampler.groups"}


def _sampler_text(config) -> str:
    """The sampler as a message names it: its name, the options its registry entry reads, and any groups."""
    from istjax.core.partition import SAMPLERS

    shown = f"sampler.name={config.sampler.name!r}"
    options = SAMPLERS.get(config.sampler.name).options if config.sampler.name in SAMPLERS else ()
    if options:
        shown += " with " + ", ".join(f"{o}={config.sampler[o]!r}" for o in options)
    return shown + (f", sampler.groups={to_dict(config.sampler.groups)!r}" if len(config.sampler.groups) else "")


def option_fields(config, options: tuple[str, ...]) -> dict[str, Any]:
    """The config field behind each factory argument: the algorithm's options (`AlgorithmEntry.options`), the
    runtime's (its section's fields) and every factory's common ones. A value is a dotted field, or a function
    rendering several (the model's sizes; the sampler's name, owners and groups)."""
    import istjax.runtimes as runtimes

    fields: dict[str, Any] = {"num_workers": "num_workers", "local_steps": "local_steps", "backend": "runtime.name",
                              "task": "model.name", "group_sizes": _sizes_text, "sampler": _sampler_text,
                              "samplers": "sampler.groups", "num_owners": "sampler.num_owners",
                              **{o: o for o in RUN_OPTIONS}}
    if "clients" in options:  # a federated algorithm: its K and B are the clients' (the config's local_steps unused)
        fields.update({"clients": clients_text, "local_steps": local_steps_text, "batch_size": "clients.batch_size",
                       "epochs": "clients.epochs", "fraction": "clients.fraction"})
    fields.update({o: f"algorithm.{o}" for o in options if o not in fields})
    fields.update({o: f"runtime.{o}" for o in runtimes.get(config.runtime.name).config_options})
    fields.update({"min_units": "sampler.min_units", "weights": "sampler.weights", "fractions": "sampler.fractions"})
    return fields


def _option_value(config, option: str, sampler, clients) -> Any:
    """The config value behind an algorithm option: the sampler, its owner count, the clients' sampler, a setting
    of the whole run (`RUN_OPTIONS`), or the ``algorithm`` field."""
    if option == "sampler":
        return sampler
    if option == "clients":
        return FAILED if clients is FAILED else clients.sampler
    if option == "num_owners":
        return int(config.sampler.num_owners)
    if option in RUN_OPTIONS:
        return config[option]
    return config.algorithm[option]


def _algorithm(config, task, optimizer, c: Collector, clients=None):
    """The algorithm the config names, built on the task and bound to the runtime (which checks its own fit: the
    process count, the mode, what the sharded mode needs); a federated one on ``clients``, with their K."""
    import istjax.runtimes as runtimes

    if {"algorithm.name", "runtime.name"} & c.bad:  # unknown names: reported by the schema check
        return FAILED
    entry = ALGORITHMS.get(config.algorithm.name)
    fields = option_fields(config, entry.options)
    sampler = None
    if "sampler" in entry.options:
        sampler = c.step(lambda: make_sampler(config), _SAMPLER_FIELDS, _sampler_text(config))
    options = {o: _option_value(config, o, sampler, clients) for o in entry.options}
    local_steps = int(config.local_steps) if clients is None or clients is FAILED else clients.local_steps
    runtime = runtimes.get(config.runtime.name)
    launch = {o: config.runtime[o] for o in runtime.config_options}
    # The launch's refusals first (the process count, W's fit); the runtime makes them again when the algorithm is
    # bound to it, and the collector reports a problem once.
    c.step(lambda: runtime.check_launch(int(config.num_workers), **launch), fields,
           f"runtime.name={config.runtime.name!r}")
    options.update(launch)
    where = ", ".join([f"runtime.name={config.runtime.name!r}"] +
                      [f"runtime.{o}={config.runtime[o]!r}" for o in runtimes.get(config.runtime.name).config_options])
    # The factory's refusals do not depend on the optimizer's values: with a refused one, a stand-in lets them be
    # reported all the same (the algorithm itself then counts as failed).
    stand_in = optax.identity() if optimizer is FAILED else optimizer
    algorithm = c.step(lambda: entry.factory(task, stand_in, num_workers=int(config.num_workers),
                                             local_steps=local_steps, backend=config.runtime.name, **options),
                       {**fields, "algorithm": "algorithm.name"}, f"{config.algorithm.name} on {where}",
                       inputs=(task, sampler, clients))
    return FAILED if optimizer is FAILED else algorithm


def _batches(config, dataset, task, algorithm, c: Collector, clients=None):
    """The batch function: of the algorithm's task and for this process's workers (`own_rows`) when the algorithm
    was built; else of the model's task, for every worker, so that its refusals are reported all the same. A
    federated run's are its clients' (`istjax.launch.config.federated.client_batches`)."""
    built = algorithm is not FAILED
    if clients is not None:
        return client_batches(config, dataset, clients, algorithm.task if built else task,
                              own_rows(algorithm) if built else None, c)
    fields = {"batch_size": "batch_size", "num_workers": "num_workers", "local_steps": "local_steps",
              "sharding": "data.sharding", "seed": "seed", "pad": "data.augment_pad", "batch_fn": "data.augment",
              "clusters_per_step": "data.clusters_per_step"}
    return c.step(lambda: batch_fn_for(config, dataset, algorithm.task if built else task,
                                       own_rows(algorithm) if built else None), fields, "", inputs=(dataset, task))


def own_rows(algorithm: Algorithm) -> Optional[tuple[int, int]]:
    """``(start, stop)``: the workers this process runs, when it needs only their batches (several processes, a
    round called between device steps, and no collect on this process that reads every worker's batches: the
    parameter-server and replica modes recompute statistics from all of them; nor an algorithm whose every process
    reads every row, `Algorithm.reads_every_worker`); else None."""
    rt = algorithm.runtime
    if algorithm.reads_every_worker or rt.size <= 1 or rt.fusable:
        return None
    if algorithm.model_state_policy == ModelStatePolicy.RECOMPUTE and rt.whole_state:
        return None
    lanes = algorithm.num_workers // rt.size
    return rt.rank * lanes, (rt.rank + 1) * lanes


def batch_fn_for(config: ml_collections.ConfigDict, dataset: data_lib.Dataset, task: Task,
                 rows: Optional[tuple[int, int]] = None) -> data_lib.BatchFn:
    """Every worker's batches for a round: Cluster-GCN subgraphs or examples, augmented, with dropout keys. With
    ``rows`` (`own_rows`) plain example batches hold and draw only those workers'; augmented, keyed and Cluster-GCN
    batches draw every worker's (the runtime keeps a process's rows)."""
    if clustered(dataset.shared):  # Cluster-GCN mini-batches (graph_batches="clusters")
        batch_fn = cluster_batch_fn(dataset.shared, num_workers=int(config.num_workers),
                                    local_steps=int(config.local_steps),
                                    clusters_per_step=int(config.data.clusters_per_step), seed=int(config.seed))
    else:
        plain = not config.data.augment and contract.dropout_rate(task.module) == 0
        batch_fn = data_lib.make_batch_fn(dataset, num_workers=int(config.num_workers),
                                          local_steps=int(config.local_steps),
                                          batch_size=int(config.batch_size), seed=int(config.seed),
                                          sharding=config.data.sharding, workers=rows if plain else None)
    if config.data.augment:
        batch_fn = data_lib.augmented(batch_fn, pad=int(config.data.augment_pad))
    if contract.dropout_rate(task.module) > 0:  # a step key per worker and step for dropout
        batch_fn = data_lib.with_step_keys(batch_fn, int(config.seed))
    return batch_fn


def _refuse_single_process_runtime_under_mpiexec(config, c: Collector) -> None:
    """A runtime of one process, launched by mpiexec with several: every rank would train its own copy of the run
    into one workdir. Refused on every rank, before anything is written."""
    import istjax.runtimes as runtimes
    from istjax.launch.metrics import process_count

    n = process_count()
    if n > 1 and "runtime.name" not in c.bad and not runtimes.get(config.runtime.name).multi_process:
        c.add(f"runtime.name={config.runtime.name!r}: runs every worker in one process, but mpiexec launched {n} "
              f"processes: each would train its own copy of the run into the same workdir. Add "
              f"--config.runtime.name=mpi (`mpiexec -n {n} istjax train --config.runtime.name=mpi ...`), or run "
              f"`istjax train` without mpiexec.")
