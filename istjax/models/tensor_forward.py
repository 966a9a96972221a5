"""A tensor-parallel shard's forward pass of a dense network, Megatron-LM's layout (arXiv 1909.08053), from the
module's own ``__call__``: `istjax.models.MLP` and `istjax.models.SparseMLP` give it as their ``tensor_logits``.

The module names the logical axes tensor parallelism cuts (``tensor_axes()``, `istjax.core.contract`): shard ``p``
of ``P`` holds block ``p`` of the last such axis of every parameter (`cut_axes`), the rest whole. Every
`flax.linen.Dense` (and `istjax.models.EmbeddingBag`) call is replaced through `flax.linen.intercept_methods` by
what its kernel's cut makes of it, ``ops`` being `istjax.core.collectives.Differentiable`:

* output units cut, input whole (*column-split*): ``enter(x) @ W[:, p]``, the shard's own units; ``enter`` sums
  the input's gradient over the shards (a whole input that no parameter produced, the data, costs nothing);
* input units cut, output whole (*row-split*): ``reduce(x_p @ W[p, :])``, the partial sums added, one all-reduce;
  the bias, held whole, added once after it;
* both cut (a layer on cut units whose own units are cut too, e.g. the label blocks of `SparseMLP`'s output):
  ``gather_columns(x_p) @ W[:, p]``: the input's units all-gathered, the shard's own output block;
* neither: the layer as it is, every shard computing the same.

So an MLP that cuts every other hidden layer (``hidden_0``, ``hidden_2``, ...) runs Megatron's pairs: a
column-split layer, then a row-split one, one all-reduce a pair. Everything between the dense layers acts on each
unit alone (ReLU, BatchNorm with batch statistics: every shard computes the same examples) and so runs unchanged
on a shard's units. A layer this cannot run on cut units (a convolution, a LayerNorm over cut features) is refused
naming it, when `check` traces the pass abstractly, before anything is compiled.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
from flax.core import meta
from flax.linen.dtypes import promote_dtype
from jax import lax

from istjax.core.collectives import Differentiable, differentiable, lax_collectives
from istjax.core.errors import ArgError
from istjax.core.state import WORKERS
from istjax.models.embedding_bag import EmbeddingBag, bag

__all__ = ["WHOLE", "check", "cut_axes", "every_other", "tensor_apply", "tensor_logits_method"]

#: The cut axis of a leaf every shard holds whole (`cut_axes`).
WHOLE = -1
PyTree = Any


def every_other(names: list[str]) -> frozenset:
    """Megatron's pairs along a chain of layers: the first, third, ... of ``names`` (the hidden layers' axis names,
    in order) cut, so that each layer whose units are cut is followed by one whose input units are."""
    return frozenset(names[0::2])


def _inputs(x: jax.Array, shared: Any) -> tuple:
    return (x,) if shared is None else (x, shared)


def _names(module: nn.Module, inputs: tuple) -> PyTree:
    """The parameters' logical axis names, a params-shaped tree of tuples (None for an unnamed axis), traced
    abstractly (`jax.eval_shape`): no process makes the whole model."""
    shapes = jax.eval_shape(lambda: module.init(jax.random.key(0), *inputs, train=False))
    return jax.tree.map(lambda leaf: tuple(leaf.names) if isinstance(leaf, nn.Partitioned) else
                        (None,) * len(leaf.shape), shapes.get("params", {}),
                        is_leaf=lambda v: isinstance(v, meta.AxisMetadata))


def cut_axes(module: nn.Module, x: jax.Array, shared: Any = None) -> PyTree:
    """A params-shaped tree of ints: the axis of each leaf cut into a block per shard (the last one named in the
    module's ``tensor_axes()``), or `WHOLE`. ``x``: an example input (only its shape and dtype matter)."""
    axes = frozenset(module.tensor_axes())

    def last(names):
        cut = [i for i, n in enumerate(names) if n in axes]
        return cut[-1] if cut else WHOLE

    return jax.tree.map(last, _names(module, _inputs(x, shared)), is_leaf=lambda v: isinstance(v, tuple))


def _cuts(module: nn.Module, inputs: tuple) -> dict[tuple[str, ...], tuple[bool, bool]]:
    """Module path -> (input units cut, output units cut): of its ``kernel`` when it has one, else whether any of its
    parameters is cut (both flags)."""
    axes = frozenset(module.tensor_axes())
    out: dict[tuple[str, ...], tuple[bool, bool]] = {}
    for path, names in jax.tree_util.tree_flatten_with_path(_names(module, inputs),
                                                           is_leaf=lambda v: isinstance(v, tuple))[0]:
        keys = tuple(k.key for k in path)
        if keys[-1] == "kernel" and len(names) >= 2:
            out[keys[:-1]] = (names[-2] in axes, names[-1] in axes)
        elif keys[:-1] not in out and any(n in axes for n in names):
            out[keys[:-1]] = (True, True)
    return out


def _dense(layer: nn.Dense, x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``layer``'s linear map of ``x`` by ``kernel`` (a block of its own), in its compute dtype, without the bias."""
    x, kernel = promote_dtype(x, kernel, dtype=layer.dtype)
    dot = layer.dot_general if layer.dot_general is not None else lax.dot_general
    return dot(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=layer.precision)


def _biased(layer: nn.Module, y: jax.Array) -> jax.Array:
    if not getattr(layer, "use_bias", False):
        return y
    (bias,) = promote_dtype(layer.get_variable("params", "bias"), dtype=y.dtype)
    return y + bias.reshape((1,) * (y.ndim - 1) + bias.shape)


def _refuse(layer: nn.Module, why: str) -> ArgError:
    return ArgError("model", type(layer).__name__,
                    f"tensor_parallel cannot cut {type(layer).__name__} {'/'.join(layer.path) or layer.name!r}: "
                    f"{why}", "Name only dense layers' units in the model's tensor_axes(), or use IST or data "
                    "parallel for this model.")


def tensor_apply(module: nn.Module, variables, x: jax.Array, shared: Any = None, *, ops: Differentiable):
    """``module.apply(variables, x[, shared], train=False)`` on shard ``ops.index()``'s blocks of the parameters
    (`cut_axes`): the whole network's output on every shard, or its block of the output units when they are cut
    (module docstring)."""
    inputs = _inputs(x, shared)
    cuts = _cuts(module, inputs)

    def interceptor(next_fun, args, kwargs, context):
        layer = context.module
        cut_in, cut_out = cuts.get(tuple(layer.path), (False, False))
        if context.method_name != "__call__" or not (cut_in or cut_out):
            return next_fun(*args, **kwargs)
        if isinstance(layer, (nn.Conv, nn.ConvTranspose)):
            raise _refuse(layer, "a convolution's channels are not cut by this pass.")
        if isinstance(layer, nn.LayerNorm):
            raise _refuse(layer, "it normalises over features that are cut.")
        if not isinstance(layer, (nn.Dense, EmbeddingBag)):
            return next_fun(*args, **kwargs)  # a parameter used unit by unit (MLP's BatchNorm scale)
        if isinstance(layer, EmbeddingBag):  # its input, the feature ids, is never cut
            return _biased(layer, bag(args[0], layer.get_variable("params", "kernel"), layer.slot_chunk))
        kernel, h = layer.get_variable("params", "kernel"), args[0]
        if cut_in and cut_out:
            return _biased(layer, _dense(layer, ops.gather_columns(h), kernel))
        if cut_in:
            return _biased(layer, ops.reduce(_dense(layer, h, kernel)))
        return _biased(layer, _dense(layer, ops.enter(h), kernel))

    with nn.intercept_methods(interceptor):
        return module.apply(variables, *inputs, train=False)


def tensor_logits_method(self, variables, x: jax.Array, shared: Any = None, *, ops: Differentiable):
    """The ``tensor_logits`` of a dense network (`istjax.core.contract`): `tensor_apply` of its own ``__call__``."""
    return tensor_apply(self, variables, x, shared, ops=ops)


def check(module: nn.Module, x: jax.Array, shared: Any = None, size: int = 2) -> None:
    """Traces a shard's pass on ``size`` shards abstractly (``vmap`` over them): a layer it cannot cut is refused
    (`ArgError` naming it) before anything is compiled."""
    axes = cut_axes(module, x, shared)
    abstract = jax.eval_shape(lambda: module.init(jax.random.key(0), *_inputs(x, shared), train=False))["params"]
    abstract = nn.unbox(abstract)

    def block(leaf, axis):
        if axis == WHOLE:
            return jax.ShapeDtypeStruct((size,) + leaf.shape, leaf.dtype)
        shape = list(leaf.shape)
        shape[axis] //= size
        return jax.ShapeDtypeStruct((size,) + tuple(shape), leaf.dtype)

    shards = jax.tree.map(block, abstract, axes)
    ops = differentiable(lax_collectives(size))
    jax.eval_shape(jax.vmap(lambda p: module.tensor_logits({"params": p}, x, shared, ops=ops), axis_name=WORKERS),
                   shards)
