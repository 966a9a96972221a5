"""Precision as a policy, as in Flax (``dtype`` / ``param_dtype``): float32 masters, a compute dtype and an exchange
dtype chosen apart.

**Compute.** A model built with ``dtype="bfloat16"`` keeps float32 parameters (and optimizer state, and loss) and
computes in bfloat16: every matmul and convolution takes bfloat16 operands and accumulates in float32
(`dot_general`, `einsum`: ``preferred_element_type=float32``, then the result rounded to bfloat16), in the backward
pass too (convolutions: `istjax.models.conv_ops`); BatchNorm and LayerNorm statistics, softmax and the loss are float32.
On a CPU with AVX-512 BF16 / AMX this is the form XLA runs fast: a plain bfloat16 dot (bfloat16 output) compiles to
convert -> float32 dot -> convert and gains nothing. ``"float32"`` changes nothing: the same operations as a model
without the option, bit for bit.

**Exchange.** What crosses the wire (`Wire`): ``"float32"``, or ``"bfloat16"``, half the bytes. Every floating
leaf a worker receives is rounded to bfloat16 (its starting point); what it sends back is either

* ``"delta"`` (default): its change against what it received, rounded to bfloat16; the receiver adds it to its own
  float32 copy. Error per round: one rounding of the *change*, ``|dw| * 2^-9`` per weight; weights no worker
  touched and the bits below bfloat16 of every master survive, so small updates accumulate as in float32.
* ``"params"``: its parameters, rounded to bfloat16, written over the master. Error per round: one rounding of the
  *weight*, ``|w| * 2^-9``; an update smaller than that is lost, and the master carries only bfloat16's 8 bits.

Reductions (data parallel's gradient mean, local SGD's average) add the rounded contributions in float32.
The rounding is part of the algorithm (a pure function of the round), so every runtime computes the same numbers;
the MPI runtime moves the rounded values as their 16 bits (`pack` / `unpack`, losslessly: mpi4jax has no bfloat16).
"""

from __future__ import annotations

import functools
import inspect
import string
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from istjax.core.choice import Choice
from istjax.core.errors import ArgError

__all__ = ["DTYPES", "EXCHANGE_VALUES", "ExchangeValues", "FLOAT32", "Wire", "cast", "check_dtype", "dense_options",
           "dot_general", "dtype_options", "einsum", "has_low_matmul", "in_float32", "is_low", "map_in_turn", "pack",
           "unpack", "wire"]

#: The dtypes a model may compute in and an exchange may carry.
DTYPES = ("float32", "bfloat16")


class ExchangeValues(Choice):
    """What a worker sends back under a bfloat16 exchange: its change since it received (``delta``) or its values
    (``params``)."""

    DELTA = "delta"
    PARAMS = "params"


#: What a worker may send back under a bfloat16 exchange (`ExchangeValues`' values).
EXCHANGE_VALUES = ExchangeValues.values()
#: The exact dtype: a float32 compute or exchange changes nothing.
FLOAT32 = "float32"

PyTree = Any


def check_dtype(value: Any, arg: str = "dtype") -> str:
    """``value`` as a name in `DTYPES` (a dtype object is accepted), or an `ArgError` listing the choices."""
    try:
        name = jnp.dtype(value).name if not isinstance(value, str) else value
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ArgError(arg, value, f"{arg}={value!r} is not a dtype istjax computes or exchanges in;",
                       (f"choose one of {list(DTYPES)}:", [{arg: d} for d in DTYPES], "."))
    return name


def is_low(dtype: Any) -> bool:
    """True for bfloat16 (a dtype or its name): the dtype whose matmuls take the float32-accumulating path."""
    return dtype is not None and jnp.dtype(dtype) == jnp.bfloat16


# ----------------------------------------------------------------------------------------------------------------
# Compute: matmuls and convolutions that take bfloat16 operands and accumulate in float32, forward and backward.


def _matmul(spec: str, x: jax.Array, y: jax.Array) -> jax.Array:
    """``einsum(spec, x, y)`` of bfloat16 operands accumulated in float32, rounded to bfloat16. XLA's CPU runs it on
    its bfloat16 kernels when the contracted axes of ``x`` are its last (a layer's forward pass and its input
    gradient); a weight gradient (contracted over the batch, ``x``'s first axis) and batched products (attention's)
    are converted to float32 by XLA, as a plain bfloat16 dot would be."""
    return jnp.einsum(spec, x, y, preferred_element_type=jnp.float32).astype(x.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _einsum_low(spec: str, x: jax.Array, w: jax.Array) -> jax.Array:
    return _matmul(spec, x, w)


def _einsum_low_fwd(spec, x, w):
    return _einsum_low(spec, x, w), (x, w)


def _einsum_low_bwd(spec, residuals, g):
    """Both cotangents as bfloat16 products with float32 accumulation (the forward's own form): for ``a,b->c``,
    ``da = c,b->a`` and ``db = a,c->b`` (every index of an operand is in the other or the output)."""
    x, w = residuals
    (a, b), c = spec.split("->")[0].split(","), spec.split("->")[1]
    g = g.astype(x.dtype)
    return _matmul(f"{c},{b}->{a}", g, w), _matmul(f"{a},{c}->{b}", x, g).astype(w.dtype)


_einsum_low.defvjp(_einsum_low_fwd, _einsum_low_bwd)


def einsum(spec: str, x: jax.Array, w: jax.Array) -> jax.Array:
    """``jnp.einsum(spec, x, w)`` of two operands; bfloat16 operands accumulate in float32 forward and backward.

    ``spec`` is explicit (``"btd,dhk->bthk"``) and no index is summed within one operand. Other dtypes (float32)
    run ``jnp.einsum`` unchanged.

    >>> x = jnp.ones((2, 3), jnp.bfloat16); w = jnp.ones((3, 4), jnp.bfloat16)
    >>> einsum("bi,io->bo", x, w).dtype
    dtype(bfloat16)
    """
    if is_low(x.dtype) and is_low(w.dtype):
        return _einsum_low(spec, x, w)
    return jnp.einsum(spec, x, w)


def _dot_spec(lhs_ndim: int, rhs_ndim: int, dimension_numbers) -> str:
    """The einsum of ``lax.dot_general``'s dimension numbers (output: batch, lhs free, rhs free)."""
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter(string.ascii_letters)
    lhs, rhs = [""] * lhs_ndim, [""] * rhs_ndim
    for i, j in list(zip(lb, rb)) + list(zip(lc, rc)):
        lhs[i] = rhs[j] = next(letters)
    lhs = [s or next(letters) for s in lhs]
    rhs = [s or next(letters) for s in rhs]
    out = [lhs[i] for i in lb] + [s for i, s in enumerate(lhs) if i not in lb and i not in lc] + \
          [s for j, s in enumerate(rhs) if j not in rb and j not in rc]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """A drop-in ``lax.dot_general`` (Flax's ``Dense(dot_general=...)``): bfloat16 operands go through `einsum`'s
    float32-accumulating path; anything else is ``lax.dot_general`` itself."""
    if is_low(lhs.dtype) and is_low(rhs.dtype) and preferred_element_type is None and not kwargs:
        return _einsum_low(_dot_spec(lhs.ndim, rhs.ndim, dimension_numbers), lhs, rhs)
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type, **kwargs)


def dense_options(dtype: Any) -> dict:
    """Keyword arguments for a Flax ``Dense`` / ``DenseGeneral`` computing in ``dtype``: none for float32 (the layer
    as it always was), else the dtype and the float32-accumulating `dot_general`."""
    return {"dtype": jnp.dtype(dtype), "dot_general": dot_general} if is_low(dtype) else {}


def dtype_options(dtype: Any) -> dict:
    """For a Flax ``Embed`` or ``Conv`` (whose ``conv_general_dilated`` is `istjax.models.conv_ops`'): its compute
    dtype; none for float32. Normalisations run in float32 instead (`in_float32`)."""
    return {"dtype": jnp.dtype(dtype)} if is_low(dtype) else {}


def has_low_matmul(jaxpr) -> bool:
    """Whether ``jaxpr`` (or a jaxpr nested in it) multiplies bfloat16 operands (a ``dot_general``)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general" and all(is_low(v.aval.dtype) for v in eqn.invars):
            return True
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns") and has_low_matmul(inner):
                    return True
    return False


def map_in_turn(fn, *args) -> bool:
    """Whether ``fn(*args)`` (traced on abstract values, nothing computed) is better mapped over workers one after
    another than vmapped, for its matmuls: on the CPU backend, a bfloat16 matmul batched over workers (each with its
    own weights) leaves XLA's bfloat16 kernels, which have no batched form, for a slow one (measured: data parallel's
    local phase at 0.35x its float32 speed when vmapped; benchmark study 8)."""
    if jax.default_backend() != "cpu":
        return False

    def abstract(x):
        return jax.ShapeDtypeStruct(jnp.shape(x), x.dtype if hasattr(x, "dtype") else jnp.result_type(x))

    return has_low_matmul(jax.make_jaxpr(fn)(*jax.tree.map(abstract, args)).jaxpr)


def in_float32(layer):
    """``layer`` (a normalisation: a Flax BatchNorm or LayerNorm, or a function ``fn(x, *params)``; usable as a
    decorator) run on its input in float32, its output returned in the input's dtype: statistics and normalisation in
    float32 whatever the compute dtype (a float32 input: ``layer`` itself, unchanged)."""
    def apply(x, *args, **kwargs):
        if x.dtype == jnp.float32:
            return layer(x, *args, **kwargs)
        return layer(x.astype(jnp.float32), *args, **kwargs).astype(x.dtype)

    return functools.wraps(layer)(apply) if inspect.isfunction(layer) else apply


def cast(x: jax.Array, dtype: Any) -> jax.Array:
    """A floating ``x`` in the compute ``dtype`` (float32: ``x`` itself); integers unchanged."""
    if not is_low(dtype) or not jnp.issubdtype(x.dtype, jnp.floating):
        return x
    return x.astype(dtype)


# ----------------------------------------------------------------------------------------------------------------
# Exchange: what crosses the wire.


def _round(x: jax.Array, dtype) -> jax.Array:
    return x.astype(dtype).astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x


class Wire(NamedTuple):
    """What crosses between workers and the server (module docstring).

    Attributes:
      dtype: ``"float32"`` (every method is the identity) or ``"bfloat16"``.
      values: ``"delta"`` or ``"params"``, what a worker sends back.
    """

    dtype: str = FLOAT32
    values: ExchangeValues = ExchangeValues.DELTA

    @property
    def exact(self) -> bool:
        """True when nothing is rounded (a float32 exchange)."""
        return self.dtype == FLOAT32

    @property
    def itemsize(self) -> int:
        """Bytes per floating element on the wire."""
        return jnp.dtype(self.dtype).itemsize

    def round(self, tree: PyTree) -> PyTree:
        """Every floating leaf rounded to the wire dtype (kept in its own dtype): what arrives of ``tree``."""
        return tree if self.exact else jax.tree.map(lambda x: _round(x, self.dtype), tree)

    def up(self, trained: PyTree, started: PyTree) -> PyTree:
        """What a worker sends back: its ``trained`` tree's change since ``started`` (what it received), or
        ``trained`` itself, rounded."""
        if self.exact:
            return trained
        if self.values == ExchangeValues.PARAMS:
            return self.round(trained)
        return jax.tree.map(lambda t, s: _round(t - s, self.dtype) if jnp.issubdtype(t.dtype, jnp.floating) else t,
                            trained, started)

    def back(self, sent_up: PyTree, exact: PyTree) -> PyTree:
        """The receiver's reading of `up`: ``exact`` (its float32 copy of what it sent the worker) plus the change,
        or the values themselves."""
        if self.exact or self.values == ExchangeValues.PARAMS:
            return sent_up
        return jax.tree.map(lambda e, d: e + d if jnp.issubdtype(e.dtype, jnp.floating) else d, exact, sent_up)

    def returned(self, trained: PyTree, exact: PyTree) -> PyTree:
        """`back` of `up` of a worker that started from ``round(exact)``: what the server ends up with."""
        if self.exact:
            return trained
        return self.back(self.up(trained, self.round(exact)), exact)

    def shapes(self, tree: PyTree) -> PyTree:
        """``tree``'s shapes (arrays or `jax.ShapeDtypeStruct`) as they cross: floating leaves in the wire dtype
        (bytes counted from them are what moves; `istjax.core.comm`)."""
        if self.exact:
            return tree

        def one(x):
            narrower = jnp.issubdtype(x.dtype, jnp.floating) and jnp.dtype(x.dtype).itemsize > self.itemsize
            return jax.ShapeDtypeStruct(np.shape(x), jnp.dtype(self.dtype)) if narrower else x

        return jax.tree.map(one, tree)


def wire(dtype: Any = FLOAT32, values: str = "delta") -> Wire:
    """A `Wire`, its arguments checked: ``dtype`` in `DTYPES`, ``values`` in `EXCHANGE_VALUES`, and ``values`` left
    at ``"delta"`` under a float32 exchange, where it would change nothing (refused, not ignored)."""
    name = check_dtype(dtype, "exchange_dtype")
    if values not in EXCHANGE_VALUES:
        raise ArgError("exchange_values", values, f"exchange_values={values!r}:",
                       (f"choose one of {list(EXCHANGE_VALUES)}:", [{"exchange_values": v} for v in EXCHANGE_VALUES],
                        "."))
    if name == FLOAT32 and values != ExchangeValues.DELTA:
        raise ArgError("exchange_values", values,
                       f"exchange_values={values!r} with exchange_dtype='float32': what a worker sends back is chosen "
                       f"only for a bfloat16 exchange (float32 carries every value exactly), so it would change "
                       f"nothing.", ("Drop it, or set", {"exchange_dtype": "bfloat16"}, "."))
    return Wire(name, ExchangeValues(values))


def pack(tree: PyTree, dtype: Any) -> PyTree:
    """``tree`` as it crosses MPI: float32 leaves whose values are ``dtype``'s (rounded by `Wire`) as that dtype's
    raw 16 bits (``uint16``), losslessly; other leaves as they are. Identity for float32."""
    if not is_low(dtype):
        return tree

    def one(x):
        if x.dtype != jnp.float32:
            return x
        return lax.bitcast_convert_type(x.astype(dtype), jnp.uint16)

    return jax.tree.map(one, tree)


def unpack(tree: PyTree, like: PyTree, dtype: Any) -> PyTree:
    """The inverse of `pack`: ``like`` (arrays or shapes) gives each leaf's dtype."""
    if not is_low(dtype):
        return tree

    def one(x, ref):
        if jnp.dtype(ref.dtype) != jnp.float32:
            return x
        return lax.bitcast_convert_type(x, jnp.dtype(dtype)).astype(jnp.float32)

    return jax.tree.map(one, tree, like)
