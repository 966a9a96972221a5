"""A pre-activation ResNet split by depth, for ResIST (Dun, Wolfe, Jermaine, Kyrillidis, arXiv 2107.00961).

ResIST deals the residual blocks of a ResNet's deep sections among workers: each worker trains a shallow sub-ResNet
made of a random subset of the blocks, and every other layer (the stem, the first block of every stage, which
changes stride or width, the final BatchNorm and the head) is held by every worker and averaged at each sync.

`DepthResNet` lays a pre-activation ResNet (He et al., "Identity Mappings", ECCV 2016; basic blocks) out so that
this is ordinary IST over one neuron group per stage:

* block 0 of every stage is a plain pre-activation block (shared: its parameters carry no neuron group);
* blocks 1 .. n-1 of stage i are identical in shape and run under `flax.linen.scan`, so every parameter and
  BatchNorm statistic of them carries a leading `[n - 1]` axis with the logical name ``"blocks_i"``. In the stages
  listed in ``partitioned_stages`` that axis is neuron group ``"blocks_i"`` (`partition_rules`): extract hands a
  worker its blocks, merge writes them back (averaged by count where blocks are dealt with overlap), and
  `subnet` is the same module with ``units["blocks_i"]`` scanned blocks. Channels are never partitioned here.

At test time the residual branch of every partitioned block is multiplied by ``test_branch_scale`` (one factor, or
one per stage; `istjax.resist` sets it to the fraction of a stage's blocks a worker trains: ResIST's 1/S for S
sub-ResNets when the blocks divide evenly); training never scales. A worker's sub-ResNet equals the full network
with the blocks it does not hold removed (their residual branch set to zero), which the tests check.
"""

from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from istjax.models.conv_ops import conv
import istjax.models.layers as layers
import istjax.models.owner_forward as owner_forward
from istjax.core import precision
from istjax.core.errors import ArgError
from istjax.models.conv_ops import conv as _conv

__all__ = ["DepthResNet"]


def _bn(momentum: float, name: str, train: bool, scale_names=(None,)):
    """A BatchNorm run in float32, its output in the input's dtype (`istjax.core.precision.in_float32`)."""
    return precision.in_float32(nn.BatchNorm(
        use_running_average=not train, momentum=momentum, use_scale=True, use_bias=True, name=name,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, scale_names),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, scale_names)))


class _Block(nn.Module):
    """One non-strided residual block; returns ``(x, None)``, the carry of a scan over blocks.

    Pre-activation (``preactivation=True``): ``x + s * conv(relu(bn(conv(relu(bn(x))))))``; post-activation (the
    original ResNet): ``relu(x + s * bn(conv(relu(bn(conv(x))))))``, where ``s`` is ``branch_scale``.
    Every parameter is boxed with unnamed axes so that `nn.scan` can add the block axis's logical name in front.
    """

    width: int
    train: bool
    bn_momentum: float
    branch_scale: float = 1.0
    preactivation: bool = True
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x, _):
        if self.preactivation:
            a = nn.relu(_bn(self.bn_momentum, "bn1", self.train)(x))
            return x + self.branch_scale * _branch(self.width, 1, self.train, self.bn_momentum, True, a,
                                                   dtype=self.dtype), None
        h = _branch(self.width, 1, self.train, self.bn_momentum, False, x, dtype=self.dtype)
        return nn.relu(x + self.branch_scale * h), None


def _branch(width: int, stride: int, train: bool, momentum: float, preactivation: bool, x: jax.Array,
            prefix: str = "", dtype: str = "float32") -> jax.Array:
    """A basic block's residual branch, built inside the calling module. Pre-activation: ``conv2(relu(bn2(conv1(
    x))))`` of the already activated input ``x = relu(bn1(block input))``; post-activation: ``bn2(conv2(relu(bn1(
    conv1(x)))))``."""
    conv3 = lambda name, s: conv(width, 3, None, None, prefix + name, s, dtype=dtype)  # noqa: E731
    bn = lambda name: _bn(momentum, prefix + name, train)  # noqa: E731
    if preactivation:
        return conv3("conv2", 1)(nn.relu(bn("bn2")(conv3("conv1", stride)(x))))
    h = nn.relu(bn("bn1")(conv3("conv1", stride)(x)))
    return bn("bn2")(conv3("conv2", 1)(h))


class _DealtBranch(nn.Module):
    """The first block's residual branch as a neuron group of size 1 (``partition_strided``): scanned once so that
    its parameters carry a leading ``[1]`` axis. A worker that is dealt the padding slot holds zeros there, and a
    branch of zeros adds nothing: that worker trains the block as its shortcut alone."""

    width: int
    stride: int
    train: bool
    bn_momentum: float
    preactivation: bool
    dtype: str = "float32"

    @nn.compact
    def __call__(self, carry, x):
        return carry, _branch(self.width, self.stride, self.train, self.bn_momentum, self.preactivation, x,
                              dtype=self.dtype)


class DepthResNet(nn.Module):
    """Pre-activation ResNet whose deep blocks are neuron groups (see the module docstring).

    Attributes:
      stage_sizes: blocks per stage, e.g. ``(3, 3, 3)`` (ResNet-20) or ``(9, 9, 9)`` (ResNet-56); a partitioned
        stage needs at least 2 (block 0 is always shared).
      widths: channels per stage, e.g. ``(16, 32, 64)``.
      partitioned_stages: the stages whose blocks 1.. are dealt to workers (None: every stage). ResIST's
        "partition one section only" ablation is e.g. ``(2,)``.
      width_multiplier: scales every width (rounded half up, at least 1).
      num_classes: output width.
      bn_momentum: BatchNorm running-average momentum (running statistics in ``batch_stats``).
      test_branch_scale: the factor on the residual branch of every partitioned block at test time: one number, or
        one per stage.
      image_shape: ``(H, W, C)`` to reshape flat inputs, or None.
      preactivation: pre-activation blocks (He et al. 2016b, ResIST's choice) or, False, the original
        post-activation ones (conv, BatchNorm, ReLU after the addition; the stem then ends in BatchNorm and ReLU).
      partition_strided: also deal the first block of every partitioned stage (ResIST's "naive" ablation): its
        residual branch is neuron group ``"first_i"`` of size 1, held by one worker per round; the others train
        that block as its shortcut alone. Its input BatchNorm (pre-activation) and projection stay shared.
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32.
    """

    stage_sizes: tuple[int, ...] = (3, 3, 3)
    widths: tuple[int, ...] = (16, 32, 64)
    partitioned_stages: tuple[int, ...] | None = None
    width_multiplier: float = 1.0
    num_classes: int = 10
    bn_momentum: float = 0.9
    test_branch_scale: float | tuple[float, ...] = 1.0
    image_shape: tuple[int, ...] | None = None
    preactivation: bool = True
    partition_strided: bool = False
    dtype: str = "float32"

    def __post_init__(self):
        sizes, widths = tuple(self.stage_sizes), tuple(self.widths)
        if not sizes or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in sizes):
            raise ArgError("stage_sizes", self.stage_sizes, f"DepthResNet.stage_sizes={self.stage_sizes!r}:",
                           "give positive block counts per stage, e.g. (3, 3, 3).")
        if len(widths) != len(sizes) or any(not isinstance(w, int) or w < 1 for w in widths):
            raise ArgError("widths", self.widths, f"DepthResNet.widths={self.widths!r}:",
                           f"give one positive width per stage ({len(sizes)} stages), e.g. {(16, 32, 64)[:len(sizes)]}.")
        stages = tuple(range(len(sizes))) if self.partitioned_stages is None else tuple(self.partitioned_stages)
        for i in stages:
            if not isinstance(i, int) or not 0 <= i < len(sizes):
                raise ArgError("partitioned_stages", self.partitioned_stages,
                               f"DepthResNet.partitioned_stages={self.partitioned_stages!r}: stage {i!r} does not "
                               f"exist;", f"the stages are 0 .. {len(sizes) - 1}.")
            if sizes[i] < 2:
                raise ArgError("partitioned_stages", self.partitioned_stages,
                               f"DepthResNet.partitioned_stages={self.partitioned_stages!r}: stage {i} has "
                               f"{sizes[i]} block(s); its first block is shared, so a partitioned stage needs at "
                               f"least 2.", "Add blocks or leave the stage out.")
        if isinstance(self.test_branch_scale, (tuple, list)):
            if len(self.test_branch_scale) != len(sizes):
                raise ArgError("test_branch_scale", self.test_branch_scale,
                               f"DepthResNet.test_branch_scale={self.test_branch_scale!r}:",
                               f"give one number, or one per stage ({len(sizes)}).")
            object.__setattr__(self, "test_branch_scale", tuple(float(s) for s in self.test_branch_scale))
        for flag in ("preactivation", "partition_strided"):
            if not isinstance(getattr(self, flag), bool):
                raise ArgError(flag, getattr(self, flag), f"DepthResNet.{flag}={getattr(self, flag)!r}: must be True "
                                                          f"or False.", "")
        if not self.width_multiplier > 0:
            raise ArgError("width_multiplier", self.width_multiplier,
                           f"DepthResNet.width_multiplier={self.width_multiplier!r}: must be > 0.", "")
        object.__setattr__(self, "stage_sizes", sizes)
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "partitioned_stages", stages)
        if self.image_shape is not None:
            object.__setattr__(self, "image_shape", tuple(self.image_shape))
        super().__post_init__()

    def block_groups(self) -> dict[str, int]:
        """``{"blocks_i": n_i - 1}`` for every partitioned stage: the neuron groups and their sizes."""
        return {f"blocks_{i}": self.stage_sizes[i] - 1 for i in self.partitioned_stages}

    def first_block_groups(self) -> dict[str, int]:
        """``{"first_i": 1}`` for every partitioned stage when ``partition_strided`` (else empty): the first blocks'
        residual branches, each a group of one unit."""
        return {f"first_{i}": 1 for i in self.partitioned_stages} if self.partition_strided else {}

    def partition_rules(self) -> dict[str, str | None]:
        rules: dict[str, str | None] = {"image_channels": None, "classes": None}
        for i in range(len(self.stage_sizes)):
            rules[f"stage_{i}"] = None  # channels stay whole
            rules[f"blocks_{i}"] = f"blocks_{i}" if i in self.partitioned_stages else None
            rules[f"first_{i}"] = f"first_{i}" if i in self.partitioned_stages else None
        return rules

    def subnet(self, units: Mapping[str, int]) -> "DepthResNet":
        """This network with ``units["blocks_i"]`` scanned blocks in stage i (plus its shared first block)."""
        sizes = tuple(1 + int(units.get(f"blocks_{i}", n - 1)) for i, n in enumerate(self.stage_sizes))
        return self.clone(stage_sizes=sizes)

    def eval_module(self) -> "DepthResNet":
        """The test-time network: itself (`istjax.resist` builds the scaled one)."""
        return self

    def stage_widths(self) -> tuple[int, ...]:
        return tuple(layers.scaled(w, self.width_multiplier) for w in self.widths)

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool = True) -> jax.Array:
        x = layers.as_image(self, x_BxHxWxC)
        widths = self.stage_widths()
        x = _conv(widths[0], 3, "image_channels", "stage_0", "conv_stem", dtype=self.dtype)(x)
        if not self.preactivation:
            x = nn.relu(_bn(self.bn_momentum, "bn_stem", train)(x))
        for i, (n, width) in enumerate(zip(self.stage_sizes, widths)):
            x = self._first_block(i, width, x, train)
            if n > 1:
                partitioned = i in self.partitioned_stages
                test = self.test_branch_scale
                test = test[i] if isinstance(test, tuple) else test
                scale = 1.0 if (train or not partitioned) else test
                blocks = nn.scan(_Block, variable_axes={"params": 0, "batch_stats": 0}, split_rngs={"params": True},
                                 length=n - 1, metadata_params={nn.PARTITION_NAME: f"blocks_{i}"})
                x = self.stage_blocks(i, blocks(width=width, train=train, bn_momentum=self.bn_momentum,
                                                branch_scale=scale, preactivation=self.preactivation,
                                                dtype=self.dtype, name=f"stage{i}_blocks"), x)
        if self.preactivation:
            x = nn.relu(_bn(self.bn_momentum, "bn_final", train)(x))
        return layers.head(self.num_classes, None, dtype=self.dtype)(jnp.mean(x, axis=(1, 2)))

    def stage_blocks(self, i: int, blocks: nn.Module, x: jax.Array) -> jax.Array:
        """Stage i's scanned blocks 1.. applied to ``x`` (a method of its own so that the sharded evaluation,
        `owner_logits`, can run each owner's blocks in turn)."""
        del i
        return blocks(x, None)[0]

    def owner_logits(self, variables, x: jax.Array, shared=None, *, owner, num_owners: int, reduce) -> jax.Array:
        """The test-time logits from owner ``owner``'s blocks (`istjax.core.contract`): owner ``o`` of ``N`` holds
        blocks ``[o * s, (o + 1) * s)`` of every partitioned stage (``s = (n - 1) / N``) and the shared layers whole.
        A stage runs as N turns: on turn ``t`` owner ``t`` applies its blocks to the stage's activation and ``reduce``
        (a sum) hands the result, the others' zeros added, to every owner. Only activations move. An owner given as a
        Python int (the MPI runtime's rank) computes only its own turn; a traced one (the tests' `vmap`) selects it."""
        del shared  # image models read no shared input
        mine = self.subnet({g: size // num_owners for g, size in self.block_groups().items()})
        turns = owner_forward.in_turns("stage_blocks", owner, num_owners, reduce,
                                       lambda args: args[0] in self.partitioned_stages)
        with nn.intercept_methods(turns):
            return mine.apply(variables, x, train=False)

    def owner_whole_groups(self) -> tuple[str, ...]:
        """The dealt first blocks (``partition_strided``): `owner_logits` takes them whole on every owner."""
        return tuple(self.first_block_groups())

    def _first_block(self, i: int, width: int, x: jax.Array, train: bool) -> jax.Array:
        """Block 0 of stage i: changes stride (stages after the first) and width where the stage does; shared, or
        with its branch dealt as group ``first_i`` (``partition_strided``)."""
        stride = 1 if i == 0 else 2
        pre = f"stage{i}_block0"
        a = nn.relu(_bn(self.bn_momentum, f"{pre}_bn1", train)(x)) if self.preactivation else x
        if stride == 1 and x.shape[-1] == width:
            shortcut = x
        else:
            shortcut = _conv(width, 1, None, None, f"{pre}_proj_conv", stride, dtype=self.dtype)(a)
            if not self.preactivation:
                shortcut = _bn(self.bn_momentum, f"{pre}_proj_bn", train)(shortcut)
        if self.partition_strided and i in self.partitioned_stages:
            dealt = nn.scan(_DealtBranch, variable_axes={"params": 0, "batch_stats": 0}, split_rngs={"params": True},
                            in_axes=nn.broadcast, length=1, metadata_params={nn.PARTITION_NAME: f"first_{i}"})
            _, h = dealt(width=width, stride=stride, train=train, bn_momentum=self.bn_momentum,
                         preactivation=self.preactivation, dtype=self.dtype, name=f"{pre}_branch")(None, a)
            h = jnp.sum(h, axis=0)
        else:
            h = _branch(width, stride, train, self.bn_momentum, self.preactivation, a, prefix=f"{pre}_",
                        dtype=self.dtype)
        out = shortcut + h
        return out if self.preactivation else nn.relu(out)
