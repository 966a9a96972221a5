"""Compressed exchanges: what a worker sends of a change in place of the change, with the state that makes it exact
in the long run (error feedback), written once against a mean over the workers.

A `Compressor` turns each worker's change (a gradient, a round's change of a replica, a worker's returned change of
its sub-network) into the workers' mean of an approximation of it, and keeps in each worker's state what it did not
send (the residual: error feedback, Karimireddy et al. 2019), added to its next change before compressing. Its
``exchange`` takes the rows of the workers one process holds (``[n, ...]``: all W in one process, an MPI rank's L)
and is written against `Across`, the two collectives over all W workers it needs: ``mean`` (PowerSGD's all-reduces)
and ``gather`` (top-k's all-gather of values and indices). One process's are a mean and the identity
(`one_process`, `stacked_exchange`); an MPI rank's are mpi4jax calls inside the compiled exchange
(`istjax.runtimes.mpi.replicas`). The same code runs either way, so a runtime's compressed round equals simulate's
given the same state (to the order of float32 sums).

* `powersgd` (Vogels et al. 2019, Algorithm 1 with error feedback): each matrix-shaped leaf (``[..., m]`` read as
  ``[n, m]``) sent as its rank-``r`` approximation: ``P = M Q`` averaged, orthogonalised, ``Q = M^T P`` averaged, the
  mean approximated by ``P Q^T``; ``Q`` starts from a shared seed and is warm-started from the last exchange; two
  all-reduces of ``(n + m) r`` numbers in place of ``n m``. Vectors (biases, norms) and leaves the factors would not
  shrink travel whole, averaged exactly. The first ``start_exchanges`` exchanges are uncompressed.
* `top_k`: each leaf's ``k`` largest entries by magnitude (``fraction`` of it, at least one), values and indices
  all-gathered and averaged; the rest stays in the residual.
* `identity`: the plain mean, no state (what an exchange does without compression).

Bytes (`Compressor.sent_bytes`, `Compressor.received_bytes`) are computed from the shapes, per worker per exchange,
as the MPI runtimes count the buffers they move.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError

__all__ = ["COMPRESSIONS", "Across", "Compressor", "PowerState", "compressor", "identity", "k_of", "one_process",
           "powersgd", "stacked_exchange", "top_k"]

PyTree = Any
INDEX_BYTES = 4  # an int32 index per top-k value


class Across(NamedTuple):
    """The collectives over all W workers an exchange is written against, on the ``n`` rows one process holds.

    Attributes:
      mean: ``[n, ...] -> [...]``, the mean over all W workers' rows.
      gather: ``[n, ...] -> [W, ...]``, every worker's row in worker order.
      whole: whether this exchange is one a compressor makes uncompressed (PowerSGD's first ``start_exchanges``),
        decided by the runtime on the host (an MPI rank traces one program's collectives a case); None: decided
        from the state inside the program (`jax.lax.cond`, one process).
    """

    mean: Callable[[jax.Array], jax.Array]
    gather: Callable[[jax.Array], jax.Array]
    whole: Optional[bool] = None


def one_process() -> Across:
    """`Across` when one process holds every worker's row."""
    return Across(mean=lambda x: jnp.mean(x, axis=0), gather=lambda x: x)


class Compressor(NamedTuple):
    """A compressed exchange (module docstring).

    Attributes:
      name: ``"powersgd"``, ``"top_k"`` or ``"identity"``.
      init: ``(tree, key, n) -> state``: ``n`` workers' states (leaves ``[n, ...]``) for changes shaped as ``tree``
        (arrays or `jax.ShapeDtypeStruct`); ``key`` the seed every worker shares (PowerSGD's first ``Q``).
      exchange: ``(change_n, state_n, across) -> (mean_approx, state_n)``: from ``n`` workers' changes and states
        (leaves ``[n, ...]``) and the collectives over all W (`Across`), the mean over all W workers of what they
        sent (one tree) and the ``n`` workers' next states (their residuals: what each did not send).
      sent_bytes, received_bytes: ``tree -> int``, one worker's bytes for one exchange of a tree shaped as ``tree``.
      options: the settings it was made with (``rank``, ``start_exchanges``; ``fraction``), for the reference loop
        (`istjax.algorithms.reference`) and messages.
    """

    name: str
    init: Callable[[PyTree, jax.Array, int], PyTree]
    exchange: Callable[[PyTree, PyTree, Across], tuple[PyTree, PyTree]]
    sent_bytes: Callable[[PyTree], int]
    received_bytes: Callable[[PyTree], int]
    options: dict = {}


def _zeros(tree: PyTree, n: int) -> PyTree:
    return jax.tree.map(lambda x: jnp.zeros((n, *x.shape), jnp.float32), tree)


def _nbytes(shape, dtype=jnp.float32) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def identity() -> Compressor:
    """No compression: the plain mean of the changes, no state."""
    def exchange(change_n, state_n, across):
        return jax.tree.map(across.mean, change_n), state_n

    def nbytes(tree):
        return sum(_nbytes(x.shape, x.dtype) for x in jax.tree.leaves(tree))

    return Compressor("identity", lambda tree, key, n: (), exchange, nbytes, nbytes)


# --------------------------------------------------------------------------------------------------------------
# PowerSGD


class PowerState(NamedTuple):
    """One worker's PowerSGD state: ``residual`` (what it has not sent, its change's tree), ``q`` (per leaf, the
    warm-started ``[m, r]`` factor every worker holds alike; ``()`` for a leaf sent whole) and ``exchanges`` (how
    many have been made: the first ``start_exchanges`` are uncompressed)."""

    residual: PyTree
    q: PyTree
    exchanges: jax.Array


def _as_matrix(shape) -> tuple[int, int]:
    return math.prod(shape[:-1]), shape[-1]


def _compressed(shape, rank: int) -> bool:
    """A leaf PowerSGD factors: a matrix (``ndim >= 2``) whose two factors are smaller than it."""
    if len(shape) < 2:
        return False
    n, m = _as_matrix(shape)
    return (n + m) * rank < n * m


def _orthonormal(p: jax.Array) -> jax.Array:
    """``p``'s columns orthonormalised in order (Gram-Schmidt, as the paper's: a zero column stays zero)."""
    def one(p, i):
        col = p[:, i] - p @ (jnp.where(jnp.arange(p.shape[1]) < i, 1.0, 0.0) * (p.T @ p[:, i]))
        norm = jnp.linalg.norm(col)
        return p.at[:, i].set(jnp.where(norm > 1e-12, col / jnp.maximum(norm, 1e-12), 0.0)), None

    return jax.lax.scan(one, p, jnp.arange(p.shape[1]))[0]


def powersgd(rank: int = 2, start_exchanges: int = 0) -> Compressor:
    """PowerSGD at ``rank`` (module docstring), uncompressed for the first ``start_exchanges`` exchanges.

    >>> c = powersgd(rank=1)
    >>> c.sent_bytes({"w": jax.ShapeDtypeStruct((100, 50), jnp.float32), "b": jax.ShapeDtypeStruct((50,), jnp.float32)})
    800
    """
    _check_int("rank", rank, 1, "powersgd(rank=...): the paper's 2 reaches data parallel's accuracy on its tasks")
    _check_int("start_exchanges", start_exchanges, 0, "powersgd(start_exchanges=...): 0 compresses from the first")

    def init(tree, key, n):
        leaves, treedef = jax.tree.flatten(tree)
        keys = jax.random.split(key, max(1, len(leaves)))
        qs = [jnp.broadcast_to(jax.random.normal(k, (_as_matrix(x.shape)[1], rank), jnp.float32),
                               (n, _as_matrix(x.shape)[1], rank)) if _compressed(x.shape, rank) else ()
              for k, x in zip(keys, leaves)]
        return PowerState(_zeros(tree, n), jax.tree.unflatten(treedef, qs), jnp.zeros((n,), jnp.int32))

    def one_leaf(m_n, q_n, mean, whole: bool):
        if whole or not isinstance(q_n, jax.Array):  # sent whole; Q unmoved
            return mean(m_n), jnp.zeros_like(m_n), q_n
        n = m_n.shape[0]
        m = m_n.reshape((n, *_as_matrix(m_n.shape[1:])))
        p = _orthonormal(mean(jnp.einsum("wnm,wmr->wnr", m, q_n)))  # every row's Q is the same
        q = mean(jnp.einsum("wnm,nr->wmr", m, p))
        approx = (p @ q.T).reshape(m_n.shape[1:])
        return approx, m_n - approx[None], jnp.broadcast_to(q, q_n.shape)

    def exchange_as(whole: bool):
        def exchange(change_n, state_n, across):
            leaves, treedef = jax.tree.flatten(change_n)
            res, qs = treedef.flatten_up_to(state_n.residual), treedef.flatten_up_to(state_n.q)
            outs = [one_leaf(c.astype(jnp.float32) + e, q, across.mean, whole) for c, e, q in zip(leaves, res, qs)]
            approx = jax.tree.unflatten(treedef, [o.astype(c.dtype) for (o, _, _), c in zip(outs, leaves)])
            return approx, PowerState(jax.tree.unflatten(treedef, [r for _, r, _ in outs]),
                                      jax.tree.unflatten(treedef, [q for _, _, q in outs]), state_n.exchanges + 1)

        return exchange

    compressed, whole = exchange_as(False), exchange_as(True)

    def exchange(change_n, state_n, across):
        """Uncompressed while fewer than ``start_exchanges`` were made: decided by ``across.whole`` where the
        runtime decided it (MPI, on the host: one program's collectives each), else by ``jax.lax.cond``."""
        if not start_exchanges or across.whole is False:
            return compressed(change_n, state_n, across)
        if across.whole:
            return whole(change_n, state_n, across)
        return jax.lax.cond(state_n.exchanges[0] < start_exchanges, lambda c, s: whole(c, s, across),
                            lambda c, s: compressed(c, s, across), change_n, state_n)

    def nbytes(tree):  # an all-reduce: each worker sends and receives the same count
        return sum(_nbytes(((sum(_as_matrix(x.shape)) * rank),)) if _compressed(x.shape, rank)
                   else _nbytes(x.shape) for x in jax.tree.leaves(tree))

    return Compressor("powersgd", init, exchange, nbytes, nbytes, {"rank": rank, "start_exchanges": start_exchanges})


# --------------------------------------------------------------------------------------------------------------
# Top-k


def k_of(size: int, fraction: float) -> int:
    """Top-k's ``k`` for a leaf of ``size`` entries: ``ceil(fraction * size)``, at least one."""
    return max(1, min(size, int(math.ceil(fraction * size))))


def top_k(fraction: float = 0.01, num_workers: int = 1) -> Compressor:
    """Each leaf's ``ceil(fraction * size)`` largest-magnitude entries (of its change plus residual), values and
    int32 indices all-gathered over the ``num_workers`` workers (what a worker receives: every worker's) and
    averaged; the rest kept in the worker's residual.

    >>> top_k(0.01, num_workers=4).sent_bytes({"w": jax.ShapeDtypeStruct((100, 50), jnp.float32)})
    400
    """
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        raise ArgError("fraction", fraction, f"fraction={fraction!r}: must be in (0, 1];",
                       "e.g. 0.01 for the largest 1% of each tensor.")
    _check_int("num_workers", num_workers, 1, "top_k(num_workers=...): the workers whose entries are gathered")

    def one_leaf(m_n, gather):
        flat = m_n.reshape(m_n.shape[0], -1)
        _, idx = jax.lax.top_k(jnp.abs(flat), k_of(flat.shape[1], fraction))  # each row's own, [n, k]
        rows = jnp.arange(flat.shape[0])[:, None]
        values = flat[rows, idx]
        all_values, all_idx = gather(values), gather(idx)  # [W, k] each: what crosses
        total = jnp.zeros(flat.shape[1], jnp.float32).at[all_idx.reshape(-1)].add(all_values.reshape(-1))
        return (total / num_workers).reshape(m_n.shape[1:]), flat.at[rows, idx].set(0.0).reshape(m_n.shape)

    def exchange(change_n, state_n, across):
        leaves, treedef = jax.tree.flatten(change_n)
        outs = [one_leaf(c.astype(jnp.float32) + e, across.gather)
                for c, e in zip(leaves, treedef.flatten_up_to(state_n))]
        return (jax.tree.unflatten(treedef, [o.astype(c.dtype) for (o, _), c in zip(outs, leaves)]),
                jax.tree.unflatten(treedef, [r for _, r in outs]))

    def sent(tree):
        return sum(k_of(math.prod(x.shape), fraction) * (np.dtype(jnp.float32).itemsize + INDEX_BYTES)
                   for x in jax.tree.leaves(tree))

    return Compressor("top_k", lambda tree, key, n: _zeros(tree, n), exchange, sent,
                      lambda tree: num_workers * sent(tree), {"fraction": fraction})


def stacked_exchange(compressor: Compressor, change_W: PyTree, state_W: PyTree) -> tuple[PyTree, PyTree]:
    """``compressor.exchange`` of every worker's ``[W, ...]`` rows in one process (simulate's, and the reference
    every runtime is tested against): the mean over the rows. Returns the mean approximation (one tree) and the
    workers' next states (``[W, ...]``)."""
    return compressor.exchange(change_W, state_W, one_process())


#: The compressions an algorithm's ``compression`` option names ("none": the exact mean).
COMPRESSIONS = ("none", "powersgd", "top_k")


def compressor(name: Any, *, num_workers: int, rank: int = 2, fraction: float = 0.01,
               start_exchanges: int = 0) -> Optional[Compressor]:
    """The `Compressor` an algorithm's options name: ``"powersgd"`` (``rank``, ``start_exchanges``), ``"top_k"``
    (``fraction``), None for ``"none"``; a `Compressor` passes through.

    >>> compressor("powersgd", num_workers=4, rank=1).name
    'powersgd'
    """
    if isinstance(name, Compressor) or name is None:
        return name
    if name not in COMPRESSIONS:
        raise ArgError("compression", name, f"compression={name!r}: unknown;", f"choose one of {COMPRESSIONS}.")
    try:
        if name == "powersgd":
            return powersgd(rank, start_exchanges)
        return top_k(fraction, num_workers) if name == "top_k" else None
    except ArgError as e:  # named as the algorithm's options name them
        option = _OPTIONS.get(e.arg, e.arg)
        raise ArgError(option, e.value, e.problem.replace(f"{e.arg}=", f"{option}=", 1), e.pieces) from None


#: The algorithms' option for each compressor argument (`compressor`).
_OPTIONS = {"rank": "compression_rank", "fraction": "compression_fraction", "start_exchanges": "compression_start"}


def _check_int(name: str, value, low: int, hint: str) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ArgError(name, value, f"{name}={value!r}: must be an integer >= {low};", hint + ".")
