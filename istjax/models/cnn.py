"""A small residual CNN with BatchNorm, partitioned over channels (IST on ResNets).

ResNet (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016) with basic blocks::

    stem:   conv3x3(C -> widths[0]) -> BN -> ReLU
    stage i (i > 0 first downsamples): conv3x3/2(widths[i-1] -> widths[i]) -> BN -> ReLU
            then blocks[i] times:  y = ReLU(x + BN(conv3x3(ReLU(BN(conv3x3(x))))))
                                    (widths[i] -> inner[i][j] -> widths[i])
    head:   global average pool over H, W -> Dense(widths[-1] -> num_classes, with bias)

Convolutions have no bias (the BatchNorm after each one has one). With ``widths=(64, 128, 256, 512)`` and
``blocks=(2, 2, 2, 2)`` this is the CIFAR ResNet-18 layout minus the strided 1x1 shortcuts: here the stride-2
transition conv changes the width *before* a stage's blocks, so every shortcut is an identity.

Neuron groups (what Independent Subnetwork Training splits among workers; Yuan et al., arXiv 1910.02120, train a
ResNet-18 on CIFAR-10 with its channels partitioned):

* ``"stage_i"``: the channels of stage i's residual stream. Every conv that reads or writes the stream (stem,
  transitions, each block's first conv input and second conv output) and every BatchNorm on it share this group,
  so the identity shortcuts stay aligned: a worker holding stream channels ``S`` adds its block output on ``S``.
* ``"block_i_j"``: the inner (hidden) channels of block j of stage i, between its two convs.

Each conv kernel ``[kh, kw, in, out]`` is partitioned on its in and out channel axes (logical names
``(None, None, in_group, out_group)``), each BatchNorm's ``scale``/``bias`` by its channel group, the head Dense by
its input channels (``("stage_{L-1}", "classes")``; its bias is shared). ``"image_channels"`` and ``"classes"`` stay
whole. `CNN.partition_rules` is that table; `CNN.subnet` is the same module at one worker's widths, so one apply
function runs the full network and every sub-network.

BatchNorm (``batch_norm=``):

* ``"running"``: `flax.linen.BatchNorm`, running mean/variance in the ``batch_stats`` collection. ``train=True``
  normalises with batch statistics and updates the running averages (apply with ``mutable=["batch_stats"]``);
  ``train=False`` uses the running averages. The running ``mean``/``var`` carry no logical names: they are
  partitioned like the sibling ``scale`` of the same BatchNorm module (``params/<bn>/scale`` ->
  ``batch_stats/<bn>/mean``, ``batch_stats/<bn>/var``).
* ``"batch"``: `istjax.models.layers.BatchStatNorm`, always the current batch's statistics, no state (the IST
  paper's choice). The parameter tree is the same as with ``"running"`` (``<bn>/scale``, ``<bn>/bias``); there is
  no ``batch_stats``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

import istjax.models.layers as layers
from istjax.core.errors import ArgError
from istjax.models.conv_ops import conv

__all__ = ["CNN"]


class CNN(layers.ImageModelMethods, nn.Module):
    """Residual CNN with BatchNorm, partitioned over channels (see the module docstring).

    Attributes:
      widths: channels of the residual stream of each stage, e.g. ``(8, 16)``; stage i > 0 starts with a
        stride-2 conv, so the spatial size halves per stage.
      blocks: residual blocks per stage, the same length as ``widths``.
      inner: ``inner[i][j]`` is the inner channel count of block j of stage i (``len(inner[i]) == blocks[i]``);
        None means ``inner[i][j] = widths[i]``.
      num_classes: output width.
      batch_norm: ``"running"`` (flax BatchNorm with running averages in ``batch_stats``) or ``"batch"`` (current
        batch's statistics always, no state).
      bn_momentum: running-average momentum for ``"running"`` (new = m * old + (1 - m) * batch).
      image_shape: ``(H, W, C)`` to reshape flat inputs ``[B, H * W * C]`` to images (e.g. ``(8, 8, 1)`` for
        scikit-learn's digits); None: inputs are already ``[B, H, W, C]``.
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32.
    """

    widths: tuple[int, ...] = (8, 16)
    blocks: tuple[int, ...] = (1, 1)
    inner: tuple[tuple[int, ...], ...] | None = None
    num_classes: int = 10
    batch_norm: str = "running"
    bn_momentum: float = 0.9
    image_shape: tuple[int, ...] | None = None
    dtype: str = "float32"

    def __post_init__(self):
        widths = layers.pos_ints("CNN", "widths", self.widths, "e.g. widths=(8, 16).")
        blocks = layers.pos_ints(
            "CNN", "blocks", self.blocks, f"give one positive block count per stage, e.g. blocks={(1,) * len(widths)}.")
        if len(blocks) != len(widths):
            raise ArgError(("blocks", "widths"), self.blocks,
                           f"CNN.blocks={self.blocks!r} has {len(blocks)} entries but widths={self.widths!r} has "
                           f"{len(widths)};", f"give one block count per stage, e.g. blocks={(1,) * len(widths)}.")
        inner = self.inner
        if inner is not None:
            example = tuple((w,) * b for w, b in zip(widths, blocks))
            fix = f"give one tuple per stage with one width per block, e.g. inner={example} (or inner=None)."
            if isinstance(inner, (str, bytes)) or not isinstance(inner, Sequence) or len(inner) != len(widths):
                raise ArgError("inner", inner, f"CNN.inner={inner!r}: needs {len(widths)} entries (one per stage);", fix)
            inner = tuple(layers.pos_ints("CNN", f"inner[{i}]", row, fix) for i, row in enumerate(inner))
            for i, (row, b) in enumerate(zip(inner, blocks)):
                if len(row) != b:
                    raise ArgError(("inner", "blocks"), self.inner,
                                   f"CNN.inner[{i}]={row!r} has {len(row)} entries but blocks[{i}]={b};", fix)
        layers.check_image_model_fields(self)
        # Normalise lists to tuples (fields are frozen; flax compares and hashes them).
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "inner", inner)
        super().__post_init__()

    def inner_widths(self) -> tuple[tuple[int, ...], ...]:
        """``inner`` with None filled in: ``inner_widths()[i][j]`` is block j of stage i's inner channel count."""
        if self.inner is not None:
            return self.inner
        return tuple((w,) * b for w, b in zip(self.widths, self.blocks))

    def partition_rules(self) -> dict[str, str | None]:
        """Logical axis name -> neuron group: ``stage_i`` and ``block_i_j`` are groups; image channels and classes
        stay whole."""
        rules: dict[str, str | None] = {"image_channels": None, "classes": None}
        for i, b in enumerate(self.blocks):
            rules[f"stage_{i}"] = f"stage_{i}"
            for j in range(b):
                rules[f"block_{i}_{j}"] = f"block_{i}_{j}"
        return rules

    def subnet(self, units: Mapping[str, int]) -> "CNN":
        """This module at the widths of one worker's sub-network: ``units["stage_i"]`` stream channels in stage i,
        ``units["block_i_j"]`` inner channels in block j of stage i; groups missing from ``units`` keep their
        width (other keys are ignored)."""
        widths = tuple(int(units.get(f"stage_{i}", w)) for i, w in enumerate(self.widths))
        inner = tuple(tuple(int(units.get(f"block_{i}_{j}", c)) for j, c in enumerate(row))
                      for i, row in enumerate(self.inner_widths()))
        return self.clone(widths=widths, inner=inner)

    def _bn(self, name: str, group: str, x: jax.Array, train: bool) -> jax.Array:
        return layers.batch_norm(self, name, group, x, train)

    def _conv(self, features: int, names_in: str, names_out: str, name: str, strides: int = 1) -> nn.Conv:
        return conv(features, 3, names_in, names_out, name, strides, dtype=self.dtype)

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool = True) -> jax.Array:
        x = layers.as_image(self, x_BxHxWxC)
        inner = self.inner_widths()
        group = "stage_0"
        x = self._conv(self.widths[0], "image_channels", group, "conv_stem")(x)
        x = nn.relu(self._bn("bn_stem", group, x, train))
        for i, width in enumerate(self.widths):
            if i > 0:
                prev, group = group, f"stage_{i}"
                x = self._conv(width, prev, group, f"stage{i}_down_conv", strides=2)(x)
                x = nn.relu(self._bn(f"stage{i}_down_bn", group, x, train))
            for j in range(self.blocks[i]):
                hidden = f"block_{i}_{j}"
                pre = f"stage{i}_block{j}"
                h = self._conv(inner[i][j], group, hidden, f"{pre}_conv1")(x)
                h = nn.relu(self._bn(f"{pre}_bn1", hidden, h, train))
                h = self._conv(width, hidden, group, f"{pre}_conv2")(h)
                h = self._bn(f"{pre}_bn2", group, h, train)
                x = nn.relu(x + h)
        x_BxF = jnp.mean(x, axis=(1, 2))
        return layers.head(self.num_classes, group, dtype=self.dtype)(x_BxF)
