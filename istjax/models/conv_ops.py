"""A convolution whose gradients stay fast inside `lax.scan` on XLA's CPU backend.

XLA:CPU runs a convolution through its fast (Eigen) kernel only when the convolution is in canonical form: input
`[batch, spatial..., feature]`, kernel `[spatial..., in, out]`, output `[batch, spatial..., feature]`, no feature
groups. JAX's transpose rules express the kernel gradient and the input gradient of an NHWC convolution with other
dimension labels (for the kernel gradient the batch dimension becomes the contracted feature dimension). In a
top-level computation XLA's canonicalisation pass rewrites them with transposes; inside a ``while`` body (every
`lax.scan`, so every K-step local phase) it does not, and the generic loop nest that runs instead is 10-25x slower
(jax issue 12868; measured here: a ResNet step inside ``lax.scan`` 10x slower than the same step outside).

`conv_general_dilated` is a drop-in for `jax.lax.conv_general_dilated` (and `flax.linen.Conv`'s
``conv_general_dilated`` field) with a custom VJP that writes both gradients as canonical convolutions, with the
transposes spelled out, so they are fast wherever they run. The forward pass is the plain convolution. It handles
channel-last convolutions of any spatial rank with strides, padding, no input dilation, no kernel dilation and one
feature group (the case every istjax conv model uses); any other call is passed to `lax.conv_general_dilated`
unchanged. Reverse mode only: `jax.jvp` / forward-mode through it is not defined (`jax.custom_vjp`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from istjax.core import precision as precision_lib

__all__ = ["conv", "conv_general_dilated"]


def _channel_last(n: int) -> lax.ConvDimensionNumbers:
    """NH..WC / H..WIO / NH..WC for ``n`` spatial dimensions."""
    spatial = tuple(range(1, n + 1))
    return lax.ConvDimensionNumbers(lhs_spec=(0, n + 1) + spatial, rhs_spec=(n + 1, n) + tuple(range(n)),
                                    out_spec=(0, n + 1) + spatial)


def _is_channel_last(dimension_numbers: Any, n: int) -> bool:
    if dimension_numbers is None:  # lax's default is NCHW
        return False
    want = _channel_last(n)
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return tuple(map(tuple, dimension_numbers)) == tuple(map(tuple, want))
    spec = "".join("HWDXYZ"[i] for i in range(n)) if n <= 3 else None
    return spec is not None and tuple(dimension_numbers) == ("N" + spec + "C", spec + "IO", "N" + spec + "C")


def _ones(v: Any) -> bool:
    return v is None or all(int(d) == 1 for d in v)


def conv_general_dilated(lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int], padding: Any,
                         lhs_dilation: Sequence[int] | None = None, rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: Any = None, feature_group_count: int = 1, batch_group_count: int = 1,
                         precision: Any = None, preferred_element_type: Any = None) -> jax.Array:
    """`jax.lax.conv_general_dilated` with CPU-friendly gradients (see the module docstring); same arguments.
    bfloat16 operands are convolved in float32 and the result rounded to bfloat16 (float32 accumulation; XLA's CPU
    has no faster bfloat16 convolution: `istjax.core.precision`)."""
    if precision_lib.is_low(lhs.dtype) and preferred_element_type is None:
        return conv_general_dilated(lhs.astype(jnp.float32), rhs.astype(jnp.float32), window_strides, padding,
                                    lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count,
                                    batch_group_count, precision).astype(lhs.dtype)
    n = lhs.ndim - 2
    if not (_is_channel_last(dimension_numbers, n) and _ones(lhs_dilation) and _ones(rhs_dilation)
            and feature_group_count == 1 and batch_group_count == 1 and preferred_element_type is None):
        return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                        dimension_numbers, feature_group_count, batch_group_count, precision,
                                        preferred_element_type)
    strides = tuple(int(s) for s in window_strides)
    if isinstance(padding, str):
        pads = lax.padtype_to_pads(lhs.shape[1:-1], rhs.shape[:-2], strides, padding)
    else:
        pads = padding
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    return _conv(lhs, rhs, strides, pads, precision)


def _plain(x, k, strides, pads, precision):
    return lax.conv_general_dilated(x, k, strides, pads, dimension_numbers=_channel_last(x.ndim - 2),
                                    precision=precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _conv(x, k, strides, pads, precision):
    return _plain(x, k, strides, pads, precision)


def _conv_fwd(x, k, strides, pads, precision):
    return _plain(x, k, strides, pads, precision), (x, k)


def _conv_bwd(strides, pads, precision, res, dy):
    x, k = res
    return _input_grad(dy, k, x.shape, strides, pads, precision), _kernel_grad(x, dy, k.shape, strides, pads,
                                                                              precision)


def _kernel_grad(x, dy, k_shape, strides, pads, precision):
    """``dk[a, c, o] = sum_{b, i} x_pad[b, s i + a, c] dy[b, i, o]``: a canonical conv of the input, batch and
    feature swapped, with the output gradient as a kernel dilated by the stride."""
    n = x.ndim - 2
    spatial = tuple(range(1, n + 1))
    # Pad (or crop) x so that its extent is exactly (Ho - 1) s + kh: the VALID conv then yields kh positions.
    extent = [(dy.shape[1 + d] - 1) * strides[d] + k_shape[d] for d in range(n)]
    cfg = [(0, 0, 0)] + [(pads[d][0], extent[d] - x.shape[1 + d] - pads[d][0], 0) for d in range(n)] + [(0, 0, 0)]
    xp = lax.pad(x, jnp.zeros((), x.dtype), cfg)
    lhs = jnp.transpose(xp, (n + 1,) + spatial + (0,))       # [C, spatial..., B]
    rhs = jnp.transpose(dy, spatial + (0, n + 1))            # [Ho..., B, O]
    out = lax.conv_general_dilated(lhs, rhs, (1,) * n, [(0, 0)] * n, rhs_dilation=strides,
                                   dimension_numbers=_channel_last(n), precision=precision)  # [C, kh..., O]
    return jnp.transpose(out, spatial + (0, n + 1))           # [kh..., C, O]


def _input_grad(dy, k, x_shape, strides, pads, precision):
    """``dx``: the output gradient dilated by the stride, padded, correlated with the spatially flipped kernel whose
    in and out features are swapped; a canonical conv."""
    n = dy.ndim - 2
    kf = jnp.flip(k, axis=tuple(range(n)))
    kf = jnp.swapaxes(kf, n, n + 1)                          # [kh..., O, C]
    cfg = [(0, 0, 0)]
    for d in range(n):
        kh, lo, s = k.shape[d], pads[d][0], strides[d]
        dilated = (dy.shape[1 + d] - 1) * s + 1
        cfg.append((kh - 1 - lo, x_shape[1 + d] + kh - 1 - (kh - 1 - lo) - dilated, s - 1))
    cfg.append((0, 0, 0))
    dyp = lax.pad(dy, jnp.zeros((), dy.dtype), cfg)
    return lax.conv_general_dilated(dyp, kf, (1,) * n, [(0, 0)] * n, dimension_numbers=_channel_last(n),
                                    precision=precision)


_conv.defvjp(_conv_fwd, _conv_bwd)


def conv(features: int, size: int, names_in: str | None, names_out: str | None, name: str,
         strides: int = 1, dtype: str = "float32") -> nn.Conv:
    """The conv every istjax image model uses: bias-free, ``size x size``, SAME padding, He-normal kernel with
    logical names ``(None, None, names_in, names_out)``, run through `conv_general_dilated`, computing in ``dtype``
    (`istjax.core.precision`; float32 parameters either way)."""
    return nn.Conv(features, (size, size), strides=(strides, strides), padding="SAME", use_bias=False, name=name,
                   conv_general_dilated=conv_general_dilated, **precision_lib.dtype_options(dtype),
                   kernel_init=nn.with_logical_partitioning(nn.initializers.he_normal(),
                                                            (None, None, names_in, names_out)))
