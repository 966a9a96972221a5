"""Pieces every model may share (a model imports these, never another model's module): field validation with errors
that name the model, the field, the value and the fix (`is_pos_int`, `pos_ints`, `check_choice`, and the image
models' common fields, `check_image_model_fields`); width scaling; the input reshape; BatchNorm with its logical
axis names (`channel_batch_norm`, the stateless `BatchStatNorm`, and `batch_norm`, running or batch statistics by
the model's ``batch_norm`` field); the classifier head; the MLPs' partition rules (`hidden_rules`); and
`ImageModelMethods`, the contract methods the channel-partitioned image models (`CNN`, `ResNet`, `VGG`) share."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import istjax.models.owner_forward as owner_forward
from istjax.core import precision
from istjax.core.errors import ArgError, Code

__all__ = ["BATCH_NORM_KINDS", "BatchStatNorm", "ImageModelMethods", "as_image", "batch_norm", "channel_batch_norm",
           "check_choice", "check_common", "check_image_model_fields", "head", "hidden_rules", "is_pos_int",
           "nested_pos_ints", "pos_ints", "scaled"]

BATCH_NORM_KINDS = ("running", "batch")


def is_pos_int(v: Any) -> bool:
    """True for an int (Python or numpy, not a bool) > 0."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v > 0


def pos_ints(owner: str, field: str, value: Any, fix: str, *, allow_empty: bool = False) -> tuple[int, ...]:
    """``value`` as a tuple of positive ints, or a ValueError naming ``owner.field``, the value and ``fix``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or (not value and not allow_empty) \
            or not all(is_pos_int(v) for v in value):
        what = "a sequence" if allow_empty else "a non-empty sequence"
        raise ArgError(field.split("[")[0], value, f"{owner}.{field}={value!r}: must be {what} of positive ints;", fix)
    return tuple(int(v) for v in value)


def nested_pos_ints(owner: str, field: str, value: Any, lengths: Sequence[int] | None, fix: str
                     ) -> tuple[tuple[int, ...], ...]:
    """A tuple of non-empty tuples of positive ints (``lengths[i]`` entries in row i when given)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value \
            or (lengths is not None and len(value) != len(lengths)):
        need = f"{len(lengths)} entries (one per stage)" if lengths is not None else "a non-empty sequence of stages"
        raise ArgError(field, value, f"{owner}.{field}={value!r}: needs {need};", fix)
    rows = tuple(pos_ints(owner, f"{field}[{i}]", row, fix) for i, row in enumerate(value))
    if lengths is not None:
        for i, (row, n) in enumerate(zip(rows, lengths)):
            if len(row) != n:
                raise ArgError(field, value, f"{owner}.{field}[{i}]={row!r} has {len(row)} entries but stage {i} has "
                                             f"{n} block(s);", fix)
    return rows


def check_image_model_fields(module: nn.Module) -> None:
    """Validates (and normalises) the fields every image model here shares: ``num_classes``, ``batch_norm``,
    ``bn_momentum`` and ``image_shape``; a ValueError names ``<Class>.<field>``, the value and the fix."""
    owner = type(module).__name__
    if not is_pos_int(module.num_classes):
        raise ArgError("num_classes", module.num_classes, f"{owner}.num_classes={module.num_classes!r}: must be a "
                                                          f"positive int,", "e.g. num_classes=10.")
    if module.batch_norm not in BATCH_NORM_KINDS:
        raise ArgError("batch_norm", module.batch_norm,
                       f"{owner}.batch_norm={module.batch_norm!r}: must be one of {BATCH_NORM_KINDS}",
                       "('running' keeps running averages in batch_stats; 'batch' always uses batch statistics).")
    m = module.bn_momentum
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, float, np.integer, np.floating)) or not 0 <= m < 1:
        raise ArgError("bn_momentum", m, f"{owner}.bn_momentum={m!r}: must be a number with 0 <= bn_momentum < 1,",
                       "e.g. 0.9.")
    if module.image_shape is not None:
        value = module.image_shape
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 3 \
                or not all(is_pos_int(v) for v in value):
            raise ArgError("image_shape", value, f"{owner}.image_shape={value!r}:",
                           "give (height, width, channels) as positive ints, e.g. (32, 32, 3), or None for inputs "
                           "that are already images [B, H, W, C].")
        object.__setattr__(module, "image_shape", tuple(int(v) for v in value))


def check_common(module: nn.Module) -> None:
    """Validates (and normalises) width_multiplier, then the fields every image model shares."""
    owner = type(module).__name__
    m = module.width_multiplier
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(m)) or not m > 0:
        raise ArgError("width_multiplier", m, f"{owner}.width_multiplier={m!r}: must be a finite number > 0 (every "
                       f"width is scaled by it and rounded to an int >= 1),",
                       "e.g. 1.0 for the paper's widths or 0.0625 for a tiny copy.")
    object.__setattr__(module, "width_multiplier", float(m))
    check_image_model_fields(module)


def check_choice(owner: str, field: str, value: Any, choices: Sequence[str]) -> None:
    """Refuses a ``value`` not among ``choices``, with the closest one: ``Transformer.scaling='tset': unknown (did
    you mean 'test'?); choose one of [...]``; the command line's fix also sets the field to the closest."""
    if value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1)
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        raise ArgError(field, value, f"{owner}.{field}={value!r}: unknown{mean};", (
            f"choose one of {list(choices)}", Code("", (":", {field: (close or list(choices))[0]})), "."))


def scaled(width: int, multiplier: float) -> int:
    """``width * multiplier`` rounded half up, at least 1."""
    return max(1, int(math.floor(width * multiplier + 0.5)))


def as_image(module: nn.Module, x: jax.Array) -> jax.Array:
    if module.image_shape is not None:
        x = x.reshape((x.shape[0],) + tuple(module.image_shape))
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


def head(num_classes: int, names_in: str, name: str = "head", dtype: str = "float32") -> nn.Dense:
    return nn.Dense(num_classes, use_bias=True, name=name, **precision.dense_options(dtype),
                    kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), (names_in, "classes")),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))


def hidden_rules(num_hidden: int) -> dict[str, str | None]:
    """An MLP's logical axis name -> neuron group (`istjax.models.MLP`, `istjax.models.SparseMLP`): every hidden
    layer ``hidden_i`` is its own group; ``input`` and ``classes`` stay whole."""
    return {"input": None, "classes": None, **{f"hidden_{i}": f"hidden_{i}" for i in range(num_hidden)}}


# --------------------------------------------------------------------------
# BatchNorm
# --------------------------------------------------------------------------


@precision.in_float32
def channel_batch_norm(x_BxHxWxC: jax.Array, scale_C=None, bias_C=None, eps: float = 1e-5) -> jax.Array:
    """Normalises each channel (last axis) with the mean and biased variance over every other axis.

    Works for any rank >= 2 (``[B, C]``, ``[B, H, W, C]``, ...); optional affine ``scale_C``, ``bias_C``.
    """
    axes = tuple(range(x_BxHxWxC.ndim - 1))
    mean_1x1x1xC = jnp.mean(x_BxHxWxC, axis=axes, keepdims=True)
    var_1x1x1xC = jnp.mean(jnp.square(x_BxHxWxC - mean_1x1x1xC), axis=axes, keepdims=True)
    y = (x_BxHxWxC - mean_1x1x1xC) * jax.lax.rsqrt(var_1x1x1xC + eps)
    bshape = (1,) * (x_BxHxWxC.ndim - 1) + (-1,)
    if scale_C is not None:
        y = y * jnp.reshape(scale_C, bshape)
    if bias_C is not None:
        y = y + jnp.reshape(bias_C, bshape)
    return y


class BatchStatNorm(nn.Module):
    """Stateless BatchNorm over the last axis (batch statistics always), params ``scale``/``bias`` named ``group``."""

    group: str | None = None
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        scale_C = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, (self.group,)), (c,))
        bias_C = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, (self.group,)), (c,))
        return channel_batch_norm(x, scale_C, bias_C, self.epsilon)


def batch_norm(module: nn.Module, name: str, group: str, x: jax.Array, train: bool) -> jax.Array:
    """A BatchNorm named ``name`` whose scale and bias carry logical name ``group`` (running stats follow them):
    `BatchStatNorm` for ``module.batch_norm == "batch"``, else flax's with running averages in ``batch_stats``."""
    if module.batch_norm == "batch":
        return BatchStatNorm(group=group, name=name)(x)
    return precision.in_float32(nn.BatchNorm(
        use_running_average=not train, momentum=module.bn_momentum, use_scale=True, use_bias=True, name=name,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, (group,)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (group,))))(x)


class ImageModelMethods:
    """The contract methods (`istjax.core.contract`) every channel-partitioned image model with a ``batch_norm``
    field shares; a model lists it before ``nn.Module`` (``class VGG(layers.ImageModelMethods, nn.Module)``)."""

    # The sharded MPI mode: this network's forward pass from one owner's channels, the partial sums of each conv
    # reduced across the owners (`istjax.models.owner_forward`), for evaluation and recomputed statistics.
    owner_logits = owner_forward.owner_logits_method
    owner_statistics = owner_forward.owner_statistics_method

    def test_batch_statistics(self) -> bool:
        """True for ``batch_norm="batch"``: test-time BatchNorm then uses the statistics of the evaluation batch."""
        return self.batch_norm == "batch"

    def without_batch_statistics(self) -> dict:
        """The fields that make this module evaluate with running statistics instead."""
        return {"batch_norm": "running"}
