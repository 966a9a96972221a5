"""Seeds, round indices and the keys of random streams: the checks and key derivations that the data pipeline
(`istjax.data`) and the graph samplers (`istjax.graph`) share, kept below both so that neither imports the other
for them."""

from __future__ import annotations

import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError

__all__ = ["CLIENTS_TAG", "SHARD_TAG", "STREAM_TAG", "as_round", "check_positive", "check_seed", "clients_key",
           "is_traced", "stream_key"]

SHARD_TAG = 0x5348_4152  # "SHAR": folded into a stream's key to draw a data shard's permutation
STREAM_TAG = 0x5354_524D  # "STRM": folded into a seed's key to start a batch stream
CLIENTS_TAG = 0x434C_4E54  # "CLNT": folded into a seed's key to draw the federated clients of each round


def check_positive(field: str, value: Any, minimum: int = 1) -> int:
    """Return `value` as an int, raising a ValueError naming `field` if < minimum."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ArgError(field, value, f"{field}={value!r} must be an integer >= {minimum};", "pass an int.") from None
    if v < minimum:
        raise ArgError(field, value, f"{field}={v} must be >= {minimum};", f"pass {field}>={minimum}.")
    return v


def check_seed(seed: Any) -> int:
    """``seed`` as an int in ``[0, 2**32)``; a ValueError naming it otherwise (PRNGKey would wrap larger seeds)."""
    try:
        s = operator.index(seed)
    except TypeError:
        raise ArgError("seed", seed, f"seed={seed!r} must be an integer;", "pass an int.") from None
    if not 0 <= s < 2**32:  # PRNGKey would silently wrap larger seeds (x64 off)
        raise ArgError("seed", seed, f"seed={s} must be in [0, 2**32);", "pass a smaller seed.")
    return s


def stream_key(seed: int) -> jax.Array:
    """The key a batch stream of ``seed`` starts from."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), STREAM_TAG)


def clients_key(seed: int) -> jax.Array:
    """The key a client sampler of ``seed`` draws each round's clients from (`istjax.data.client_batches`)."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), CLIENTS_TAG)


def as_round(round_index: Any) -> jax.Array:
    """`round_index` (int or scalar integer array) as a scalar `int32` array."""
    if isinstance(round_index, bool) or not (
        isinstance(round_index, (int, np.integer, np.ndarray, jax.Array))
    ):
        raise ArgError("round_index", round_index,
                       f"round_index={round_index!r} must be an int or a scalar integer array.", "")
    if isinstance(round_index, (int, np.integer)):
        if not 0 <= round_index < 2**31:
            raise ArgError("round_index", round_index, f"round_index={round_index} must be in [0, 2**31).", "")
        return jnp.asarray(round_index, jnp.int32)
    if round_index.shape != () or not jnp.issubdtype(round_index.dtype, jnp.integer):
        raise ArgError("round_index", round_index.shape, f"round_index must be a scalar integer, got shape "
                                                         f"{round_index.shape} dtype {round_index.dtype};",
                       "pass an int or jnp.int32 scalar.")
    return jnp.asarray(round_index).astype(jnp.int32)


def is_traced(x: Any) -> bool:
    """Whether ``x`` is being traced (inside jit or vmap), so its value cannot be checked."""
    return isinstance(x, jax.core.Tracer)

