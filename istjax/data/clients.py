"""Federated clients as data: a training set split into N clients, seeded and recorded.

A `ClientSplit` maps each client to the training examples it holds (``indices[c]``: ``[n_c] int64`` positions in
the training split, ascending), with the seed and settings that made it. It is checked once, where it is made: the
clients are disjoint and every index lies in ``[0, num_examples)``. Every split here assigns every example to
exactly one client. `ClientSplit.to_record` is the JSON a run records (sizes, settings and a digest of the
indices, so a resumed or repeated run can tell it drew the same split).

The splits (``labels``: the training labels, ``[n]`` non-negative integers):

* `iid`: a seeded permutation cut into N equal parts (sizes differ by at most one).
* `dirichlet`: label skew, per class over clients (Yurochkin et al. 2019, "Bayesian Nonparametric Federated Learning
  of Neural Networks"; the construction Hsu et al. 2019 and most federated benchmarks implement): for each class k,
  proportions ``q_k ~ Dir(alpha * 1_N)`` over the N clients, and class k's examples (shuffled) are cut at
  ``floor(cumsum(q_k) * n_k)``. The whole draw is repeated until every client holds at least ``min_size`` examples
  (at most `MAX_DRAWS` times). Small alpha: each class lives on few clients; alpha -> infinity: every client holds
  each class in proportion. No rebalancing is applied (some implementations stop giving a class to clients already
  over n / N; this one does not, so client sizes vary with alpha too).
* `shards`: McMahan et al. 2017's pathological split ("Communication-Efficient Learning of Deep Networks from
  Decentralized Data", arXiv 1602.05629, section 3): the examples sorted by label (stable), cut into
  ``shards_per_client * N`` equal shards, each client dealt ``shards_per_client`` shards at random. The shard count
  must divide the examples: no example is dropped behind your back (the refusal names the numbers of clients that
  divide, and how many examples to drop otherwise).
* `by_group`: natural clients, one per distinct group id (a speaker, a role), in sorted order of the ids.

`capped` bounds any split's clients at ``max_examples`` each, a seeded random subset of a bigger client's examples
kept for the whole run (the rest held by none), as federated benchmarks bound their largest natural clients (TFF's
and LEAF's Shakespeare): a round's K follows the largest client, so one role of 800 windows would pad every other
sampled client, median 18, to 800.

Example::

    >>> import numpy as np
    >>> split = iid(np.repeat(np.arange(4), 10), num_clients=10, seed=0)
    >>> split.sizes.tolist()
    [4, 4, 4, 4, 4, 4, 4, 4, 4, 4]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive, check_seed

__all__ = ["KINDS", "MAX_DRAWS", "ClientSplit", "by_group", "capped", "dirichlet", "iid", "shards"]

KINDS = ("iid", "dirichlet", "shards", "groups")
MAX_DRAWS = 1000  # Dirichlet draws tried for a split whose every client holds min_size examples


@dataclasses.dataclass(frozen=True, eq=False)
class ClientSplit:
    """A training set split into clients (module docstring); immutable, checked when made.

    Attributes:
      kind: how it was made, one of `KINDS`.
      seed: the seed it was drawn from (None for `by_group`: no randomness).
      indices: ``indices[c]``: client c's examples, ``[n_c] int64`` positions in the training split, ascending,
        read-only.
      num_examples: the size of the training split the indices point into.
      params: the settings that made it (``{"alpha": 0.1, "min_size": 10}``), JSON values.
      names: the clients' names (`by_group`'s group ids as strings), or () for drawn splits.
    """

    kind: str
    seed: Optional[int]
    indices: tuple[np.ndarray, ...]
    num_examples: int
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    names: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ArgError("kind", self.kind, f"kind={self.kind!r} is not a client split;",
                           f"choose one of {list(KINDS)}.")
        if self.names and len(self.names) != len(self.indices):
            raise ArgError("names", len(self.names), f"{len(self.names)} names for {len(self.indices)} clients;",
                           "give one name per client, or none.")
        frozen = []
        for c, idx in enumerate(self.indices):
            idx = np.sort(np.asarray(idx, dtype=np.int64).reshape(-1))
            idx.flags.writeable = False
            frozen.append(idx)
        flat = np.concatenate(frozen) if frozen else np.zeros(0, np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= self.num_examples):
            bad = int(flat[(flat < 0) | (flat >= self.num_examples)][0])
            raise ArgError("indices", bad, f"example index {bad} is outside the {self.num_examples} training "
                                           f"examples;", "index examples in [0, num_examples).")
        counts = np.bincount(flat, minlength=self.num_examples) if flat.size else flat
        if flat.size and counts.max() > 1:
            twice = int(np.flatnonzero(counts > 1)[0])
            raise ArgError("indices", twice, f"example {twice} is held by more than one client;",
                           "give each example to one client.")
        object.__setattr__(self, "indices", tuple(frozen))
        object.__setattr__(self, "params", dict(self.params))

    @property
    def num_clients(self) -> int:
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        """``[N] int64``: examples per client."""
        return np.array([len(i) for i in self.indices], dtype=np.int64)

    def client_of(self) -> np.ndarray:
        """``[num_examples] int64``: the client holding each example, -1 for one no client holds."""
        out = np.full(self.num_examples, -1, np.int64)
        for c, idx in enumerate(self.indices):
            out[idx] = c
        return out

    def class_counts(self, labels: Any, num_classes: int) -> np.ndarray:
        """``[N, num_classes] int64``: client c's examples of class k at ``[c, k]``."""
        labels = _check_labels(labels, self.num_examples)
        num_classes = check_positive("num_classes", num_classes)
        if labels.size and labels.max() >= num_classes:
            raise ArgError("num_classes", num_classes,
                           f"num_classes={num_classes} but the labels reach {int(labels.max())};",
                           use={"num_classes": int(labels.max()) + 1})
        return np.stack([np.bincount(labels[idx], minlength=num_classes) for idx in self.indices]).astype(np.int64)

    def digest(self) -> str:
        """sha256 of the clients' indices (hex, 16 characters): equal digests, equal splits."""
        h = hashlib.sha256(f"{self.num_examples}|{self.num_clients}".encode())
        for idx in self.indices:
            h.update(np.int64(len(idx)).tobytes())
            h.update(idx.astype("<i8").tobytes())
        return h.hexdigest()[:16]

    def to_record(self) -> dict[str, Any]:
        """What a run records (JSON values): kind, seed, settings, sizes, names and the digest of the indices."""
        record = {"kind": self.kind, "seed": self.seed, "num_clients": self.num_clients,
                  "num_examples": self.num_examples, "params": dict(self.params),
                  "sizes": self.sizes.tolist(), "digest": self.digest()}
        if self.names:
            record["names"] = list(self.names)
        json.dumps(record)  # a record is JSON; a setting that is not fails here, where it was made
        return record

    def describe(self) -> str:
        """One line: ``dirichlet(alpha=0.1, min_size=10), seed 0: 100 clients over 60000 examples, 12..2301 each
        (median 480)``."""
        settings = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        sizes = self.sizes
        spread = (f"{int(sizes.min())}..{int(sizes.max())} each (median {float(np.median(sizes)):g})"
                  if sizes.size else "empty")
        held = int(sizes.sum())
        unheld = f", {self.num_examples - held} held by none" if held < self.num_examples else ""
        seed = "" if self.seed is None else f", seed {self.seed}"
        return (f"{self.kind}({settings}){seed}: {self.num_clients} clients over {self.num_examples} examples, "
                f"{spread}{unheld}")


def _check_labels(labels: Any, num_examples: Optional[int] = None) -> np.ndarray:
    """``labels`` as ``[n] int64``, non-negative, at least one; of length ``num_examples`` when given."""
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0 or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
        raise ArgError("labels", f"{y.dtype}{list(y.shape)}", f"labels of dtype {y.dtype} and shape {y.shape}: a "
                                                              f"split needs class labels,", "a 1-D integer array.")
    if y.min() < 0:
        raise ArgError("labels", int(y.min()), f"labels hold {int(y.min())};", "give class ids >= 0.")
    if num_examples is not None and y.size != num_examples:
        raise ArgError("labels", y.size, f"{y.size} labels for a split of {num_examples} examples;",
                       "give the labels of the training split the clients were drawn from.")
    return y.astype(np.int64)


def _check_num_clients(num_clients: Any, n: int) -> int:
    """``num_clients`` as an int in ``[1, n]``: every client holds at least one of the ``n`` examples."""
    num_clients = check_positive("num_clients", num_clients)
    if num_clients > n:
        raise ArgError("num_clients", num_clients, f"num_clients={num_clients} is more than the {n} training "
                                                   f"examples; every client needs one,", use={"num_clients": n})
    return num_clients


def iid(labels: Any, num_clients: int, seed: int) -> ClientSplit:
    """A shuffled equal split: a permutation of the ``n`` examples (``numpy.random.default_rng(seed)``) cut into
    ``num_clients`` parts of ``n // N`` or ``n // N + 1`` examples (the first ``n % N`` clients one more).

    ``labels`` (``[n]``) are read only for their count and checked like every split's, so any split of a data set
    is made from the same argument."""
    y = _check_labels(labels)
    num_clients, seed = _check_num_clients(num_clients, y.size), check_seed(seed)
    perm = np.random.default_rng(seed).permutation(y.size)
    return ClientSplit("iid", seed, tuple(np.array_split(perm, num_clients)), y.size)


def dirichlet(labels: Any, num_clients: int, alpha: float, seed: int, min_size: int = 10) -> ClientSplit:
    """Label skew, per class over clients (module docstring): class k's examples go to the clients in proportions
    ``q_k ~ Dir(alpha * 1_N)``; the whole draw is repeated until every client holds ``min_size`` examples.

    Args:
      labels: ``[n]`` class ids of the training examples.
      num_clients: N, at most ``n // min_size`` (each client holds ``min_size``).
      alpha: the concentration, > 0: 0.1 strong skew (a client sees one or two classes), 100 nearly IID.
      seed: the draw's seed (``numpy.random.default_rng``); the same seed, the same split.
      min_size: the fewest examples a client may hold (default 10, as NIID-Bench, Li et al. 2021).

    Raises:
      ArgError: alpha <= 0, N < 1, N > n, ``min_size * N > n``, or no draw in `MAX_DRAWS` meets ``min_size``.
    """
    y = _check_labels(labels)
    num_clients, seed = _check_num_clients(num_clients, y.size), check_seed(seed)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < float("inf"):
        raise ArgError("alpha", alpha, f"alpha={alpha!r}: the Dirichlet concentration must be a number > 0;",
                       ("e.g.", [{"alpha": 0.1}, {"alpha": 0.5}], "(0.1: strong skew; larger: closer to IID)."))
    min_size = check_positive("min_size", min_size, 0)
    if min_size * num_clients > y.size:
        raise ArgError(("min_size", "num_clients"), min_size,
                       f"min_size={min_size} x num_clients={num_clients} is more than the {y.size} examples;",
                       use=[{"min_size": y.size // num_clients}, {"num_clients": y.size // max(min_size, 1)}])
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    for _ in range(MAX_DRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for k in classes:
            members = rng.permutation(np.flatnonzero(y == k))
            q = rng.dirichlet(np.full(num_clients, float(alpha)))
            cuts = (np.cumsum(q)[:-1] * members.size).astype(np.int64)
            for c, piece in enumerate(np.split(members, cuts)):
                parts[c].append(piece)
        indices = tuple(np.concatenate(p) for p in parts)
        if min(len(i) for i in indices) >= min_size:
            return ClientSplit("dirichlet", seed, indices, y.size,
                               {"alpha": float(alpha), "min_size": min_size})
    raise ArgError(("min_size", "alpha"), min_size,
                   f"no Dirichlet draw of {MAX_DRAWS} at alpha={alpha:g} gave each of the {num_clients} clients "
                   f"min_size={min_size} of the {y.size} examples;",
                   ("lower", {"min_size": ...}, "or", {"num_clients": ...}, ", or raise", {"alpha": ...}, "."))


def _dividing_clients(n: int, shards_per_client: int, near: int) -> list[int]:
    """The numbers of clients closest to ``near`` (one below, one above, when they exist) whose shard count
    ``shards_per_client * N`` divides ``n``."""
    fits = [c for c in range(1, n // shards_per_client + 1) if n % (shards_per_client * c) == 0]
    below = [c for c in fits if c < near][-1:]
    above = [c for c in fits if c > near][:1]
    return below + above


def shards(labels: Any, num_clients: int, seed: int, shards_per_client: int = 2) -> ClientSplit:
    """McMahan et al.'s pathological split (module docstring): the examples sorted by label (stable, so equal labels
    keep their order), cut into ``S = shards_per_client * N`` shards of ``n / S`` examples, and a seeded
    permutation of the shards dealt ``shards_per_client`` to each client in turn (client c: shards
    ``perm[c * s : (c + 1) * s]``). The paper: 60,000 MNIST digits, N = 100, 200 shards of 300.

    Raises:
      ArgError: N < 1, ``S > n``, or ``S`` not dividing ``n`` (the message names the numbers of clients that
        divide, and how many examples to drop to keep N).
    """
    y = _check_labels(labels)
    shards_per_client = check_positive("shards_per_client", shards_per_client)
    num_clients, seed = check_positive("num_clients", num_clients), check_seed(seed)
    count = shards_per_client * num_clients
    if count > y.size or y.size % count:
        drop = y.size % count if count <= y.size else None
        fits = [{"num_clients": c} for c in _dividing_clients(y.size, shards_per_client, num_clients)]
        problem = (f"num_clients={num_clients} x shards_per_client={shards_per_client} = {count} shards "
                   + (f"is more than the {y.size} examples;" if drop is None
                      else f"do not divide the {y.size} examples ({y.size} = {y.size // count} x {count} + {drop});"))
        drop_fix = [f"drop the last {drop} example{'s' * (drop > 1)} first"] if drop else []
        if fits:
            raise ArgError(("num_clients", "shards_per_client"), num_clients, problem, use=fits + drop_fix)
        raise ArgError(("num_clients", "shards_per_client"), num_clients, problem,
                       f"{drop_fix[0]}." if drop_fix else "use fewer shards per client.")
    order = np.argsort(y, kind="stable").reshape(count, y.size // count)
    perm = np.random.default_rng(seed).permutation(count).reshape(num_clients, shards_per_client)
    return ClientSplit("shards", seed, tuple(order[p].reshape(-1) for p in perm), y.size,
                       {"shards_per_client": shards_per_client, "shard_size": y.size // count})


def by_group(groups: Sequence[Any]) -> ClientSplit:
    """Natural clients: one client per distinct id in ``groups`` (``[n]``: each example's speaker, role, ...), in
    sorted order of the ids; client c holds the examples of the c-th id, in their order. ``names`` are the ids as
    strings. No seed: nothing is drawn."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.size == 0:
        raise ArgError("groups", list(g.shape), f"groups of shape {g.shape}: give one group id per example,",
                       "a 1-D sequence such as the speakers of the training examples.")
    ids, inverse = np.unique(g, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=ids.size))[:-1]
    return ClientSplit("groups", None, tuple(np.split(order, bounds)), g.size, {"num_groups": int(ids.size)},
                       names=tuple(str(i) for i in ids.tolist()))


def capped(split: ClientSplit, max_examples: int, seed: int) -> ClientSplit:
    """``split`` with every client holding at most ``max_examples`` examples: a bigger client keeps a uniform random
    subset of its own (seeded by ``seed`` and the client, fixed for the run), a smaller one all of its; the examples
    dropped are held by none (`ClientSplit.describe` counts them). Its kind, seed and names are ``split``'s; its
    ``params`` add ``max_examples``. ``split`` itself where no client exceeds the cap."""
    if isinstance(max_examples, bool):
        raise ArgError("max_examples", max_examples, f"max_examples={max_examples!r}:",
                       "give the most examples a client may hold, an integer >= 1, e.g. 64.")
    cap = check_positive("max_examples", max_examples)
    seed = check_seed(seed)
    if not isinstance(split, ClientSplit):
        raise ArgError("split", type(split).__name__, f"split is a {type(split).__name__}, not a ClientSplit;",
                       "make one with istjax.data.clients (iid, dirichlet, shards or by_group).")
    if int(split.sizes.max(initial=0)) <= cap:
        return split
    kept = []
    for c, idx in enumerate(split.indices):
        rng = np.random.default_rng([seed, c])
        kept.append(idx if len(idx) <= cap else rng.choice(idx, size=cap, replace=False))
    return ClientSplit(split.kind, split.seed, tuple(kept), split.num_examples,
                       {**split.params, "max_examples": cap}, names=split.names)
