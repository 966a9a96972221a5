"""The forward pass of a partitioned network from one owner's slice (the sharded MPI mode), for every model istjax
ships whose neuron groups are units, channels or features: MLP, CNN, ResNet, VGG, GCN and GraphSAGE.

In the sharded mode (`istjax.runtimes.mpi`) owner ``o`` of ``N`` holds units ``[o * s, (o + 1) * s)`` of every
neuron group (``s = size / N``) and, of a leaf with several partitioned axes, the slice of the first one
(`istjax.core.shard.Layout`): a conv kernel ``[kh, kw, in, out]`` whose input and output channels are both groups
is held as ``[kh, kw, in / N, out]``, the stem's ``[kh, kw, C, out / N]``, the head's ``[in / N, classes]``; an MLP's
hidden-to-hidden ``[H1, H2]`` kernel as ``[H1 / N, H2]``; GraphSAGE's ``[self, neighbour]`` rows as the owner's
features in each of the two tiles.

`owner_apply` runs a module's own ``__call__`` (``train=False``) on such a slice, with every `flax.linen.Conv`,
`flax.linen.Dense` and `flax.linen.LayerNorm` call replaced through `flax.linen.intercept_methods`:

* input channels partitioned: the owner convolves (multiplies) its input channels with its rows, giving a partial
  sum of every output channel; ``reduce`` adds the partial sums of all owners (an activation ``[B, H, W, out]``, not
  a weight), and the owner keeps its own output channels when they are a group, all of them otherwise;
* only the output channels partitioned: the owner's input is whole, its kernel gives its own output channels;
* nothing partitioned: the layer as it is;
* an `istjax.models.EmbeddingBag` (sparse rows; its feature ids are never partitioned) on the owner's columns
  gives the owner's units;
* a LayerNorm normalises over all features, so its sums (of the features, of their squares, and their count) are
  reduced across the owners: right whether the owner holds a slice of the features or, like every owner, all
  of them.

Everything else the module does acts on each channel alone and so runs unchanged on an owner's channels: BatchNorm
(running or batch statistics are per channel; its parameters and statistics are sharded like its channels), ReLU,
pooling, a graph's propagation (each feature over the edges alone), a concatenation of ``[self, neighbour]``
features (the owner's features in each tile, as its rows of the next kernel hold them), and residual additions,
whose two sides carry the same group (`tied_axes`), so the same slice of it.

Which axes are groups is read from the module's own logical axis names (``nn.with_logical_partitioning``) and
``partition_rules()``, traced abstractly (`jax.eval_shape`): no process materialises the whole model.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.core import meta
from jax import lax

from istjax.models.embedding_bag import EmbeddingBag, bag

__all__ = ["in_turns", "owner_apply", "owner_logits_method", "owner_statistics_method"]


def _inputs(x: jax.Array, shared: Any) -> tuple:
    """The module's positional inputs: ``x``, and the round's shared input when there is one (a graph)."""
    return (x,) if shared is None else (x, shared)


def _groups(module: nn.Module, inputs: tuple) -> dict[tuple[str, ...], tuple[bool, ...]]:
    """Module path + leaf name -> which axes of that parameter are neuron groups."""
    rules = module.partition_rules()
    shapes = jax.eval_shape(lambda: module.init(jax.random.key(0), *inputs, train=False))
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(
            shapes.get("params", {}), is_leaf=lambda v: isinstance(v, meta.AxisMetadata))[0]:
        names = leaf.names if isinstance(leaf, nn.Partitioned) else (None,) * len(leaf.shape)
        keys = tuple(k.key for k in path)
        out[keys] = tuple(n is not None and rules.get(n) is not None for n in names)
    return out


def _layer(module: nn.Module, x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The layer's linear map of ``x`` by ``kernel`` (a slice of the module's), without the bias."""
    if isinstance(module, nn.Dense):
        return jnp.dot(x, kernel)
    n = kernel.ndim - 2
    strides = module.strides if module.strides is not None else 1
    strides = (strides,) * n if isinstance(strides, int) else tuple(strides)
    if module.feature_group_count != 1 or any(d not in (None, 1) for d in (module.input_dilation,
                                                                         module.kernel_dilation)):
        raise NotImplementedError(f"owner_apply: {type(module).__name__} {module.name!r} uses dilation or feature "
                                  f"groups; only plain convolutions are evaluated from owners' slices.")
    padding = module.padding if isinstance(module.padding, str) else tuple(tuple(p) for p in module.padding)
    spatial = "HWDXYZ"[:n]
    return lax.conv_general_dilated(x, kernel, strides, padding,
                                    dimension_numbers=(f"N{spatial}C", f"{spatial}IO", f"N{spatial}C"))


def _norm(layer: nn.LayerNorm, x: jax.Array, reduce: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """``layer`` (a LayerNorm over the last axis) on an owner's features: the sums of the features, of their squares
    and their count reduced across the owners in one buffer, then flax's ``E[x^2] - E[x]^2`` variance."""
    if layer.reduction_axes not in (-1, (-1,)) or layer.feature_axes not in (-1, (-1,)):
        raise NotImplementedError(f"owner_apply: LayerNorm {layer.name!r} normalises over axes "
                                  f"{layer.reduction_axes}; only the last axis is evaluated from owners' slices.")
    stats = jnp.stack([jnp.sum(x, axis=-1), jnp.sum(x * x, axis=-1),
                       jnp.full(x.shape[:-1], x.shape[-1], x.dtype)], axis=-1)
    total, squares, count = jnp.moveaxis(reduce(stats), -1, 0)
    mean = (total / count)[..., None]
    var = jnp.maximum((squares / count)[..., None] - mean * mean, 0.0)
    y = (x - mean) * lax.rsqrt(var + layer.epsilon)
    for name, use, op in (("scale", layer.use_scale, jnp.multiply), ("bias", layer.use_bias, jnp.add)):
        if use:
            v = layer.get_variable("params", name)
            if v.shape != y.shape[-1:]:
                raise NotImplementedError(f"owner_apply: LayerNorm {layer.name!r} holds a {name} of {v.shape[0]} "
                                          f"features for an owner's {y.shape[-1]}; give it logical axis names "
                                          f"partitioned like its features.")
            y = op(y, v)
    return y


def _linear(layer: nn.Module, x: jax.Array, cut: tuple[bool, bool], owner, num_owners: int,
            reduce: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """A Conv or Dense ``layer`` on an owner's ``x``: partial sums reduced where its input channels are cut
    (``cut = (inputs, outputs)`` partitioned), the owner's output channels kept where those are, plus its bias."""
    cut_in, cut_out = cut
    y = _layer(layer, x, layer.get_variable("params", "kernel"))
    if cut_in:
        y = reduce(y)  # partial sums over each owner's input channels
        if cut_out:
            share = y.shape[-1] // num_owners
            y = lax.dynamic_slice_in_dim(y, owner * share, share, axis=y.ndim - 1)
    if getattr(layer, "use_bias", False):
        bias = layer.get_variable("params", "bias")  # sharded like the output channels, or held whole
        y = y + bias.reshape((1,) * (y.ndim - 1) + bias.shape)
    return y


def _bag(layer: EmbeddingBag, x: jax.Array) -> jax.Array:
    """An `EmbeddingBag` on an owner's columns of its kernel (its input, the feature ids, is never partitioned): the
    owner's own output units, or all of them when the output is not a group."""
    y = bag(x, layer.get_variable("params", "kernel"), layer.slot_chunk)
    return y + layer.get_variable("params", "bias")[None, :] if layer.use_bias else y


def owner_apply(module: nn.Module, variables, x: jax.Array, shared: Any = None, *, owner, num_owners: int,
                reduce: Callable[[jax.Array], jax.Array], train: bool = False, mutable=False):
    """``module.apply(variables, x[, shared], train=train, mutable=mutable)`` for an owner holding ``variables``, its
    slice of every leaf; equal to the whole network's output on every owner, up to summation order (module
    docstring), and, with ``train=True, mutable=["batch_stats"]``, to this owner's slice of the updated statistics
    (BatchNorm normalises each channel by its own batch statistics). ``shared`` is the round's shared input (a graph
    model's graph; None for a model that reads none). ``owner`` may be traced (the tests run the owners under
    `jax.vmap` with ``reduce = psum``)."""
    inputs = _inputs(x, shared)
    axes = _groups(module, inputs)

    def interceptor(next_fun, args, kwargs, context):
        layer = context.module
        if context.method_name == "__call__" and isinstance(layer, EmbeddingBag):
            return _bag(layer, args[0])
        if context.method_name != "__call__" or not isinstance(layer, (nn.Conv, nn.Dense, nn.LayerNorm)):
            return next_fun(*args, **kwargs)
        if isinstance(layer, nn.LayerNorm):
            if kwargs.get("mask") is not None or len(args) > 1:
                raise NotImplementedError(f"owner_apply: LayerNorm {layer.name!r} with a mask.")
            return _norm(layer, args[0], reduce)
        cut = axes[tuple(layer.path) + ("kernel",)][-2:]
        return _linear(layer, args[0], cut, owner, num_owners, reduce)

    with nn.intercept_methods(interceptor):
        return module.apply(variables, *inputs, train=train, mutable=mutable)


def owner_logits_method(self, variables, x: jax.Array, shared: Any = None, *, owner, num_owners: int, reduce):
    """The ``owner_logits`` of a partitioned model (`istjax.core.contract`): `owner_apply` of its own ``__call__``."""
    return owner_apply(self, variables, x, shared, owner=owner, num_owners=num_owners, reduce=reduce)


def owner_statistics_method(self, variables, x: jax.Array, shared: Any = None, *, owner, num_owners: int, reduce):
    """The ``owner_statistics`` of a channel-partitioned image model (`istjax.core.contract`): this owner's slice of
    the ``batch_stats`` a training-mode pass over ``x`` leaves (`owner_apply` with ``train=True``)."""
    _, updated = owner_apply(self, variables, x, shared, owner=owner, num_owners=num_owners, reduce=reduce, train=True,
                             mutable=["batch_stats"])
    return {"batch_stats": updated["batch_stats"]}


def in_turns(method: str, owner, num_owners: int, reduce: Callable[[jax.Array], jax.Array],
             partitioned: Callable[[tuple], bool] = lambda args: True):
    """A `flax.linen.intercept_methods` interceptor for networks split by depth (ResIST's ResNet, a transformer's
    blocks): a call of ``method`` whose last argument is the activation runs as ``num_owners`` turns. On turn ``t``
    owner ``t`` applies its blocks (the method on its slice) to the activation and ``reduce`` (a sum) hands the
    result, the others' zeros added, to every owner; only activations move. Calls for which ``partitioned(args)`` is
    False run as they are. An owner given as a Python int (the MPI runtime's rank) computes only its own turn; a
    traced one (the tests' `vmap`) selects it."""

    def turns(next_fun, args, kwargs, context):
        if context.method_name != method or not partitioned(args):
            return next_fun(*args, **kwargs)
        *head, h = args
        for t in range(num_owners):
            if isinstance(owner, int):
                mine_now = next_fun(*head, h) if owner == t else jnp.zeros_like(h)
            else:
                mine_now = jnp.where(owner == t, next_fun(*head, h), jnp.zeros_like(h))
            h = reduce(mine_now)
        return h

    return turns
