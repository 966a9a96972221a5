"""Cluster-GCN mini-batches: which clusters every worker trains on at every step of a round.

A graph too big for full-graph steps is cut into C clusters (`istjax.graph.clusters`: METIS or random, the padded
cluster table, the induced subgraph of a step's clusters). This module is the batching plan over those clusters, as
`istjax.data.batching` is over examples: `cluster_batches` gives every worker's ``[W, K, q]`` cluster ids of a
round as a pure function of ``(seed, round, worker)``, covering every cluster once per epoch per worker, and
`cluster_batch_fn` wraps it in the `istjax.data.BatchFn` interface the driver uses (``graph_batches="clusters"``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from istjax.core.errors import ArgError
from istjax.core.streams import as_round as _as_round
from istjax.core.streams import check_positive
from istjax.core.streams import check_seed
from istjax.core.streams import is_traced as _is_traced
from istjax.core.streams import stream_key as _stream_key

__all__ = ["GRAPH_BATCHES", "FULL_GRAPH", "CLUSTERS", "clustered", "ClusterBatchFn", "ClusterBatches",
           "cluster_batch_fn", "cluster_batches", "steps_per_epoch"]

#: ``data.graph_batches`` values: the whole graph every step, or Cluster-GCN's clusters.
FULL_GRAPH, CLUSTERS = "full", "clusters"
#: The values ``data.graph_batches`` takes: ``full`` (the whole graph a step) or ``clusters`` (Cluster-GCN's).
GRAPH_BATCHES = (FULL_GRAPH, CLUSTERS)  # config.data.graph_batches: the whole graph a step, or Cluster-GCN's


def clustered(shared: Any) -> bool:
    """Whether a dataset's shared input carries a Cluster-GCN cluster table (its steps are clusters, not nodes)."""
    return bool(shared) and CLUSTERS in shared


def steps_per_epoch(num_clusters: int, clusters_per_step: int) -> int:
    """``S = ceil(C / q)``: steps of one worker that visit every cluster once."""
    return -(-num_clusters // clusters_per_step)


@dataclasses.dataclass(frozen=True)
class _ClusterPlan:
    """Static (hashable) shape of a cluster schedule; equal plans share compiled code (the seed is not part)."""

    num_clusters: int
    num_workers: int
    local_steps: int
    clusters_per_step: int

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.num_clusters, self.clusters_per_step)

    @property
    def num_epochs(self) -> int:
        """Epochs one round's ``K`` steps can touch: its first step sits at offset ``r*K mod S``, a multiple of
        ``gcd(K, S)`` at most ``S - gcd(K, S)``."""
        s, k = self.steps_per_epoch, self.local_steps
        return (s - math.gcd(k, s) + k - 1) // s + 1

    def ids(self, stream_key: jax.Array, round_index: Any) -> jax.Array:
        """``[W, K, q] int32`` cluster ids of ``round_index`` (traceable); -1 marks an empty slot."""
        c, w_, k_, q = self.num_clusters, self.num_workers, self.local_steps, self.clusters_per_step
        s = self.steps_per_epoch
        r = _as_round(round_index)
        # Global step t = r*K + k = a*S*K + (b*K + k) for r = a*S + b: epoch t // S = a*K + (b*K + k) // S and
        # position t % S = (b*K + k) % S, without forming r*K (b*K + k < S*K + K < 2**31 is checked).
        a, b = jnp.divmod(r, s)
        local = b * k_ + jnp.arange(k_, dtype=jnp.int32)  # [K]
        first = (b * k_) // s
        e_rel = local // s - first  # [K] in [0, num_epochs)
        pos = (local % s)[:, None] * q + jnp.arange(q, dtype=jnp.int32)[None, :]  # [K, q] slot among the S*q
        # Epoch numbers in uint32 (they only feed fold_in; wrap after 2**32 epochs).
        e0 = a.astype(jnp.uint32) * jnp.uint32(k_) + first.astype(jnp.uint32)
        epochs = e0 + jnp.arange(self.num_epochs, dtype=jnp.uint32)

        def worker_perms(w: jax.Array) -> jax.Array:
            kw = jax.random.fold_in(stream_key, w)
            return jax.vmap(lambda e: jax.random.permutation(jax.random.fold_in(kw, e), c))(epochs)  # [E, C]

        perms = jax.vmap(worker_perms)(jnp.arange(w_, dtype=jnp.int32)).astype(jnp.int32)  # [W, E, C]
        pad = jnp.full((w_, self.num_epochs, s * q - c), -1, jnp.int32)
        perms = jnp.concatenate([perms, pad], axis=2)  # [W, E, S*q]: the last S*q - C slots of an epoch are empty
        return perms[:, jnp.broadcast_to(e_rel[:, None], (k_, q)), pos]


_jit_ids = jax.jit(_ClusterPlan.ids, static_argnums=0)


class ClusterBatches:
    """``batches(round_index) -> [W, K, q] int32`` cluster ids; built by :func:`cluster_batches`.

    Pure in ``(seed, round_index, worker)``; outside a trace it runs jitted code (compiled once per plan shape,
    shared across seeds), inside your ``jax.jit`` it traces (``round_index`` may be a traced int32 scalar; only the
    small stream key is closed over).
    """

    def __init__(self, plan: _ClusterPlan, seed: int):
        self._plan = plan
        self.seed = seed
        self.key = _stream_key(seed)

    num_clusters = property(lambda self: self._plan.num_clusters)
    num_workers = property(lambda self: self._plan.num_workers)
    local_steps = property(lambda self: self._plan.local_steps)
    clusters_per_step = property(lambda self: self._plan.clusters_per_step)
    steps_per_epoch = property(lambda self: self._plan.steps_per_epoch, doc="``S = ceil(C / q)``.")

    def apply(self, key: jax.Array, round_index: Any) -> jax.Array:
        """Pure, traceable form with the stream key as an argument."""
        return self._plan.ids(key, round_index)

    def __call__(self, round_index: Any) -> jax.Array:
        r = _as_round(round_index)
        if _is_traced(r):
            return self._plan.ids(self.key, r)
        return _jit_ids(self._plan, self.key, r)

    def __repr__(self) -> str:
        p = self._plan
        return (f"ClusterBatches(num_clusters={p.num_clusters}, num_workers={p.num_workers}, "
                f"local_steps={p.local_steps}, clusters_per_step={p.clusters_per_step}, seed={self.seed}, "
                f"steps_per_epoch={p.steps_per_epoch})")


def cluster_batches(num_clusters: int, num_workers: int, local_steps: int, clusters_per_step: int,
                    seed: int) -> ClusterBatches:
    """Cluster ids for every worker and local step of a round: ``batches(round_index) -> [W, K, q] int32``.

    The epoch contract. Worker ``w``'s steps are numbered across rounds, ``t = round_index * K + k``. An epoch is
    ``S = ceil(C / q)`` consecutive steps, epoch ``e`` being steps ``[e * S, (e + 1) * S)``; its ``S * q`` slots
    (step ``t``'s ``q`` ids are slots ``(t % S) * q ... (t % S) * q + q - 1``) hold ``perm_{w,e}``, a fresh
    permutation of the ``C`` clusters, followed by ``S * q - C < q`` empty slots marked ``-1`` (all in the epoch's
    last step; none when ``q`` divides ``C``). Hence:

    * within one epoch every worker draws every cluster exactly once (and so, through :func:`subgraph`, trains on
      every training node exactly once);
    * a step never holds the same cluster twice;
    * epochs need not align with rounds (a round may end mid-epoch; the next one continues it), so a run resumed
      at round ``r`` draws exactly what it would have drawn without stopping.

    Keys follow :func:`istjax.data.batching.make_index_fn` with the clusters as the pool: ``perm_{w,e} =
    permutation(fold_in(fold_in(fold_in(PRNGKey(seed), _STREAM_TAG), w), e), C)`` (``e`` as uint32), so the ids
    are deterministic in ``(seed, round_index, worker)`` and independent across workers.

    Args:
      num_clusters: ``C >= 1``, the table's cluster count.
      num_workers: ``W >= 1``.
      local_steps: ``K >= 1`` steps per worker per round.
      clusters_per_step: ``q``, ``1 <= q <= C`` clusters merged into each step's subgraph.
      seed: an int in ``[0, 2**32)``.
    """
    c = check_positive("num_clusters", num_clusters)
    w = check_positive("num_workers", num_workers)
    k = check_positive("local_steps", local_steps)
    q = check_positive("clusters_per_step", clusters_per_step)
    if q > c:
        raise ArgError("clusters_per_step", q, f"clusters_per_step={q} exceeds num_clusters={c};",
                       ("use", {"clusters_per_step": c}, "or less."))
    seed = check_seed(seed)
    s = steps_per_epoch(c, q)
    if (s + 1) * k >= 2**31 or s * q >= 2**31:
        raise ArgError("local_steps", local_steps, f"num_clusters={c} with local_steps={k} overflows int32 step "
                                                   f"arithmetic;", "reduce local_steps or num_clusters.")
    return ClusterBatches(_ClusterPlan(c, w, k, q), seed)


class ClusterBatchFn:
    """The `istjax.data.BatchFn` interface over `cluster_batches`: ``batches(round) ->
    {"x": cluster ids [W, K, q] int32, "y": zeros [W, K, q]}`` (``y`` is unused; labels come from the shared
    input), and ``apply(data, round)`` with ``data = {"key": stream key}`` for fused, traced use."""

    def __init__(self, inner: ClusterBatches):
        self.inner = inner
        self.data = {"key": inner.key}

    def apply(self, data: dict, round_index: Any) -> dict:
        ids = self.inner.apply(data["key"], round_index)
        return {"x": ids, "y": jnp.zeros_like(ids)}

    def __call__(self, round_index: Any) -> dict:
        return self.apply(self.data, round_index)


def cluster_batch_fn(shared: dict, *, num_workers: int, local_steps: int, clusters_per_step: int,
                     seed: int) -> ClusterBatchFn:
    """Per-worker cluster batches over ``shared["clusters"]`` (every cluster once per epoch per worker)."""
    table = shared[CLUSTERS]
    return ClusterBatchFn(cluster_batches(int(table.num_clusters), num_workers, local_steps, clusters_per_step,
                                          seed))
