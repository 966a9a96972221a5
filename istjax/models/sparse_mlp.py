"""`SparseMLP`: the extreme-classification network of the IST paper's Amazon-670k experiment.

``(id, value) pairs -> EmbeddingBag -> ReLU -> [Dense -> ReLU] * (L - 1) -> Dense -> one logit per label``, trained
with a multi-label loss (`istjax.xmc.loss`: softmax over the labels against the point's label set, or binary
cross-entropy). The paper's network is ``hidden=(H,)``: 135,909 sparse features -> H -> 670,091 labels.

Logical names as `istjax.models.MLP`: ``"input"`` (the feature ids), ``"hidden_i"`` and ``"classes"`` (the
labels); every hidden layer is a neuron group, so IST splits the embedding bag by its columns and the output layer
by its rows, and a worker holds ``(F + C) * H / W`` of the ``(F + C) * H`` weights. No BatchNorm: the model keeps no
state and evaluates single examples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import flax.linen as nn
import jax

import istjax.core.tiled_init as tiled_init
import istjax.models.layers as layers
import istjax.models.owner_forward as owner_forward
import istjax.models.tensor_forward as tensor_forward
from istjax.core import precision
from istjax.core.errors import ArgError
from istjax.models.embedding_bag import SLOT_CHUNK, EmbeddingBag
from istjax.xmc import loss as xmc_loss

__all__ = ["SparseMLP"]


class SparseMLP(nn.Module):
    """An MLP on sparse ``(id, value)`` rows with a multi-label output (module docstring).

    Attributes:
      hidden: hidden widths, e.g. ``(512,)``.
      num_classes: the number of labels (from the data).
      num_features: the number of feature ids (from the data's ``num_feature_ids`` when istjax builds the model).
      loss: ``"softmax"`` or ``"bce"`` (`istjax.xmc.loss`).
      use_bias: biases on every layer.
      rescale: a worker's sub-network multiplies each hidden layer's output by ``H / h`` (all the layer's units over
        the ones it holds), as inverted dropout does, so the sums of the next layer keep the scale the full network
        has when the pieces are written back (without normalisation, a network assembled from W sub-networks sums
        W times the units each was trained with).
      full_hidden: the full network's widths, set by `subnet` (leave it empty).
      label_weights: each label's inverse propensity (`istjax.xmc.loss.LabelWeights`), filled from sparse data's
        ``label_weights`` when istjax builds the model: the evaluation then reports PSP@1/3/5 besides P@k.
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32.
      bag_slot_chunk: the embedding bag's ``slot_chunk``: the nonzero slots it sums at a time (0: all at once, a
        ``[B, nnz, H]`` block; `istjax.models.embedding_bag`).
    """

    hidden: Sequence[int] = (512,)
    num_classes: int = 1000
    num_features: int = 0
    loss: str = "softmax"
    use_bias: bool = True
    rescale: bool = True
    full_hidden: Sequence[int] = ()
    label_weights: Optional[xmc_loss.LabelWeights] = None
    dtype: str = "float32"
    bag_slot_chunk: int = SLOT_CHUNK

    def __post_init__(self):
        hidden = layers.pos_ints("SparseMLP", "hidden", self.hidden, "e.g. hidden=(512,).")
        object.__setattr__(self, "hidden", hidden)
        layers.check_choice("SparseMLP", "loss", self.loss, xmc_loss.LOSSES)
        for flag in ("use_bias", "rescale"):
            if not isinstance(getattr(self, flag), bool):
                raise ArgError(flag, getattr(self, flag), f"SparseMLP.{flag}={getattr(self, flag)!r}:",
                               "give True or False.")
        chunk = self.bag_slot_chunk
        if not (layers.is_pos_int(chunk) or (type(chunk) is int and chunk == 0)):
            raise ArgError("bag_slot_chunk", self.bag_slot_chunk, f"SparseMLP.bag_slot_chunk={self.bag_slot_chunk!r}:",
                           f"give an int >= 0 (0: every slot at once; {SLOT_CHUNK}, the default, keeps a [B, {SLOT_CHUNK}, H] block).")
        full = layers.pos_ints("SparseMLP", "full_hidden", self.full_hidden, "leave it empty (subnet sets it).",
                               allow_empty=True)
        if full and len(full) != len(hidden):
            raise ArgError("full_hidden", full, f"SparseMLP.full_hidden={full!r} for hidden={hidden!r}:",
                           "leave it empty (subnet sets it).")
        object.__setattr__(self, "full_hidden", full)
        if self.label_weights is not None and not isinstance(self.label_weights, xmc_loss.LabelWeights):
            raise ArgError("label_weights", type(self.label_weights).__name__,
                           "SparseMLP.label_weights must be an istjax.xmc.loss.LabelWeights;",
                           "pass LabelWeights(data.label_weights), or leave it None (no PSP@k).")
        if not layers.is_pos_int(self.num_features):  # last: the data fills it, a field above is the likelier mistake
            raise ArgError("num_features", self.num_features,
                           f"SparseMLP.num_features={self.num_features!r}: the embedding bag needs the number of "
                           f"feature ids;", "istjax fills it from sparse data (Dataset.num_feature_ids: a config's "
                           "data.name=xmc_synthetic, xmc_debian_deps or xmc: your folder); in Python, "
                           "SparseMLP(..., num_features=data.num_feature_ids).")
        super().__post_init__()

    def partition_rules(self) -> dict[str, str | None]:
        """``"hidden_i"`` -> group ``"hidden_i"``; the feature ids and the labels stay whole (`layers.hidden_rules`,
        as `istjax.models.MLP`)."""
        return layers.hidden_rules(len(self.hidden))

    def subnet(self, units: Mapping[str, int]) -> "SparseMLP":
        """This module at one worker's widths (``units["hidden_i"]`` units in layer i)."""
        full = tuple(self.full_hidden) or self.hidden
        return self.clone(hidden=tuple(int(units.get(f"hidden_{i}", h)) for i, h in enumerate(full)),
                          full_hidden=full)

    def _scaled(self, x: jax.Array, i: int) -> jax.Array:
        """Hidden layer ``i``'s output, times ``H_i / h_i`` in a rescaled sub-network (``rescale``)."""
        if not self.rescale or not self.full_hidden or self.full_hidden[i] == self.hidden[i]:
            return x
        return x * (self.full_hidden[i] / self.hidden[i])

    def scores(self, logits_BxC: jax.Array, labels_BxL: jax.Array):
        """The model contract's ``scores``: ``self.loss`` and P@1/3/5, nDCG@5 of label sets, PSP@1/3/5 with
        ``label_weights`` (`istjax.xmc.loss`)."""
        return xmc_loss.scores(logits_BxC, labels_BxL, self.loss, self.label_weights)

    def summary_metrics(self) -> tuple[tuple[str, str], ...]:
        """The model contract's ``summary_metrics``: what a run's summary prints, P@1 (the record's
        ``test_accuracy``), P@5 and, with ``label_weights``, PSP@1 and PSP@5, then the losses."""
        psp = (("test_psp_at_1", "PSP@1"), ("test_psp_at_5", "PSP@5")) if self.label_weights is not None else ()
        return (("test_accuracy", "test P@1"), ("test_precision_at_5", "P@5"), *psp, ("test_loss", "test loss"),
                ("train_loss", "train loss"))

    # Evaluation from an owner's slice of every hidden layer (the sharded MPI mode): the embedding bag on the owner's
    # columns gives its units, each dense layer's partial sums are reduced (`istjax.models.owner_forward`).
    owner_logits = owner_forward.owner_logits_method

    def tensor_axes(self) -> frozenset:
        """Tensor parallelism's cut (`istjax.core.contract`): every other hidden layer's units (Megatron's pairs, as
        `istjax.models.MLP`) and the labels: each shard computes its block of the logits, scored by the
        vocabulary-parallel loss (`istjax.algorithms.tensor.sharded_multilabel_loss`), so the whole ``[B, C]``
        logits never exist (`istjax.models.tensor_forward`)."""
        return tensor_forward.every_other([f"hidden_{i}" for i in range(len(self.hidden))]) | {"classes"}

    tensor_logits = tensor_forward.tensor_logits_method

    @nn.compact
    def __call__(self, x_BxNx2: jax.Array, train: bool = True) -> jax.Array:
        del train  # no dropout, no statistics
        init = tiled_init.lecun_normal()  # LeCun's, drawn tile by tile: a rank draws only its block
        x = self._scaled(nn.relu(EmbeddingBag(self.hidden[0], self.num_features, ("input", "hidden_0"),
                                              self.use_bias, dtype=self.dtype, slot_chunk=self.bag_slot_chunk,
                                              name="bag")(x_BxNx2)), 0)
        names_in = "hidden_0"
        for i, width in enumerate(self.hidden[1:], start=1):
            name = f"hidden_{i}"
            x = self._scaled(nn.relu(nn.Dense(width, use_bias=self.use_bias, name=f"dense_{i}",
                                              **precision.dense_options(self.dtype),
                                              kernel_init=nn.with_logical_partitioning(init, (names_in, name)),
                                              bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                                                     (name,)))(x)), i)
            names_in = name
        return nn.Dense(self.num_classes, use_bias=self.use_bias, name="dense_out", **precision.dense_options(self.dtype),
                        kernel_init=nn.with_logical_partitioning(init, (names_in, "classes")),
                        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))(x)
