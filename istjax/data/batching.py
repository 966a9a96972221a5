"""On-device batching for Independent Subnetwork Training: the per-worker sampling plan.

Batching is a pure function of ``(seed, round_index, worker)``:
:func:`make_batch_fn` returns ``batches(round_index)`` which gathers, on
device, a ``{"x": [W, K, B, ...] float32, "y": [W, K, B] int32}`` batch for
``W`` workers, ``K`` local steps and ``B`` examples per step.  Worker ``w``
reads the stream of pool positions ``p = round_index * K * B + arange(K * B)``
and maps them to examples with an epoch-wise permutation of its pool, so a run
resumed at round ``r`` sees exactly the data it would have seen had it never
stopped, and over one epoch of rounds every example of a worker's pool is
seen exactly once.  The key schedule is documented in :func:`make_index_fn`.

Evaluation uses :func:`eval_batches`, plain numpy chunks covering a split
exactly once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import SHARD_TAG as _SHARD_TAG
from istjax.core.streams import as_round as _as_round
from istjax.core.streams import check_positive
from istjax.core.streams import check_seed
from istjax.core.streams import is_traced as _is_traced
from istjax.core.streams import stream_key as _stream_key
from istjax.data.dataset import Dataset

__all__ = [
    "SHARDINGS",
    "Batch",
    "BatchFn",
    "eval_batches",
    "make_batch_fn",
    "make_index_fn",
]

Batch = dict[str, jax.Array]
"""``{"x": [W, K, B, ...] float32, "y": [W, K, B] int32}``."""

#: How workers' samples are drawn (``data.sharding``): each from its own shard, or all from the whole set.
SHARDINGS = ("disjoint", "shared")

# Tags folded into PRNGKey(seed) so the shard split and the sample streams
# draw from independent key trees (worker ids are small, tags are not).
@dataclasses.dataclass(frozen=True)
class _Plan:
    """Static (hashable) shape of a sampling scheme; the seed is not part of it.

    Equal plans share compiled code, so re-creating a batch function (e.g. on
    resume, or with another seed) does not recompile.
    """

    num_workers: int
    local_steps: int
    batch_size: int
    sharding: str
    pool_size: int
    num_epochs: int  # permutations built per worker per round
    rows: tuple[int, int] | None = None  # the workers start..stop-1 whose batches are drawn (None: all W)

    @property
    def drawn(self) -> tuple[int, int]:
        """``(first, count)``: the workers whose batches are drawn."""
        return (0, self.num_workers) if self.rows is None else (self.rows[0], self.rows[1] - self.rows[0])

    def shard_table(self, num_examples: int, seed: int) -> np.ndarray | None:
        """`[W, P] int32` example ids of each worker's shard, or None if shared."""
        if self.sharding == "shared":
            return None
        key = jax.random.fold_in(jax.random.PRNGKey(seed), _SHARD_TAG)
        order = np.asarray(jax.random.permutation(key, num_examples), np.int32)
        return order[: self.num_workers * self.pool_size].reshape(self.num_workers, self.pool_size)

    def indices(self, stream_key: jax.Array, table: jax.Array | None, round_index: Any) -> jax.Array:
        """`[W, K, B] int32` example ids of `round_index` (traceable); `[L, K, B]`, the drawn workers' rows,
        when the plan has ``rows``.

        `stream_key = fold_in(PRNGKey(seed), STREAM_TAG)`; `table` from
        :meth:`shard_table` (its drawn rows; None for shared sampling).
        """
        r = _as_round(round_index)
        w_, k_, b_, pool = self.num_workers, self.local_steps, self.batch_size, self.pool_size
        kb = k_ * b_
        # start = r*kb = q*pool*kb + rem*kb, computed without overflowing r*kb.
        q, rem = jnp.divmod(r, pool)
        start = rem * kb
        epoch0 = q * kb + start // pool
        local = start % pool + jnp.arange(kb, dtype=jnp.int32)
        ep_rel, pos = local // pool, local % pool

        def worker_perms(w: jax.Array) -> jax.Array:
            kw = jax.random.fold_in(stream_key, w)
            epochs = epoch0 + jnp.arange(self.num_epochs, dtype=jnp.int32)
            return jax.vmap(
                lambda e: jax.random.permutation(jax.random.fold_in(kw, e), pool)
            )(epochs)  # [E, P]

        first, count = self.drawn
        perms = jax.vmap(worker_perms)(first + jnp.arange(count, dtype=jnp.int32))  # [L, E, P]
        idx = perms[:, ep_rel, pos].astype(jnp.int32)  # [L, K*B] pool positions
        if table is not None:
            idx = jnp.take_along_axis(table, idx, axis=1)
        return idx.reshape(count, k_, b_)


def _gather(idx: jax.Array, x: jax.Array, y: jax.Array) -> Batch:
    """`{"x": x[idx], "y": y[idx]}` for `idx: [W, K, B]`."""
    return {"x": jnp.take(x, idx, axis=0, mode="clip"), "y": jnp.take(y, idx, axis=0, mode="clip")}


_jit_indices = jax.jit(_Plan.indices, static_argnums=0)
_jit_gather = jax.jit(_gather)


def _make_plan(
    num_examples: Any,
    num_workers: Any,
    local_steps: Any,
    batch_size: Any,
    seed: Any,
    sharding: Any,
) -> tuple[_Plan, int]:
    """Validate batching arguments (before any tracing); return `(plan, seed)`."""
    w = check_positive("num_workers", num_workers)
    k = check_positive("local_steps", local_steps)
    b = check_positive("batch_size", batch_size)
    s = check_seed(seed)
    if sharding not in SHARDINGS:
        raise ArgError("sharding", sharding, f"sharding={sharding!r} is not supported;",
                       f"pass one of {list(SHARDINGS)}.")
    n = check_positive("num_examples", num_examples)
    pool = n // w if sharding == "disjoint" else n
    if pool < b:
        if sharding == "disjoint":
            raise ArgError(
                "batch_size", b,
                f"sharding='disjoint' splits {n} training examples into num_workers={w} shards of {pool}, fewer "
                f"than batch_size={b};", ("use", {"batch_size": pool}, "or less, fewer workers, or",
                                          {"sharding": "shared"}, "."))
        raise ArgError("batch_size", b, f"the training set has {n} examples, fewer than batch_size={b};",
                       ("use", {"batch_size": n}, "or less."))
    kb = k * b
    if pool * (kb + 1) >= 2**31:
        raise ArgError(("local_steps", "batch_size"), local_steps,
                       f"pool size {pool} x local_steps*batch_size={kb} overflows int32 position arithmetic;",
                       "reduce local_steps or batch_size.")
    # Offsets into an epoch are multiples of gcd(kb, pool), at most pool - gcd.
    num_epochs = (pool - math.gcd(kb, pool) + kb - 1) // pool + 1
    return _Plan(w, k, b, sharding, pool, num_epochs), s


def make_index_fn(
    num_examples: int,
    *,
    num_workers: int,
    local_steps: int,
    batch_size: int,
    seed: int,
    sharding: str = "disjoint",
) -> Callable[[Any], jax.Array]:
    """Example ids of one round: `indices(round_index) -> [W, K, B] int32`.

    This is the sampling contract behind :func:`make_batch_fn` (which gathers
    `train_x[indices(round_index)]`):

    * shards (`"disjoint"`): `order = permutation(fold_in(PRNGKey(seed),
      _SHARD_TAG), N)`; worker `w` owns `pool_w = order[w * P:(w + 1) * P]`,
      `P = N // W` (the last `N % W` examples of `order` are dropped).
      `"shared"`: every `pool_w = arange(N)`, `P = N`.
    * stream: worker `w` reads pool positions
      `p = round_index * K * B + arange(K * B)`, epoch `e = p // P`, and takes
      `pool_w[perm_{w,e}[p % P]]`, `perm_{w,e} = permutation(fold_in(fold_in(
      fold_in(PRNGKey(seed), STREAM_TAG), w), e), P)`.

    A round touches at most `(P - gcd(K*B, P) + K*B - 1) // P + 1` epochs
    (<= `ceil(K*B / P) + 1`); that many permutations of `P` are built per
    worker per call.  Jit-compatible in `round_index`.
    """
    plan, seed = _make_plan(num_examples, num_workers, local_steps, batch_size, seed, sharding)
    table = plan.shard_table(num_examples, seed)
    table_dev = None if table is None else jnp.asarray(table)
    key = _stream_key(seed)

    def indices(round_index: Any) -> jax.Array:
        r = _as_round(round_index)
        if _is_traced(r):
            return plan.indices(key, table_dev, r)
        return _jit_indices(plan, key, table_dev, r)

    return indices


class BatchFn:
    """`batches(round_index) -> {"x": [W, K, B, ...] float32, "y": [W, K, B] int32}`.

    Built by :func:`make_batch_fn`.  `data` is a dict of device arrays:
    `x: [N, ...] float32`, `y: [N] int32`, `key` (the stream key) and, for
    disjoint sharding, `table: [W, P] int32`.  Calling the object outside a
    trace runs jitted code with `data` as arguments (compiled once per
    shape, shared across seeds and instances).  Calling it *inside* your own
    `jax.jit` works too, but then `data` is closed over and JAX embeds it in
    the compiled program as constants (slow compile, a second copy in memory
    for big sets); there, pass `data` as an argument and use
    `batch_fn.apply(data, round_index)`.
    """

    def __init__(self, plan: _Plan, seed: int, data: dict[str, jax.Array]):
        self._plan = plan
        self.seed = seed
        self.data = data

    num_workers = property(lambda self: self._plan.num_workers)
    local_steps = property(lambda self: self._plan.local_steps)
    batch_size = property(lambda self: self._plan.batch_size)
    sharding = property(lambda self: self._plan.sharding)
    pool_size = property(lambda self: self._plan.pool_size, doc="Examples per worker pool `P`.")

    def apply(self, data: dict[str, jax.Array], round_index: Any) -> Batch:
        """Pure, traceable form: the batch of `round_index` gathered from `data`."""
        idx = self._plan.indices(data["key"], data.get("table"), round_index)
        return _gather(idx, data["x"], data["y"])

    def indices(self, round_index: Any) -> jax.Array:
        """Training-set example ids of the round, `[W, K, B] int32`."""
        r = _as_round(round_index)
        d = self.data
        if _is_traced(r):
            return self._plan.indices(d["key"], d.get("table"), r)
        return _jit_indices(self._plan, d["key"], d.get("table"), r)

    rows = property(lambda self: self._plan.rows, doc="The workers `(start, stop)` it draws for; None: all.")

    def __call__(self, round_index: Any, workers: Optional[tuple[int, int]] = None) -> Batch:
        """The round's batches; ``workers=(start, stop)`` gathers only those workers' rows `[stop - start, K, B,
        ...]` (an MPI rank's own; the same rows as the full call, without gathering the others'). A batch function
        built for some workers' rows (``make_batch_fn(..., workers=)``) draws those, and takes no other."""
        if self.rows is not None:
            if workers not in (None, self.rows):
                raise ArgError("workers", workers, f"this batch function holds the examples of workers {self.rows} "
                                                   f"only; it cannot draw workers={workers}.",
                               f"Build it with make_batch_fn(..., workers={workers}).")
            workers = None
        r = _as_round(round_index)
        if _is_traced(r):
            batch = self.apply(self.data, r)
            return batch if workers is None else {k: v[workers[0]:workers[1]] for k, v in batch.items()}
        idx = self.indices(r)
        if workers is not None:
            idx = idx[workers[0]:workers[1]]
        return _jit_gather(idx, self.data["x"], self.data["y"])

    def __repr__(self) -> str:
        p = self._plan
        return (
            f"BatchFn(x={tuple(self.data['x'].shape)}, num_workers={p.num_workers}, "
            f"local_steps={p.local_steps}, batch_size={p.batch_size}, seed={self.seed}, "
            f"sharding={p.sharding!r}, pool_size={p.pool_size})"
        )


def make_batch_fn(
    dataset: Dataset,
    *,
    num_workers: int,
    local_steps: int,
    batch_size: int,
    seed: int,
    sharding: str = "disjoint",
    workers: Optional[tuple[int, int]] = None,
) -> BatchFn:
    """On-device batch function for `num_workers` workers.

    Args:
      dataset: its `train_x: [N, ...]` (an array or `Rows`) and `train_y: [N]` are put on the default
        device once (as float32 / int32) and closed over.
      num_workers: `W >= 1`.
      local_steps: `K >= 1` steps per worker per round.
      batch_size: `B >= 1` examples per step.
      seed: seeds both the shard split and the sample streams.
      sharding: `"disjoint"` (worker `w` only sees shard `w`; `N % W` examples
        are dropped) or `"shared"` (every worker samples the whole training
        set with its own permutations).
      workers: `(start, stop)`: draw only these workers' batches, `[stop - start, K, B, ...]`, rows `start ..
        stop - 1` of the full round, and (``"disjoint"``) hold on device only the examples of their shards: what an
        MPI rank whose workers these are needs. None: every worker's.

    Returns:
      A :class:`BatchFn`, ``batches(round_index)``, that returns the round's batch, a dict of ``x``
      (``[W, K, B, ...] float32``) and ``y`` (``[W, K, B] int32``), deterministic in `(seed, round_index,
      worker)` and jit-compatible (`jax.jit(batches)(jnp.int32(5))`).  See
      :func:`make_index_fn` for the exact sampling contract.
    """
    train_x, train_y = dataset.train_x, dataset.train_y
    if len(train_x) != len(train_y):
        raise ArgError("dataset", len(train_x), f"dataset.train_x has {len(train_x)} examples but train_y has "
                                                f"{len(train_y)};", "they must match.")
    plan, seed = _make_plan(len(train_x), num_workers, local_steps, batch_size, seed, sharding)
    table = plan.shard_table(len(train_x), seed)
    held = None  # the examples held on device: all, or those of the drawn workers' shards
    if workers is not None:
        plan = dataclasses.replace(plan, rows=_check_rows(workers, plan.num_workers))
        if table is not None:
            table = table[plan.rows[0]:plan.rows[1]]
            held = np.unique(table)
            table = np.searchsorted(held, table).astype(np.int32)  # positions among the held examples
    data = {
        # Indexing first: a loader's `Rows` makes float32 features of the held examples alone.
        "x": jnp.asarray(np.asarray(train_x) if held is None else train_x[held], jnp.float32),
        "y": jnp.asarray(np.asarray(train_y) if held is None else np.asarray(train_y)[held], jnp.int32),
        "key": _stream_key(seed),
    }
    if table is not None:
        data["table"] = jnp.asarray(table)
    return BatchFn(plan, seed, data)


def _check_rows(workers: Any, num_workers: int) -> tuple[int, int]:
    ok = (isinstance(workers, (tuple, list)) and len(workers) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in workers)
          and 0 <= workers[0] < workers[1] <= num_workers)
    if not ok:
        raise ArgError("workers", workers, f"workers={workers!r}:",
                       f"give (start, stop) with 0 <= start < stop <= num_workers={num_workers}, the workers whose "
                       f"batches to draw.")
    return int(workers[0]), int(workers[1])


def eval_batches(
    x: np.ndarray, y: np.ndarray, batch_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield `(x[i:i+B], y[i:i+B])` numpy chunks covering the set exactly once.

    Args:
      x: `[N, ...]`.
      y: `[N]`.
      batch_size: `B >= 1`; the last chunk has `N % B` rows if nonzero.
    """
    batch_size = check_positive("batch_size", batch_size)
    if len(x) != len(y):
        raise ArgError(("x", "y"), len(x), f"x has {len(x)} rows but y has {len(y)};", "they must match.")
    for start in range(0, len(x), batch_size):
        yield x[start : start + batch_size], y[start : start + batch_size]
