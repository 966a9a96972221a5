"""The IST paper's MLP (Yuan et al., arXiv 1910.02120, Google Speech experiments).

``x -> [Dense(no bias) -> BatchNorm -> ReLU] * L -> Dense(no bias) -> BatchNorm(no affine)``. BatchNorm normalises
with the statistics of the current batch (the paper keeps no running averages), so the model has no mutable state.
The paper's 2-layer speech model is ``MLP(hidden=(4096,), num_classes=35)``, the 3-layer one
``MLP(hidden=(8192, 8192), num_classes=35)``, on 4096 input features.

Every parameter axis carries a logical name: ``"input"``, ``"hidden_i"`` (the i-th hidden layer's units) and
``"classes"``. `MLP.rules()` maps each ``hidden_i`` to neuron group ``hidden_i``; `MLP.subnet` is the same module
at the widths one worker holds, so the same apply code runs the full network and every sub-network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import flax.linen as nn
import jax

import istjax.models.layers as layers
import istjax.models.owner_forward as owner_forward
import istjax.models.tensor_forward as tensor_forward
from istjax.core import precision


batch_norm = layers.channel_batch_norm
"""``batch_norm(x [B, H], scale=None, bias=None)``: each feature normalised with the batch's mean and (biased)
variance, optional affine scale and bias (`istjax.models.layers.channel_batch_norm` on ``[B, H]``)."""


class MLP(nn.Module):
    """Multi-layer perceptron with optional batch-statistics BatchNorm.

    Attributes:
      hidden: widths of the hidden layers, e.g. ``(4096,)``.
      num_classes: output width.
      batch_norm: BatchNorm (with affine scale and bias) after every hidden linear layer.
      output_batch_norm: BatchNorm without affine parameters on the logits (the paper's last layer).
      use_bias: biases on the linear layers (the paper has none; with BatchNorm they are redundant).
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32.
    """

    hidden: Sequence[int] = (64,)
    num_classes: int = 10
    batch_norm: bool = True
    output_batch_norm: bool = True
    use_bias: bool = False
    dtype: str = "float32"

    def __post_init__(self):
        # A zero width would divide by zero in the initializer (fan-in 0), a negative one fail deep in a trace.
        hidden = layers.pos_ints("MLP", "hidden", self.hidden, "e.g. hidden=(512,), or hidden=() for a linear "
                                 "classifier (trained by data_parallel or local_sgd: IST splits hidden layers).",
                                 allow_empty=True)
        object.__setattr__(self, "hidden", hidden)
        super().__post_init__()

    @staticmethod
    def rules(num_hidden: int) -> dict[str, str | None]:
        """Logical axis name -> neuron group: every hidden layer is its own group; input and classes stay whole
        (`istjax.models.layers.hidden_rules`)."""
        return layers.hidden_rules(num_hidden)

    def partition_rules(self) -> dict[str, str | None]:
        """This module's rules: `MLP.rules` for its number of hidden layers (how the model registry reads groups)."""
        return MLP.rules(len(self.hidden))

    def test_batch_statistics(self) -> bool:
        """True: at test time BatchNorm normalises with the statistics of the batch it is given (the paper's
        model keeps no running averages), so an evaluation batch must be large (`istjax.Task.min_eval_batch`)."""
        return bool(self.batch_norm or self.output_batch_norm)

    def without_batch_statistics(self) -> dict:
        """The fields that make this module evaluate without batch statistics: no BatchNorm (the model then
        predicts single examples)."""
        return {"batch_norm": False, "output_batch_norm": False}

    def subnet(self, units: Mapping[str, int]) -> "MLP":
        """This module at the widths of one worker's sub-network (``units["hidden_i"]`` units in layer i)."""
        return self.clone(hidden=tuple(int(units.get(f"hidden_{i}", h)) for i, h in enumerate(self.hidden)))

    # Evaluation from an owner's slice of every hidden layer (the sharded MPI mode): this module's own __call__ with
    # each dense layer's partial sums over its input units reduced across the owners (`istjax.models.owner_forward`);
    # BatchNorm with batch statistics is per unit, so it runs on an owner's units alone.
    owner_logits = owner_forward.owner_logits_method

    def tensor_axes(self) -> frozenset:
        """Tensor parallelism's cut (`istjax.core.contract`): Megatron's pairs, every other hidden layer's units
        (``hidden_0``, ``hidden_2``, ...), so a column-split layer is followed by a row-split one and its all-reduce
        (`istjax.models.tensor_forward`); the classes stay whole."""
        return tensor_forward.every_other([f"hidden_{i}" for i in range(len(self.hidden))])

    tensor_logits = tensor_forward.tensor_logits_method

    @nn.compact
    def __call__(self, x_BxD: jax.Array, train: bool = True) -> jax.Array:
        del train  # batch statistics in training and at test time alike: the model keeps no state
        x = x_BxD.reshape(x_BxD.shape[0], -1)
        names_in = "input"
        init = nn.initializers.lecun_normal()
        for i, width in enumerate(self.hidden):
            name = f"hidden_{i}"
            x = nn.Dense(width, use_bias=self.use_bias, name=f"dense_{i}", **precision.dense_options(self.dtype),
                         kernel_init=nn.with_logical_partitioning(init, (names_in, name)),
                         bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (name,)))(x)
            if self.batch_norm:  # shaped like the units this pass holds: ``width``, or an owner's slice of them
                scale = self.param(f"bn_{i}_scale", nn.with_logical_partitioning(nn.initializers.ones, (name,)),
                                   x.shape[-1:])
                bias = self.param(f"bn_{i}_bias", nn.with_logical_partitioning(nn.initializers.zeros, (name,)),
                                  x.shape[-1:])
                x = batch_norm(x, scale, bias)
            x = nn.relu(x)
            names_in = name
        x = nn.Dense(self.num_classes, use_bias=self.use_bias, name="dense_out", **precision.dense_options(self.dtype),
                     kernel_init=nn.with_logical_partitioning(init, (names_in, "classes")),
                     bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))(x)
        if self.output_batch_norm:
            x = batch_norm(x)
        return x
