"""A small VGG with BatchNorm, partitioned over channels and hidden units (channel IST on a plain CNN).

VGG (Simonyan and Zisserman, ICLR 2015) with BatchNorm after every conv::

    stage i:  [conv3x3(-> features[i][j]) -> BN -> ReLU] for every j, then max-pool 2x2 / 2
    head:     global average pool over H, W -> [Dense(hidden[k]) -> ReLU] for every k -> Dense(num_classes)

Convolutions have no bias (the BatchNorm after each one has one); the Dense layers have biases. The max-pool uses
``"SAME"`` padding, so an odd or 1-pixel feature map is not dropped (for even sizes it equals ``"VALID"``).

Global average pooling instead of flattening: the classic VGG flattens the last ``[H, W, C]`` feature map into the
first Dense layer, whose input axis would then hold ``H * W`` interleaved copies of the last conv group (a tiled
axis whose tile count depends on the image size). Averaging over H and W first makes the first Dense input exactly
the last conv's channels, so its kernel is named ``(conv_{last}, fc_0)`` and nothing depends on the image size
(as in the CIFAR VGG variants that pool to 1x1 before a small classifier).

``width_multiplier`` scales every conv width and every hidden width (rounded half up, at least 1), so tests and CPU
runs use narrow copies of the same code.

Neuron groups: ``"conv_i_j"`` the output channels of conv j of stage i (its kernel's out axis, its BatchNorm, the
next conv's in axis), ``"fc_k"`` the units of hidden Dense k (its kernel's out axis and bias, the next Dense's in
axis). ``"image_channels"`` and ``"classes"`` map to None. There are no residual additions (`VGG.tied_axes` is
empty). BatchNorm (``batch_norm="running"`` or ``"batch"``), ``bn_momentum`` and ``image_shape`` are as in
`istjax.models.CNN` and `istjax.models.ResNet`.
"""

from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

import istjax.models.layers as layers
from istjax.core import precision
from istjax.models.conv_ops import conv as _conv

__all__ = ["VGG"]


class VGG(layers.ImageModelMethods, nn.Module):
    """VGG with BatchNorm and a global-average-pooled Dense classifier (see the module docstring).

    Attributes:
      features: conv widths per stage (before ``width_multiplier``), e.g. ``((64,), (128,), (256, 256))``: each
        stage ends with a 2x2 max-pool, so the spatial size halves per stage.
      hidden: hidden Dense widths of the classifier (before ``width_multiplier``), e.g. ``(512,)``; ``()`` for a
        linear classifier on the pooled features.
      width_multiplier: every width is multiplied by it and rounded half up to an int >= 1.
      num_classes: output width.
      batch_norm: ``"running"`` (running averages in ``batch_stats``) or ``"batch"`` (batch statistics always).
      bn_momentum: running-average momentum for ``"running"``.
      image_shape: ``(H, W, C)`` to reshape flat inputs ``[B, H * W * C]``; None: inputs are ``[B, H, W, C]``.
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32.
    """

    features: tuple[tuple[int, ...], ...] = ((64,), (128,), (256, 256))
    hidden: tuple[int, ...] = (512,)
    width_multiplier: float = 1.0
    num_classes: int = 10
    batch_norm: str = "running"
    bn_momentum: float = 0.9
    image_shape: tuple[int, ...] | None = None
    dtype: str = "float32"

    def __post_init__(self):
        features = layers.nested_pos_ints("VGG", "features", self.features, None, "give one tuple of conv widths per "
                                    "stage, e.g. features=((64,), (128,), (256, 256)).")
        hidden = layers.pos_ints("VGG", "hidden", self.hidden, "e.g. hidden=(512,), or hidden=() for a linear classifier.",
                           allow_empty=True)
        layers.check_common(self)
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "hidden", hidden)
        super().__post_init__()

    def conv_widths(self) -> tuple[tuple[int, ...], ...]:
        """``features`` after ``width_multiplier``."""
        return tuple(tuple(layers.scaled(c, self.width_multiplier) for c in row) for row in self.features)

    def hidden_widths(self) -> tuple[int, ...]:
        """``hidden`` after ``width_multiplier``."""
        return tuple(layers.scaled(h, self.width_multiplier) for h in self.hidden)

    def partition_rules(self) -> dict[str, str | None]:
        """Logical axis name -> neuron group: every ``conv_i_j`` and ``fc_k`` is a group; image channels and classes
        stay whole."""
        rules: dict[str, str | None] = {"image_channels": None, "classes": None}
        for i, row in enumerate(self.features):
            for j in range(len(row)):
                rules[f"conv_{i}_{j}"] = f"conv_{i}_{j}"
        for k in range(len(self.hidden)):
            rules[f"fc_{k}"] = f"fc_{k}"
        return rules

    def tied_axes(self) -> list[tuple[str, ...]]:
        """Logical names whose channels a residual addition joins: none in a VGG."""
        return []

    def subnet(self, units: Mapping[str, int]) -> "VGG":
        """This module at one worker's widths: ``units["conv_i_j"]`` channels of conv j of stage i and
        ``units["fc_k"]`` units of hidden layer k (absolute counts, ``width_multiplier`` 1); groups missing from
        ``units`` keep their width, other keys are ignored."""
        features = tuple(tuple(int(units.get(f"conv_{i}_{j}", c)) for j, c in enumerate(row))
                         for i, row in enumerate(self.conv_widths()))
        hidden = tuple(int(units.get(f"fc_{k}", h)) for k, h in enumerate(self.hidden_widths()))
        return self.clone(features=features, hidden=hidden, width_multiplier=1.0)

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool = True) -> jax.Array:
        x = layers.as_image(self, x_BxHxWxC)
        group = "image_channels"
        for i, row in enumerate(self.conv_widths()):
            for j, width in enumerate(row):
                prev, group = group, f"conv_{i}_{j}"
                x = _conv(width, 3, prev, group, f"conv{i}_{j}", dtype=self.dtype)(x)
                x = nn.relu(layers.batch_norm(self, f"bn{i}_{j}", group, x, train))
            x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = jnp.mean(x, axis=(1, 2))
        for k, width in enumerate(self.hidden_widths()):
            prev, group = group, f"fc_{k}"
            x = nn.Dense(width, use_bias=True, name=f"fc{k}", **precision.dense_options(self.dtype),
                         kernel_init=nn.with_logical_partitioning(nn.initializers.he_normal(), (prev, group)),
                         bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (group,)))(x)
            x = nn.relu(x)
        return layers.head(self.num_classes, group, dtype=self.dtype)(x)
