"""Learning-rate schedules counted in training rounds, shared by IST and its baselines.

An optax schedule counts the optimizer's own steps; under IST (and local SGD with ``optimizer_state="reset"``) every
worker's optimizer starts afresh each round, so that count restarts every round. `round_scheduled` wraps any optax
transformation so that its updates are multiplied by ``schedule(round)``, where ``round`` is the *training* round the
algorithm is in; the algorithm stamps it on every worker's optimizer state each round with `at_round`. With a
multiplier applied to the final updates, ``schedule(round) * learning_rate`` is the learning rate of that round for
SGD, momentum SGD and Adam alike (optax applies the learning rate last).

`make_schedule` builds the multipliers the config names: constant, step decay (by ``factor`` at fractions of the
run, as ResIST and GIST train), cosine, each optionally with a linear warm-up over the first rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from istjax.core.errors import ArgError

__all__ = ["RoundScheduleState", "round_scheduled", "at_round", "make_schedule", "SCHEDULES"]

SCHEDULES = ("constant", "step", "cosine")


class RoundScheduleState(NamedTuple):
    """State of `round_scheduled`: ``round`` `[]` int32, the training round the updates belong to; ``inner``: the
    wrapped optimizer's state."""

    round: jax.Array
    inner: Any


def round_scheduled(optimizer: optax.GradientTransformation,
                    schedule: Callable[[jax.Array], jax.Array]) -> optax.GradientTransformation:
    """``optimizer`` whose updates are scaled by ``schedule(round)`` (round: the training round, see `at_round`)."""

    def init(params):
        return RoundScheduleState(jnp.zeros((), jnp.int32), optimizer.init(params))

    def update(updates, state, params=None):
        updates, inner = optimizer.update(updates, state.inner, params)
        scale = schedule(state.round)
        return jax.tree.map(lambda u: (u * scale).astype(u.dtype), updates), RoundScheduleState(state.round, inner)

    return optax.GradientTransformation(init, update)


def _is_round_state(x) -> bool:
    return isinstance(x, RoundScheduleState)


def at_round(opt_state: Any, round_index: jax.Array) -> Any:
    """``opt_state`` (a worker's, or a `[W]` stack of them) with every `RoundScheduleState` set to ``round_index``;
    unchanged when the optimizer has no round schedule."""

    def stamp(s):
        if not _is_round_state(s):
            return s
        return s._replace(round=jnp.broadcast_to(jnp.asarray(round_index, jnp.int32), jnp.shape(s.round)))

    return jax.tree.map(stamp, opt_state, is_leaf=_is_round_state)


def make_schedule(kind: str, *, num_rounds: int, decay_at: Sequence[float] = (0.5, 0.75), factor: float = 0.1,
                  warmup_rounds: int = 0) -> Optional[Callable[[jax.Array], jax.Array]]:
    """The learning-rate multiplier per round: None for ``"constant"`` without warm-up.

    Args:
      kind: ``"constant"``, ``"step"`` (times ``factor`` at each fraction in ``decay_at`` of ``num_rounds``) or
        ``"cosine"`` (from 1 to 0 over ``num_rounds``).
      num_rounds: the schedule's length in rounds.
      decay_at: fractions of ``num_rounds`` where a step schedule decays.
      factor: a step schedule's multiplier at each decay.
      warmup_rounds: a linear ramp from ``1 / warmup_rounds`` to 1 over the first rounds.
    """
    if kind not in SCHEDULES:
        raise ArgError("kind", kind, f"lr_schedule={kind!r}:", f"choose one of {SCHEDULES}.")
    if kind == "step":
        base = optax.piecewise_constant_schedule(1.0, {int(round(f * num_rounds)): float(factor) for f in decay_at})
    elif kind == "cosine":
        base = optax.cosine_decay_schedule(1.0, decay_steps=max(1, int(num_rounds)))
    else:
        base = None
    if warmup_rounds <= 0:
        return base

    def warmed(r):
        ramp = jnp.minimum(1.0, (jnp.asarray(r, jnp.float32) + 1.0) / float(warmup_rounds))
        return ramp if base is None else ramp * base(r)

    return warmed
