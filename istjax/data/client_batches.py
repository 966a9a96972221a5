"""Federated client sampling and the sampled clients' local batches (issue 58; McMahan et al. 2017,
"Communication-Efficient Learning of Deep Networks from Decentralized Data", arXiv 1602.05629, Algorithm 1: each
round a fraction C of the clients, each running E epochs of its own data at batch size B).

A federated round is a replicated round whose S worker *slots* hold the M clients sampled this round: slot m runs
client ``ids(r)[m]``. S is M unless the sampler is built with more slots (``slots=``: W workers that must split
evenly over P processes, ``mpiexec -n 2`` running 3 clients in 4 slots): the S - M *pad slots* after the drawn
clients hold `PAD` as their id, weight 0 at the server and every step's examples weight 0, so they train nothing
and count for nothing (a pad slot's batches are the round's first drawn client's examples, so batch statistics
see real data). Both pieces here are pure functions of ``(seed, round_index)``, so a resumed run draws the same
clients and the same examples with nothing to checkpoint:

* `ClientSampler` (built by `client_sampler`): the clients of round r, ``ids(r) -> [S] int32`` (the M drawn ones
  distinct and ascending, then the pads), and the server's weights ``weights(r) -> [S] float32`` (their example
  counts over their sum; 0 for a pad).
* `make_client_batch_fn`: ``batches(r) -> {"x": [S, K, B, ...] float32, "y": [S, K, B] int32, "weight": [S, K,
  B] float32}``, the slots' local steps, called as `istjax.data.batching.BatchFn` is.

The local-work contract. Client c holds ``n_c`` examples, ``n_max`` the split's largest. Each epoch is a fresh
permutation of the client's examples cut into ``s_c = ceil(n_c / B)`` steps (the last one partial); its E epochs
are its first ``E * s_c`` steps. Every round has the same ``K = E * ceil(n_max / B)`` steps (one static shape for
the run), so a smaller client's unused positions, the rest of each epoch's partial last step and every step after
its ``E * s_c``-th, are FILLED with repeats of its own examples (batch statistics see real data) with weight 0 (a
step whose weights sum to 0 changes nothing in `istjax.algorithms.base.local_train`). Over a round every example
of a sampled client appears exactly E times with weight 1. ``batch_size="all"``: B = ``n_max``, each epoch one
full-batch step.

Keys. The clients of round r: ``sort(permutation(fold_in(clients_key(sampler.seed), r), N)[:M])``
(`istjax.core.streams.clients_key`), then S - M pads. Client c's epoch e of round r: ``perm =
argsort(where(arange(n_max) < n_c, bits(k, [n_max], uint32), 2**32 - 1), stable)[:n_c]``, ``k =
fold_in(fold_in(fold_in(stream_key(seed), r), c), e)``: a uniform permutation of ``[0, n_c)`` (the stable sort
breaks a tie, at odds of about ``n_c**2 / 2**33``), built for any ``n_c`` under one static shape. Step t,
position b of the slot: ``e = (t // s_c) % E``, ``p = (t % s_c) * B + b``, example ``indices_c[perm[p % n_c]]``,
weight 1 iff ``t < E * s_c`` and ``p < n_c``. A pad slot draws the round's first client's examples (its keys too),
every weight 0.

Memory: the training set and one int32 per held example (the clients' indices, concatenated) on device; a round's
batch is ``S * K * B`` examples, whatever the clients' sizes, so a client far bigger than the rest pads every other
one (refused past `MAX_ROUND_BYTES`).

Example::

    >>> import numpy as np
    >>> from istjax.data.clients import ClientSplit
    >>> split = ClientSplit("groups", None, (np.arange(2), np.arange(2, 6), np.arange(6, 12)), 12)
    >>> sampler = client_sampler(split, clients_per_round=2, seed=0)
    >>> ids = sampler.ids(3)
    >>> [int(i) for i in ids] == sorted(set(int(i) for i in ids))
    True
    >>> float(sampler.weights(3).sum())
    1.0
    >>> padded = client_sampler(split, clients_per_round=2, seed=0, slots=4)  # 2 clients in 4 slots
    >>> [int(i) for i in padded.ids(3)][2:], [float(w) for w in padded.weights(3)][2:]
    ([-1, -1], [0.0, 0.0])
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import as_round as _as_round
from istjax.core.streams import check_positive, check_seed, clients_key
from istjax.core.streams import is_traced as _is_traced
from istjax.core.streams import stream_key as _stream_key
from istjax.data.batching import Batch, _check_rows, _gather
from istjax.data.clients import ClientSplit
from istjax.data.dataset import Dataset

__all__ = ["ALL", "MAX_ROUND_BYTES", "PAD", "ClientBatchFn", "ClientSampler", "client_sampler", "make_client_batch_fn"]

#: ``batch_size="all"``: B = the largest client's size, each epoch one full-batch step.
ALL = "all"
#: A round's padded ``x`` batch, ``M * K * B`` examples as float32, is refused past this many bytes (4 GiB).
MAX_ROUND_BYTES = 2**32
#: The id of a pad slot (a slot past the M clients drawn: weight 0, trains nothing), in `ClientSampler.ids`.
PAD = -1


def _draw_ids(key: jax.Array, round_index: jax.Array, num_clients: int, count: int, slots: int) -> jax.Array:
    """``[slots] int32``: ``count`` distinct client ids in ascending order, drawn without replacement, then
    ``slots - count`` times `PAD` (traceable)."""
    perm = jax.random.permutation(jax.random.fold_in(key, round_index), num_clients)
    drawn = jnp.sort(perm[:count]).astype(jnp.int32)
    return jnp.concatenate([drawn, jnp.full((slots - count,), PAD, jnp.int32)])


_jit_ids = jax.jit(_draw_ids, static_argnums=(2, 3, 4))


@dataclasses.dataclass(frozen=True, eq=False)
class ClientSampler:
    """The clients of each round, a pure function of ``(seed, round_index)`` (module docstring); stateless, so a
    resumed run draws the same clients. Built by :func:`client_sampler`.

    Attributes:
      num_clients: N, the split's clients.
      clients_per_round: M, the clients drawn each round.
      fraction: C when M was given as a fraction (``M = max(1, round(C * N))``, halves up), else None.
      seed: the draw's seed.
      sizes: ``[N] int64``, each client's examples (read-only, from the split).
      slots: S >= M, the federated round's worker slots: the M drawn clients, then S - M pads (module docstring).
    """

    num_clients: int
    clients_per_round: int
    fraction: Optional[float]
    seed: int
    sizes: np.ndarray
    slots: int

    @property
    def key(self) -> jax.Array:
        return clients_key(self.seed)

    def ids(self, round_index: Any) -> jax.Array:
        """``[S] int32``: each slot's client in round ``round_index``: the M drawn, distinct and ascending, then
        S - M times `PAD` (traceable in the round)."""
        r = _as_round(round_index)
        draw = _draw_ids if _is_traced(r) else _jit_ids
        return draw(self.key, r, self.num_clients, self.clients_per_round, self.slots)

    def weights(self, round_index: Any) -> jax.Array:
        """``[S] float32``: the server's weights of round ``round_index``, the drawn clients' example counts over
        their sum (summing to 1), in the order of :meth:`ids`; 0 for a pad slot."""
        ids = self.ids(round_index)
        n = jnp.where(ids == PAD, 0.0, jnp.asarray(self.sizes, jnp.float32)[jnp.maximum(ids, 0)])
        return n / jnp.sum(n)

    def to_record(self) -> dict[str, Any]:
        """What a run records (JSON values); with the split's own record, the clients of every round."""
        record = {"clients_per_round": self.clients_per_round, "num_clients": self.num_clients,
                  "fraction": self.fraction, "seed": self.seed, "slots": self.slots}
        json.dumps(record)
        return record

    def __repr__(self) -> str:
        given = f"fraction={self.fraction:g}" if self.fraction is not None else "clients_per_round"
        pads = f" in {self.slots} slots" if self.slots != self.clients_per_round else ""
        return (f"ClientSampler({self.clients_per_round} of {self.num_clients} clients a round ({given}){pads}, "
                f"seed={self.seed})")


def client_sampler(split: ClientSplit, *, fraction: Optional[float] = None, clients_per_round: Optional[int] = None,
                   seed: int, slots: Optional[int] = None) -> ClientSampler:
    """The sampler of ``split``'s clients: each round M of its N clients, without replacement, in S slots.

    Args:
      split: the clients (`istjax.data.clients.ClientSplit`); every client must hold an example.
      fraction: C in (0, 1]: ``M = max(1, round(C * N))`` (halves rounded up). Give this or ``clients_per_round``.
      clients_per_round: M in [1, N].
      seed: the draw's seed, in ``[0, 2**32)``.
      slots: S >= M, the round's worker slots (the algorithm's ``num_workers``); the S - M after the drawn clients
        are pads that train nothing (module docstring). None: M. More slots than clients let M clients run on P
        processes when P does not divide M (S = M rounded up to a multiple of P).

    Raises:
      ArgError: both or neither of ``fraction`` and ``clients_per_round``, either out of range, fewer slots than
        clients, a client with no examples, or a bad seed.
    """
    if not isinstance(split, ClientSplit):
        raise ArgError("split", type(split).__name__, f"split is a {type(split).__name__}, not a ClientSplit;",
                       "make one with istjax.data.clients (iid, dirichlet, shards or by_group).")
    sizes = split.sizes
    empty = np.flatnonzero(sizes == 0)
    if empty.size:
        raise ArgError("split", int(empty[0]), f"client {int(empty[0])} of the split holds no examples ({empty.size} "
                                               f"such); a sampled client trains on its own data,",
                       ("draw the split with", {"min_size": 1}, "or more, or drop the empty clients."))
    n = split.num_clients
    m = _clients_per_round(fraction, clients_per_round, n)
    s = m if slots is None else check_positive("slots", slots)
    if s < m:
        raise ArgError("slots", s, f"slots={s} is fewer than the {m} clients drawn a round; each drawn client "
                                   f"trains in a slot of its own,", use=[{"slots": m}, {"slots": None}])
    sizes.flags.writeable = False
    return ClientSampler(n, m, None if fraction is None else float(fraction), check_seed(seed), sizes, s)


def _clients_per_round(fraction: Any, clients_per_round: Any, n: int) -> int:
    """M from exactly one of ``fraction`` (C in (0, 1]) and ``clients_per_round`` (in [1, N])."""
    if (fraction is None) == (clients_per_round is None):
        both = "both" if fraction is not None else "neither"
        raise ArgError(("fraction", "clients_per_round"), (fraction, clients_per_round),
                       f"{both} of fraction and clients_per_round given; the clients of a round are set once,",
                       use=[{"fraction": 0.1}, {"clients_per_round": min(10, n)}])
    if clients_per_round is not None:
        m = check_positive("clients_per_round", clients_per_round)
        if m > n:
            raise ArgError("clients_per_round", m, f"clients_per_round={m} is more than the split's {n} clients;",
                           use={"clients_per_round": n})
        return m
    if (isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating))
            or not 0 < fraction <= 1):
        raise ArgError("fraction", fraction, f"fraction={fraction!r}: the fraction of clients drawn each round must "
                                             f"be a number in (0, 1];", use=[{"fraction": 0.1}, {"fraction": 1.0}])
    return max(1, int(math.floor(fraction * n + 0.5)))


@dataclasses.dataclass(frozen=True)
class _ClientPlan:
    """Static (hashable) shape of a round's client batches; the seeds and the split are not part of it, so equal
    shapes share compiled code."""

    num_clients: int
    clients_per_round: int
    slots: int  # S >= M: the drawn clients, then pads
    epochs: int
    batch_size: int
    max_size: int  # n_max: the split's largest client
    rows: Optional[tuple[int, int]] = None  # the slots start..stop-1 drawn (None: all S)

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.max_size // self.batch_size)

    @property
    def local_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def drawn(self) -> tuple[int, int]:
        """``(first, count)``: the slots whose batches are drawn."""
        return (0, self.slots) if self.rows is None else (self.rows[0], self.rows[1] - self.rows[0])

    def slot_ids(self, data: dict[str, jax.Array], round_index: Any) -> jax.Array:
        """``[S] int32``: every slot's client, `PAD` for a pad (traceable; `ClientSampler.ids`)."""
        return _draw_ids(data["clients_key"], _as_round(round_index), self.num_clients, self.clients_per_round,
                         self.slots)

    def clients(self, data: dict[str, jax.Array], round_index: Any) -> jax.Array:
        """``[L] int32``: the drawn slots' clients, `PAD` for a pad (traceable)."""
        first, count = self.drawn
        return self.slot_ids(data, round_index)[first:first + count]

    def indices(self, data: dict[str, jax.Array], round_index: Any) -> tuple[jax.Array, jax.Array]:
        """``([L, K, B] int32, [L, K, B] float32)``: the drawn slots' training-set example ids and weights
        (module docstring; traceable). A pad slot: the round's first client's, every weight 0."""
        r = _as_round(round_index)
        e_, b_, k_, n_max = self.epochs, self.batch_size, self.local_steps, self.max_size
        ids = self.slot_ids(data, r)
        first, count = self.drawn

        def slot(c: jax.Array) -> tuple[jax.Array, jax.Array]:
            pad = c == PAD
            c = jnp.where(pad, ids[0], c)
            n = data["sizes"][c]
            kc = jax.random.fold_in(jax.random.fold_in(data["key"], r), c)
            real = jnp.arange(n_max, dtype=jnp.int32) < n

            def epoch(e: jax.Array) -> jax.Array:  # [n_max]: a permutation of [0, n) in its first n places
                bits = jax.random.bits(jax.random.fold_in(kc, e), (n_max,), jnp.uint32)
                return jnp.argsort(jnp.where(real, bits, jnp.uint32(0xFFFFFFFF)), stable=True).astype(jnp.int32)

            perms = jax.vmap(epoch)(jnp.arange(e_, dtype=jnp.int32))  # [E, n_max]
            s = (n + b_ - 1) // b_  # the client's steps per epoch
            t = jnp.arange(k_, dtype=jnp.int32)
            p = (t % s)[:, None] * b_ + jnp.arange(b_, dtype=jnp.int32)[None, :]  # [K, B] place in the epoch
            weight = (t < e_ * s)[:, None] & (p < n) & ~pad
            pos = perms[((t // s) % e_)[:, None], p % n]
            return data["order"][data["offsets"][c] + pos], weight.astype(jnp.float32)

        return jax.vmap(slot)(ids[first:first + count])


def _batch(plan: _ClientPlan, data: dict[str, jax.Array], round_index: Any) -> Batch:
    idx, weight = plan.indices(data, round_index)
    return {**_gather(idx, data["x"], data["y"]), "weight": weight}


_jit_batch = jax.jit(_batch, static_argnums=0)
_jit_indices = jax.jit(_ClientPlan.indices, static_argnums=0)


class ClientBatchFn:
    """``batches(round_index) -> {"x": [S, K, B, ...] float32, "y": [S, K, B] int32, "weight": [S, K, B]
    float32}``, the local steps of the sampled clients' S slots (module docstring; S = M without pads). Built by
    :func:`make_client_batch_fn`.

    Called as `istjax.data.batching.BatchFn` is: ``data`` holds the device arrays (``x``, ``y``, the clients'
    indices concatenated in ``order`` with their ``offsets`` and ``sizes``, the example stream ``key`` and the
    sampler's ``clients_key``); outside a trace a call runs jitted code with ``data`` as arguments; inside your own
    jit use ``apply(data, round_index)``; ``workers=(start, stop)`` draws only those slots' rows.
    """

    def __init__(self, plan: _ClientPlan, seed: int, sampler: ClientSampler, data: dict[str, jax.Array]):
        self._plan, self.seed, self.sampler, self.data = plan, seed, sampler, data

    num_workers = property(lambda self: self._plan.slots, doc="S: the round's client slots (M and the pads).")
    slots = num_workers
    clients_per_round = property(lambda self: self._plan.clients_per_round, doc="M: the clients drawn a round.")
    local_steps = property(lambda self: self._plan.local_steps, doc="K = epochs * ceil(n_max / B).")
    batch_size = property(lambda self: self._plan.batch_size, doc="B (``n_max`` for ``batch_size='all'``).")
    epochs = property(lambda self: self._plan.epochs)
    max_client_size = property(lambda self: self._plan.max_size, doc="n_max: the split's largest client.")
    rows = property(lambda self: self._plan.rows, doc="The slots `(start, stop)` it draws; None: all.")

    def apply(self, data: dict[str, jax.Array], round_index: Any) -> Batch:
        """Pure, traceable form: the round's batch gathered from ``data``."""
        return _batch(self._plan, data, round_index)

    def clients(self, round_index: Any) -> jax.Array:
        """``[L] int32``: the clients its rows hold this round (``sampler.ids``, sliced to its rows; `PAD` for a
        pad slot)."""
        return self._plan.clients(self.data, round_index)

    def indices(self, round_index: Any) -> tuple[jax.Array, jax.Array]:
        """``(ids [L, K, B] int32, weight [L, K, B] float32)``: the training-set examples of the round and their
        weights (1: an example of the client's epochs; 0: a fill)."""
        r = _as_round(round_index)
        if _is_traced(r):
            return self._plan.indices(self.data, r)
        return _jit_indices(self._plan, self.data, r)

    def __call__(self, round_index: Any, workers: Optional[tuple[int, int]] = None) -> Batch:
        """The round's batches; ``workers=(start, stop)``: only those slots' rows (an MPI rank's own, equal to the
        same rows of the full call). A batch function built for some rows draws those and takes no other."""
        plan = self._plan
        if plan.rows is not None and workers not in (None, plan.rows):
            raise ArgError("workers", workers, f"this batch function draws client slots {plan.rows} only; it cannot "
                                               f"draw workers={workers}.",
                           f"Build it with make_client_batch_fn(..., workers={workers}).")
        if workers is not None and plan.rows is None:
            plan = dataclasses.replace(plan, rows=_check_rows(workers, plan.slots))
        r = _as_round(round_index)
        return _batch(plan, self.data, r) if _is_traced(r) else _jit_batch(plan, self.data, r)

    def __repr__(self) -> str:
        p = self._plan
        rows = "" if p.rows is None else f", rows={p.rows}"
        slots = "" if p.slots == p.clients_per_round else f", slots={p.slots}"
        return (f"ClientBatchFn(x={tuple(self.data['x'].shape)}, clients_per_round={p.clients_per_round} of "
                f"{p.num_clients}{slots}, epochs={p.epochs}, batch_size={p.batch_size}, local_steps={p.local_steps}, "
                f"max_client_size={p.max_size}, seed={self.seed}{rows})")

    describe = __repr__


def make_client_batch_fn(dataset: Dataset, split: ClientSplit, sampler: ClientSampler, *, epochs: int,
                         batch_size: Union[int, str], seed: int,
                         workers: Optional[tuple[int, int]] = None) -> ClientBatchFn:
    """The sampled clients' local batches of every round (module docstring): ``batches(round_index)``.

    Args:
      dataset: its ``train_x: [n, ...]`` and ``train_y: [n]`` are put on the default device once (float32 / int32).
      split: the clients, over the ``n`` training examples.
      sampler: the clients of each round, made from ``split`` (:func:`client_sampler`).
      epochs: E >= 1 passes over its data per sampled client per round.
      batch_size: B >= 1, at most the largest client's size, or ``"all"`` (B = that size).
      seed: seeds the example stream (the clients' permutations); the sampler has its own.
      workers: ``(start, stop)``: draw only these client slots, ``[stop - start, K, B, ...]`` (an MPI rank's).

    Returns:
      A :class:`ClientBatchFn`, deterministic in ``(seed, sampler.seed, round_index)`` and jit-compatible in the
      round (``jax.jit(batches)(jnp.int32(5))``).
    """
    train_x, train_y = dataset.train_x, dataset.train_y
    plan, seed = _make_plan(len(train_x), len(train_y), split, sampler, epochs, batch_size, seed)
    _check_round_bytes(plan, train_x, split)
    if workers is not None:
        plan = dataclasses.replace(plan, rows=_check_rows(workers, plan.slots))
    sizes = split.sizes
    data = {
        "x": jnp.asarray(np.asarray(train_x), jnp.float32),
        "y": jnp.asarray(np.asarray(train_y), jnp.int32),
        "order": jnp.asarray(np.concatenate(split.indices), jnp.int32),
        "offsets": jnp.asarray(np.concatenate([[0], np.cumsum(sizes)[:-1]]), jnp.int32),
        "sizes": jnp.asarray(sizes, jnp.int32),
        "key": _stream_key(seed),
        "clients_key": sampler.key,
    }
    return ClientBatchFn(plan, seed, sampler, data)


def _make_plan(num_x: int, num_y: int, split: Any, sampler: Any, epochs: Any, batch_size: Any,
               seed: Any) -> tuple[_ClientPlan, int]:
    """Validate the batch function's arguments (before any tracing); return ``(plan, seed)``."""
    if num_x != num_y:
        raise ArgError("dataset", num_x, f"dataset.train_x has {num_x} examples but train_y has {num_y};",
                       "they must match.")
    if not isinstance(split, ClientSplit):
        raise ArgError("split", type(split).__name__, f"split is a {type(split).__name__}, not a ClientSplit;",
                       "make one with istjax.data.clients (iid, dirichlet, shards or by_group).")
    if split.num_examples != num_x:
        raise ArgError("split", split.num_examples, f"the split's clients index {split.num_examples} examples but "
                                                    f"the dataset's training split has {num_x};",
                       "draw the split from this dataset's training labels.")
    if (not isinstance(sampler, ClientSampler) or sampler.num_clients != split.num_clients
            or not np.array_equal(sampler.sizes, split.sizes)):
        raise ArgError("sampler", repr(sampler), f"the sampler {sampler!r} was not made from this split of "
                                                 f"{split.num_clients} clients;",
                       "build it with client_sampler(split, ...) from the same split.")
    e = check_positive("epochs", epochs)
    n_max = int(split.sizes.max())
    return _ClientPlan(split.num_clients, sampler.clients_per_round, sampler.slots, e,
                       _batch_size(batch_size, n_max), n_max), check_seed(seed)


def _batch_size(batch_size: Any, n_max: int) -> int:
    """B from ``batch_size``: an int in ``[1, n_max]``, or ``"all"`` (``n_max``)."""
    if isinstance(batch_size, str):
        if batch_size != ALL:
            raise ArgError("batch_size", batch_size, f"batch_size={batch_size!r}: give a number of examples or "
                                                     f"'all' (each epoch one full-batch step);",
                           use=[{"batch_size": ALL}, {"batch_size": 10}])
        return n_max
    b = check_positive("batch_size", batch_size)
    if b > n_max:
        raise ArgError("batch_size", b, f"batch_size={b} is more than the largest client's {n_max} examples; every "
                                        f"step would be mostly fill,", use=[{"batch_size": ALL}, {"batch_size": n_max}])
    return b


def _check_round_bytes(plan: _ClientPlan, train_x: Any, split: ClientSplit) -> None:
    """Refuse a round whose padded batch, ``S * K * B`` examples, overflows int32 or `MAX_ROUND_BYTES`."""
    m, k, b = plan.clients_per_round, plan.local_steps, plan.batch_size
    count = plan.slots * k * b
    nbytes = count * 4 * math.prod(tuple(train_x.shape)[1:])
    if count < 2**31 and nbytes <= MAX_ROUND_BYTES:
        return
    median = float(np.median(split.sizes))
    raise ArgError(("split", "clients_per_round", "epochs"), plan.max_size,
                   f"each round pads every one of the {plan.slots} slots of clients_per_round={m} to the largest "
                   f"client's {plan.max_size} examples (median {median:g}) x epochs={plan.epochs}: {count} examples, "
                   f"{nbytes / 2**30:.1f} GiB, past {MAX_ROUND_BYTES / 2**30:g} GiB;",
                   ("split the largest clients (cap a client's examples), or lower", {"clients_per_round": ...},
                    "or", {"epochs": ...}, "."))
