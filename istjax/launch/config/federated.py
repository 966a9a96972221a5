"""The federated steps of `istjax.launch.config.build`: the config's ``clients`` section made into the clients of a
run, for an algorithm whose registry entry takes ``clients`` (`is_federated`: fedavg, fedsgd, fedist).

In order, each under the `Collector` with the fields behind its arguments, so a refusal names ``--config.clients.*``:

1. the split (`istjax.data.clients`: ``iid``, ``dirichlet`` or ``shards`` of the training labels, seeded by
   ``seed``; or ``natural``: the data set's own clients, `istjax.data.natural_clients.natural_split`, their number
   the data's, so ``clients.num_clients`` is not read), with ``clients.max_examples`` > 0 each client bounded at
   that many examples (`istjax.data.clients.capped`);
2. the sampler (`istjax.data.client_batches.client_sampler`): ``clients.fraction`` of the clients a round, or, at
   0, ``num_workers`` of them; in S slots (`client_slots`): M, or on a runtime of P processes (``runtime.name=mpi``
   under ``mpiexec -n P``) M rounded up to a multiple of P, the slots past the M clients padding that trains
   nothing (so 3 clients a round run on 2 processes in 4 slots);
3. the clients' batch function (`istjax.data.client_batches.make_client_batch_fn`) for every slot: its K, ``epochs
   * ceil(largest client / B)``, is the algorithm's ``local_steps`` (the config's is not used).

The algorithm is then built with ``clients=`` the sampler and ``local_steps=`` K; the run's batch function is the
one of step 3, rebuilt for this process's slots when `istjax.launch.config.own_rows` says so (`client_batches`).
That ``num_workers`` equals the slots S is the algorithm's own check (`istjax.algorithms.federated`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import ml_collections

from istjax.algorithms import ALGORITHMS
from istjax.data import clients as clients_lib
from istjax.data.client_batches import ClientBatchFn, ClientSampler, client_sampler, make_client_batch_fn
from istjax.data.clients import ClientSplit
from istjax.data.natural_clients import natural_split
from istjax.launch.config.collect import FAILED, Collector

__all__ = ["SPLITS", "Clients", "is_federated", "client_batch_size", "client_slots", "clients_text",
           "local_steps_text", "make_clients", "client_batches"]

#: The splits ``clients.split`` names, each with the ``clients`` fields it reads besides ``num_clients``.
SPLITS = {"iid": (), "dirichlet": ("alpha", "min_size"), "shards": ("shards_per_client",), "natural": ()}


class Clients(NamedTuple):
    """A federated run's clients, built once (`make_clients`).

    Attributes:
      split: the training set's clients (`istjax.data.clients.ClientSplit`).
      sampler: the clients of each round (`istjax.data.client_batches.ClientSampler`), the algorithm's ``clients``.
      batch_fn: every slot's batches (`istjax.data.client_batches.ClientBatchFn`); its ``local_steps`` is K.
    """

    split: ClientSplit
    sampler: ClientSampler
    batch_fn: ClientBatchFn

    @property
    def local_steps(self) -> int:
        return int(self.batch_fn.local_steps)

    def to_record(self) -> dict[str, Any]:
        """What the run records (``summary.json``'s ``clients``): the split's and the sampler's records, the local
        work (E, B, K, the largest client) and the one-line description the run prints."""
        fn = self.batch_fn
        return {"split": self.split.to_record(), "sampler": self.sampler.to_record(), "epochs": int(fn.epochs),
                "batch_size": int(fn.batch_size), "local_steps": int(fn.local_steps),
                "max_client_size": int(fn.max_client_size), "describe": self.split.describe()}


def is_federated(config: ml_collections.ConfigDict) -> bool:
    """Whether the config's algorithm reads the ``clients`` section: its registry entry takes ``clients``."""
    name = config.algorithm.name
    return name in ALGORITHMS and "clients" in ALGORITHMS.get(name).options


def client_batch_size(config: ml_collections.ConfigDict) -> Any:
    """B as the batch function takes it: ``clients.batch_size``, or the run's ``batch_size`` where it is 0."""
    b = config.clients.batch_size
    return int(config.batch_size) if b == 0 and not isinstance(b, bool) else b


def clients_text(config: ml_collections.ConfigDict) -> str:
    """The clients as a message names them: the split, its own fields and the fraction drawn a round."""
    reads = (*(() if config.clients.split == "natural" else ("num_clients",)), *SPLITS.get(config.clients.split, ()),
             *(("max_examples",) if config.clients.get("max_examples") else ()), "fraction")
    return f"clients.split={config.clients.split!r} with " + ", ".join(
        f"clients.{f}={config.clients[f]!r}" for f in reads)


def local_steps_text(config: ml_collections.ConfigDict) -> str:
    """Where a federated algorithm's K comes from, for messages (the config's ``local_steps`` is not used)."""
    return (f"clients.epochs={config.clients.epochs!r} and clients.batch_size={config.clients.batch_size!r} (K = "
            f"epochs x ceil(largest client / batch size))")


def _per_round_field(config: ml_collections.ConfigDict) -> str:
    """The field that sets the clients drawn a round: ``clients.fraction``, or ``num_workers`` where it is 0."""
    return "clients.fraction" if config.clients.fraction else "num_workers"


_SPLIT_FIELDS = {"kind": "clients.split", "labels": "data.name", "num_clients": "clients.num_clients",
                 "alpha": "clients.alpha", "min_size": "clients.min_size",
                 "shards_per_client": "clients.shards_per_client", "seed": "seed", "dataset": "data.name",
                 "max_examples": "clients.max_examples"}


def _split(config: ml_collections.ConfigDict, dataset) -> ClientSplit:
    """The split ``clients.split`` names, of the training labels, seeded by ``seed``; its clients bounded at
    ``clients.max_examples`` where that is set."""
    name = config.clients.split
    if name == "natural":
        split = natural_split(dataset)
    else:
        options = {f: config.clients[f] for f in SPLITS[name]}
        split = getattr(clients_lib, name)(dataset.train_y, int(config.clients.num_clients), seed=int(config.seed),
                                           **options)
    cap = config.clients.get("max_examples", 0)
    return split if cap == 0 and not isinstance(cap, bool) else clients_lib.capped(split, cap, int(config.seed))


def client_slots(config: ml_collections.ConfigDict, clients_per_round: int) -> int:
    """S, the slots of ``clients_per_round`` clients a round: that many on one process; on a runtime of P processes
    (``runtime.name=mpi``, P from the launch, `istjax.core.process.process_count`), rounded up to a multiple of P,
    so that every process runs as many slots (``num_workers`` must then be S)."""
    import istjax.runtimes as runtimes
    from istjax.core.process import process_count

    multi = config.runtime.name in runtimes.names() and runtimes.get(config.runtime.name).multi_process
    p = process_count() if multi else 1
    return -(-clients_per_round // p) * p


def _sampler(config: ml_collections.ConfigDict, split: ClientSplit) -> ClientSampler:
    """The clients a round (``clients.fraction`` of them, or ``num_workers``) in `client_slots` slots."""
    per_round = ({"fraction": float(config.clients.fraction)} if config.clients.fraction
                 else {"clients_per_round": int(config.num_workers)})
    sampler = client_sampler(split, seed=int(config.seed), **per_round)
    slots = client_slots(config, sampler.clients_per_round)
    return sampler if slots == sampler.slots else client_sampler(split, seed=int(config.seed), slots=slots,
                                                                 **per_round)


def _batch_fields(config: ml_collections.ConfigDict) -> dict[str, Any]:
    return {"batch_size": "clients.batch_size", "epochs": "clients.epochs", "seed": "seed", "split": "clients.split",
            "clients_per_round": _per_round_field(config), "dataset": "data.name", "workers": "num_workers"}


def _batch_fn(config, dataset, split: ClientSplit, sampler: ClientSampler,
              rows: Optional[tuple[int, int]] = None) -> ClientBatchFn:
    return make_client_batch_fn(dataset, split, sampler, epochs=int(config.clients.epochs),
                                batch_size=client_batch_size(config), seed=int(config.seed), workers=rows)


def make_clients(config: ml_collections.ConfigDict, dataset, c: Collector):
    """Steps 1 to 3 (module docstring): the run's `Clients`, or `FAILED` with the refusal recorded in ``c``."""
    split = c.step(lambda: _split(config, dataset), _SPLIT_FIELDS, clients_text(config), inputs=(dataset,))
    sampler = c.step(lambda: _sampler(config, split),
                     {"fraction": "clients.fraction", "clients_per_round": _per_round_field(config),
                      "split": "clients.min_size" if config.clients.split == "dirichlet" else "clients.split",
                      "seed": "seed"}, clients_text(config), inputs=(split,))
    batch_fn = c.step(lambda: _batch_fn(config, dataset, split, sampler), _batch_fields(config), clients_text(config),
                      inputs=(split, sampler))
    return FAILED if batch_fn is FAILED else Clients(split, sampler, batch_fn)


def client_batches(config: ml_collections.ConfigDict, dataset, clients, task, rows: Optional[tuple[int, int]],
                   c: Collector):
    """The run's batch function of ``clients``: every slot's (`make_clients`), or rebuilt for ``rows`` (an MPI
    rank's slots, `istjax.launch.config.own_rows`); with a dropout key per slot and step for a model with dropout
    (its batches then hold every slot's rows, the runtime keeping its own, as `batch_fn_for`'s keyed batches do)."""
    from istjax.core import contract
    from istjax.data.augment import with_step_keys

    if clients is FAILED or task is FAILED:
        return FAILED if clients is FAILED else clients.batch_fn
    keyed = contract.dropout_rate(task.module) > 0
    batch_fn = clients.batch_fn
    if rows is not None and not keyed:
        batch_fn = c.step(lambda: _batch_fn(config, dataset, clients.split, clients.sampler, rows),
                          _batch_fields(config), clients_text(config))
    return with_step_keys(batch_fn, int(config.seed)) if keyed and batch_fn is not FAILED else batch_fn
