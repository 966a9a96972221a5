"""CIFAR-style ResNets with BatchNorm, partitioned over channels (channel IST on ResNets).

Two families with basic blocks (two 3x3 convs per block; bottleneck blocks are not implemented):

* `ResNet`: the original post-activation network (He et al., "Deep Residual Learning for Image Recognition",
  CVPR 2016), CIFAR layout::

      stem:    conv3x3(C -> w0) -> BN -> ReLU                           (no max-pool)
      block:   y = ReLU(shortcut(x) + BN(conv3x3(ReLU(BN(conv3x3/s(x))))))
      shortcut: identity, or BN(conv1x1/s(x)) (a projection) where the stride or the width changes
      head:    global average pool -> Dense(num_classes)

* `PreActResNet`: the pre-activation network (He et al., "Identity Mappings in Deep Residual Networks", ECCV 2016)::

      stem:    conv3x3(C -> w0)                                         (no BN, no ReLU: the first block has them)
      block:   a = ReLU(BN(x));  y = shortcut + conv3x3(ReLU(BN(conv3x3/s(a))))
      shortcut: x, or conv1x1/s(a) (a projection of the activated input) where the stride or the width changes
      head:    ReLU(BN(x)) -> global average pool -> Dense(num_classes)

Stage i has ``stage_sizes[i]`` blocks and ``widths[i]`` channels; stage i > 0 starts with a stride-2 block whose
shortcut is a projection, stage 0 runs at stride 1 at the stem's width (identity shortcuts). Convolutions have no
bias (the BatchNorm next to each one has one). Presets (classmethods, also on `PreActResNet`):
``resnet18`` (stages (2, 2, 2, 2), widths (64, 128, 256, 512), about 11.2M parameters), ``resnet34`` ((3, 4, 6, 3)),
and the CIFAR ResNets of He et al. section 4.2 ``resnet20`` / ``resnet56`` / ``resnet110`` (three stages of
n = 3 / 9 / 18 blocks, widths (16, 32, 64); ``resnet20`` about 0.27M parameters; ``cifar(depth)`` for any
depth = 6n + 2). He et al. used zero-padding shortcuts for the CIFAR nets; here every width change is a 1x1
projection (with BatchNorm in `ResNet`: ResNet-20 has 272,474 parameters instead of 269,722). ``width_multiplier``
scales every width (rounded half up, at least 1), so tests and CPU runs use narrow copies of the same code:
``ResNet.resnet18(width_multiplier=1/16)``.

Neuron groups (what Independent Subnetwork Training splits among workers):

* ``"stage_i"``: the channels of stage i's residual stream. Every conv writing into the stream (the stem, each
  block's last conv, the projection shortcut), every conv reading it, and every BatchNorm on it use the logical
  name ``stage_i``, so each residual addition adds tensors carrying one logical name: a worker holding stream
  channels ``S`` adds its branch output on exactly ``S`` to its shortcut on ``S``.
* ``"block_i_j"``: the inner channels of block j of stage i (between its two convs).

Which of them are groups is ``channel_partition``:

* ``"all"`` (the IST paper's layout): every conv's output channels, the residual streams included. A worker holds
  ``(C/W)^2`` of every kernel whose input and output are both partitioned; the W workers together train 1/W of it
  per round, and a pair of channels dealt to different workers is never trained together in that round.
* ``"inner"``: only the blocks' inner channels (conv1's outputs = conv2's inputs). The residual streams, the stem,
  the projections and the head are held by every worker and averaged at the merge (as ResIST shares its
  unpartitioned layers and the 2-layer MLP its output bias); every inner kernel is trained by exactly one worker per
  round, like the 2-layer MLP's weights.

``activation_scale`` says how a sub-network's partitioned sum into conv2 (the inner channels it holds, a fraction
``kept`` of the block's) is matched to the full network's:

* ``"none"``: as the paper; with BatchNorm after conv2 (`ResNet`) training is scale-free, only the running
  statistics a worker carries describe a ``kept``-sized sum;
* ``"train"``: a sub-network multiplies its inner activations by ``1/kept`` (inverted dropout, HeteroFL's scaler),
  so its sum estimates the full one; the full network runs unscaled (`subnet` sets ``inner_scale``);
* ``"test"``: sub-networks run unscaled and the network evaluated at test time multiplies its inner activations by
  ``test_keep`` (give ``1/W``), as ResIST scales its dealt branches (`eval_module`).

Conv kernels ``[kh, kw, in, out]`` carry logical names ``(None, None, in_group, out_group)``; each BatchNorm's
``scale``/``bias`` its channel group; the head Dense ``(stage_{L-1}, "classes")`` and its bias ``("classes",)``;
``"image_channels"`` and ``"classes"`` map to None (kept whole). `partition_rules` is that table, `tied_axes` lists
the names joined by residual additions, and `subnet` is the same module at one worker's widths, so one apply
function runs the full network and every sub-network.

BatchNorm (``batch_norm=``), as in `istjax.models.CNN`:

* ``"running"``: `flax.linen.BatchNorm`, running mean/variance in ``batch_stats``; ``train=True`` normalises with
  the batch's statistics and updates the running averages (``mutable=["batch_stats"]``), ``train=False`` uses the
  running averages. ``batch_stats/<bn>/mean`` and ``var`` carry no logical names: the library partitions them like
  the sibling ``params/<bn>/scale``, so every BatchNorm has an explicit name and keeps its scale and bias.
* ``"batch"``: the current batch's statistics always, no state; same parameter tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import istjax.models.layers as layers
from istjax.core.errors import ArgError
from istjax.models.conv_ops import conv as _conv

__all__ = ["ResNet", "PreActResNet", "RESNET_PRESETS", "CHANNEL_PARTITIONS", "ACTIVATION_SCALES"]

CHANNEL_PARTITIONS = ("all", "inner")
ACTIVATION_SCALES = ("none", "train", "test")

# name -> (stage_sizes, widths)
RESNET_PRESETS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "resnet18": ((2, 2, 2, 2), (64, 128, 256, 512)),
    "resnet34": ((3, 4, 6, 3), (64, 128, 256, 512)),
    "resnet20": ((3, 3, 3), (16, 32, 64)),
    "resnet56": ((9, 9, 9), (16, 32, 64)),
    "resnet110": ((18, 18, 18), (16, 32, 64)),
}


# ----------------------------------------------------------------------------------------------------------------


class _ResNetBase(layers.ImageModelMethods, nn.Module):
    """Fields, validation, groups and presets shared by `ResNet` and `PreActResNet` (see the module docstring).

    Attributes:
      stage_sizes: basic blocks per stage, e.g. ``(2, 2, 2, 2)`` (ResNet-18) or ``(3, 4, 6, 3)`` (ResNet-34).
      widths: channels of each stage's residual stream (before ``width_multiplier``), one per stage.
      inner: ``inner[i][j]`` the inner channels of block j of stage i (before ``width_multiplier``); None: the
        stage's width. `subnet` sets it (one worker's inner widths).
      width_multiplier: every width (``widths`` and ``inner``) is multiplied by it and rounded half up to an int
        >= 1, e.g. ``1/16`` for a narrow copy of the same network.
      num_classes: output width.
      batch_norm: ``"running"`` (running averages in ``batch_stats``) or ``"batch"`` (batch statistics always).
      bn_momentum: running-average momentum for ``"running"`` (new = m * old + (1 - m) * batch).
      image_shape: ``(H, W, C)`` to reshape flat inputs ``[B, H * W * C]``; None: inputs are ``[B, H, W, C]``.
      channel_partition: ``"all"`` (every conv's output channels, residual streams included) or ``"inner"`` (only
        the blocks' inner channels; streams, stem, projections and head shared); see the module docstring.
      activation_scale: ``"none"``, ``"train"`` (a sub-network scales its inner activations by the inverse of the
        fraction it holds) or ``"test"`` (the test-time network scales them by ``test_keep``).
      test_keep: the factor of ``activation_scale="test"``: the fraction of a block's inner channels one worker
        holds, ``1/W``.
      inner_scale: ``inner_scale[i][j]``, the factor on block j of stage i's inner activations; None: 1. Set by
        `subnet` (``"train"``) and `eval_module` (``"test"``), not by hand.
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32.
    """

    stage_sizes: tuple[int, ...] = (2, 2, 2, 2)
    widths: tuple[int, ...] = (64, 128, 256, 512)
    inner: tuple[tuple[int, ...], ...] | None = None
    width_multiplier: float = 1.0
    num_classes: int = 10
    batch_norm: str = "running"
    bn_momentum: float = 0.9
    image_shape: tuple[int, ...] | None = None
    channel_partition: str = "all"
    activation_scale: str = "none"
    test_keep: float = 1.0
    inner_scale: tuple[tuple[float, ...], ...] | None = None
    dtype: str = "float32"

    def __post_init__(self):
        owner = type(self).__name__
        if self.activation_scale is None:  # a config's model.activation_scale=none arrives as None
            object.__setattr__(self, "activation_scale", "none")
        layers.check_choice(owner, "channel_partition", self.channel_partition, CHANNEL_PARTITIONS)
        layers.check_choice(owner, "activation_scale", self.activation_scale, ACTIVATION_SCALES)
        keep = self.test_keep
        if isinstance(keep, bool) or not isinstance(keep, (int, float, np.integer, np.floating)) \
                or not 0 < float(keep) <= 1:
            raise ArgError("test_keep", keep, f"{owner}.test_keep={keep!r}: must be a number in (0, 1], the fraction of "
                                              f"a block's inner channels one worker holds,", "e.g. test_keep=0.5 for W = 2.")
        object.__setattr__(self, "test_keep", float(keep))
        sizes = layers.pos_ints(owner, "stage_sizes", self.stage_sizes,
                          "give the number of blocks per stage, e.g. stage_sizes=(2, 2, 2, 2) for ResNet-18.")
        widths = layers.pos_ints(owner, "widths", self.widths,
                           f"give one channel count per stage, e.g. widths={(64, 128, 256, 512)[:len(sizes)]}.")
        if len(widths) != len(sizes):
            raise ArgError(("widths", "stage_sizes"), self.widths,
                           f"{owner}.widths={self.widths!r} has {len(widths)} entries but stage_sizes="
                           f"{self.stage_sizes!r} has {len(sizes)};",
                           f"give one width per stage, e.g. widths={tuple(16 * 2 ** i for i in range(len(sizes)))}.")
        inner = self.inner
        if inner is not None:
            example = tuple((w,) * n for w, n in zip(widths, sizes))
            inner = layers.nested_pos_ints(owner, "inner", inner, sizes,
                                     f"give one tuple per stage with one width per block, e.g. inner={example} "
                                     f"(or inner=None for the stage widths).")
        layers.check_common(self)
        # Normalise lists to tuples (fields are frozen; flax compares and hashes them).
        object.__setattr__(self, "stage_sizes", sizes)
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "inner", inner)
        super().__post_init__()

    # Presets ------------------------------------------------------------------------------------------------

    @classmethod
    def preset(cls, name: str, **fields: Any):
        """``cls`` with the stage sizes and widths of preset ``name`` (a key of `RESNET_PRESETS`)."""
        if name not in RESNET_PRESETS:
            raise ArgError("name", name, f"{cls.__name__}.preset(name={name!r}): unknown preset;",
                           f"choose one of {sorted(RESNET_PRESETS)} or give stage_sizes= and widths= yourself.")
        sizes, widths = RESNET_PRESETS[name]
        return cls(stage_sizes=sizes, widths=widths, **fields)

    @classmethod
    def resnet18(cls, **fields: Any):
        """Stages (2, 2, 2, 2), widths (64, 128, 256, 512): about 11.2M parameters at width_multiplier 1."""
        return cls.preset("resnet18", **fields)

    @classmethod
    def resnet34(cls, **fields: Any):
        """Stages (3, 4, 6, 3), widths (64, 128, 256, 512): about 21.3M parameters at width_multiplier 1."""
        return cls.preset("resnet34", **fields)

    @classmethod
    def cifar(cls, depth: int, **fields: Any):
        """He et al.'s CIFAR ResNet of ``depth = 6 n + 2`` layers: stages (n, n, n), widths (16, 32, 64)."""
        if not layers.is_pos_int(depth) or depth < 8 or (depth - 2) % 6:
            raise ArgError("depth", depth, f"{cls.__name__}.cifar(depth={depth!r}): a CIFAR ResNet has depth 6n + 2 for "
                                          f"n >= 1", "(8, 14, 20, 32, 44, 56, 110, ...).")
        n = (depth - 2) // 6
        return cls(stage_sizes=(n, n, n), widths=(16, 32, 64), **fields)

    @classmethod
    def resnet20(cls, **fields: Any):
        """CIFAR ResNet-20: stages (3, 3, 3), widths (16, 32, 64), about 0.27M parameters."""
        return cls.cifar(20, **fields)

    @classmethod
    def resnet56(cls, **fields: Any):
        """CIFAR ResNet-56: stages (9, 9, 9), widths (16, 32, 64)."""
        return cls.cifar(56, **fields)

    @classmethod
    def resnet110(cls, **fields: Any):
        """CIFAR ResNet-110: stages (18, 18, 18), widths (16, 32, 64)."""
        return cls.cifar(110, **fields)

    # What the library reads ---------------------------------------------------------------------------------

    def stage_widths(self) -> tuple[int, ...]:
        """The residual stream width of every stage after ``width_multiplier``."""
        return tuple(layers.scaled(w, self.width_multiplier) for w in self.widths)

    def inner_widths(self) -> tuple[tuple[int, ...], ...]:
        """``inner_widths()[i][j]``: block j of stage i's inner channels after ``width_multiplier``."""
        if self.inner is not None:
            return tuple(tuple(layers.scaled(c, self.width_multiplier) for c in row) for row in self.inner)
        return tuple((w,) * n for w, n in zip(self.stage_widths(), self.stage_sizes))

    def partition_rules(self) -> dict[str, str | None]:
        """Logical axis name -> neuron group: ``stage_i`` and ``block_i_j`` are groups; image channels and
        classes stay whole."""
        rules: dict[str, str | None] = {"image_channels": None, "classes": None}
        for i, n in enumerate(self.stage_sizes):
            rules[f"stage_{i}"] = f"stage_{i}" if self.channel_partition == "all" else None
            for j in range(n):
                rules[f"block_{i}_{j}"] = f"block_{i}_{j}"
        return rules

    def tied_axes(self) -> list[tuple[str, ...]]:
        """Logical names whose channels are added together by a residual connection, one tuple per addition set.

        Every addition in this network joins two tensors carrying the same logical name (stage i's shortcut, be it
        the identity or a projection, and every branch of stage i write channels named ``stage_i``), so each tuple
        is a single name ``("stage_i",)``. The rules must map all names of a tuple to one neuron group (otherwise a
        worker would add channels it holds to channels of another unit set); a model whose shortcut and branch
        used distinct names would list both in one tuple.
        """
        return [(f"stage_{i}",) for i in range(len(self.stage_sizes))]

    def subnet(self, units: Mapping[str, int]):
        """This module at one worker's widths: ``units["stage_i"]`` stream channels in stage i and
        ``units["block_i_j"]`` inner channels in block j of stage i (absolute counts, ``width_multiplier`` 1);
        groups missing from ``units`` keep their width, other keys are ignored."""
        widths = tuple(int(units.get(f"stage_{i}", w)) for i, w in enumerate(self.stage_widths()))
        full = self.inner_widths()
        inner = tuple(tuple(int(units.get(f"block_{i}_{j}", c)) for j, c in enumerate(row))
                      for i, row in enumerate(full))
        scale = self.inner_scale
        if self.activation_scale == "train":
            scale = tuple(tuple(f / s for f, s in zip(frow, srow)) for frow, srow in zip(full, inner))
        return self.clone(widths=widths, inner=inner, width_multiplier=1.0, inner_scale=scale)

    def eval_module(self):
        """The network evaluated at test time: with ``activation_scale="test"`` every block's inner activations
        are multiplied by ``test_keep``; otherwise this module."""
        if self.activation_scale != "test":
            return self
        return self.clone(inner_scale=tuple((self.test_keep,) * n for n in self.stage_sizes))

    def _inner(self, i: int, j: int, h: jax.Array) -> jax.Array:
        """Block j of stage i's inner activations times their ``inner_scale`` (unchanged when it is None)."""
        if self.inner_scale is None or self.inner_scale[i][j] == 1.0:
            return h
        return h * jnp.asarray(self.inner_scale[i][j], h.dtype)

    def _blocks(self):
        """``(i, j, stride, in_group, out_group, inner_group, width, inner, projection)`` for every block."""
        widths, inner, out = self.stage_widths(), self.inner_widths(), []
        for i, n in enumerate(self.stage_sizes):
            for j in range(n):
                first = i > 0 and j == 0  # stride 2 and a width change: projection shortcut
                out.append((i, j, 2 if first else 1, f"stage_{i - 1}" if first else f"stage_{i}", f"stage_{i}",
                            f"block_{i}_{j}", widths[i], inner[i][j], first))
        return out


class ResNet(_ResNetBase):
    """Post-activation CIFAR ResNet with basic blocks (He et al. 2016), partitioned over channels.

    See the module docstring for the layout and groups and `_ResNetBase` for the fields; presets:
    ``ResNet.resnet18()``, ``resnet34()``, ``resnet20()``, ``resnet56()``, ``resnet110()``, ``cifar(depth)``.
    Parameters: ``conv_stem``, ``bn_stem``, ``stage{i}_block{j}_{conv1,bn1,conv2,bn2}``, and on the first block of
    every stage i > 0 ``stage{i}_block0_proj_conv`` / ``stage{i}_block0_proj_bn``; ``head``.
    """

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool = True) -> jax.Array:
        x = layers.as_image(self, x_BxHxWxC)
        x = _conv(self.stage_widths()[0], 3, "image_channels", "stage_0", "conv_stem", dtype=self.dtype)(x)
        x = nn.relu(layers.batch_norm(self, "bn_stem", "stage_0", x, train))
        for i, j, stride, g_in, g_out, g_inner, width, inner, projection in self._blocks():
            pre = f"stage{i}_block{j}"
            h = _conv(inner, 3, g_in, g_inner, f"{pre}_conv1", stride, dtype=self.dtype)(x)
            h = self._inner(i, j, nn.relu(layers.batch_norm(self, f"{pre}_bn1", g_inner, h, train)))
            h = _conv(width, 3, g_inner, g_out, f"{pre}_conv2", dtype=self.dtype)(h)
            h = layers.batch_norm(self, f"{pre}_bn2", g_out, h, train)
            if projection:
                shortcut = _conv(width, 1, g_in, g_out, f"{pre}_proj_conv", stride, dtype=self.dtype)(x)
                shortcut = layers.batch_norm(self, f"{pre}_proj_bn", g_out, shortcut, train)
            else:
                shortcut = x
            x = nn.relu(shortcut + h)  # both carry logical name g_out (see tied_axes)
        x_BxF = jnp.mean(x, axis=(1, 2))
        return layers.head(self.num_classes, f"stage_{len(self.stage_sizes) - 1}", dtype=self.dtype)(x_BxF)


class PreActResNet(_ResNetBase):
    """Pre-activation CIFAR ResNet with basic blocks (He et al., "Identity Mappings", 2016), partitioned over
    channels; bottleneck blocks (PreActResNet-50/101) are not implemented.

    See the module docstring for the layout and groups and `_ResNetBase` for the fields; presets:
    ``PreActResNet.resnet18()`` (PreActResNet-18), ``resnet34()``, ``resnet20()``, ``resnet56()``,
    ``resnet110()``, ``cifar(depth)``. Parameters: ``conv_stem``, ``stage{i}_block{j}_{bn1,conv1,bn2,conv2}``
    (``bn1`` normalises the block's input stream, so block 0 of stage i > 0 has ``bn1`` on ``stage_{i-1}``), on the
    first block of every stage i > 0 ``stage{i}_block0_proj_conv`` (no BN: it reads the activated input),
    ``bn_final`` and ``head``.
    """

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool = True) -> jax.Array:
        x = layers.as_image(self, x_BxHxWxC)
        x = _conv(self.stage_widths()[0], 3, "image_channels", "stage_0", "conv_stem", dtype=self.dtype)(x)
        for i, j, stride, g_in, g_out, g_inner, width, inner, projection in self._blocks():
            pre = f"stage{i}_block{j}"
            a = nn.relu(layers.batch_norm(self, f"{pre}_bn1", g_in, x, train))
            shortcut = _conv(width, 1, g_in, g_out, f"{pre}_proj_conv", stride, dtype=self.dtype)(a) if projection else x
            h = _conv(inner, 3, g_in, g_inner, f"{pre}_conv1", stride, dtype=self.dtype)(a)
            h = self._inner(i, j, nn.relu(layers.batch_norm(self, f"{pre}_bn2", g_inner, h, train)))
            h = _conv(width, 3, g_inner, g_out, f"{pre}_conv2", dtype=self.dtype)(h)
            x = shortcut + h  # both carry logical name g_out (see tied_axes)
        last = f"stage_{len(self.stage_sizes) - 1}"
        x = nn.relu(layers.batch_norm(self, "bn_final", last, x, train))
        x_BxF = jnp.mean(x, axis=(1, 2))
        return layers.head(self.num_classes, last, dtype=self.dtype)(x_BxF)
