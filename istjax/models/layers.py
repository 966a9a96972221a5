"""Pieces the image models share (`ResNet`, `PreActResNet`, `VGG`, the depth-split ResNet, the MLP's field
checks): field validation with errors that name the model, the field, the value and the fix; width scaling; the
input reshape; BatchNorm and the classifier head with their logical axis names."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from istjax.core import precision
from istjax.core.errors import ArgError
from istjax.models.cnn import batch_norm, check_image_model_fields, is_pos_int

__all__ = ["as_image", "batch_norm", "check_choice", "check_common", "head", "is_pos_int", "nested_pos_ints", "pos_ints",
           "scaled"]


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
    you mean 'test'?); choose one of [...]``, the command line's fix naming ``--config.model.<field>``."""
    if value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1)
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        raise ArgError(field, value, f"{owner}.{field}={value!r}: unknown{mean};", f"choose one of {list(choices)}.",
                       f"choose one of {list(choices)}: --config.model.{field}={(close or list(choices))[0]}.")


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
