"""A researcher's 1-D CNN for MNIST-1D, written outside istjax: the worked example of docs/ist_fit.md.

Two convolutions whose output channels are neuron groups (``conv_0``, ``conv_1``), global average pooling and a
dense head. ``remedy`` chooses how a sub-network's partitioned sums are put on the full network's scale:

* ``"none"``: nothing. The second conv and the head sum over a worker's 1/W of the channels, so a worker trains its
  weights for inputs about 1/W as large as the full network gives them at test time.
* ``"norm"``: LayerNorm over the channels after each partitioned sum (normalisation after it: the scale of the sum
  no longer matters).
* ``"scale"``: train-time scaling, each partitioned sum multiplied by full / sub-network channels (``W`` for an
  even split), as inverted dropout does, so the sub-network's sums match the full network's.
* ``"batchnorm"``: BatchNorm with the statistics of the batch at train and at test time after each conv, and
  without affine parameters on the logits (the IST paper's MLP): each channel, and each logit, is renormalised in
  whichever network, full or sub, computes it.
* ``"inner"`` / ``"inner_norm"``: only the first conv's channels partitioned (the second conv and the head held
  whole), without or with LayerNorm after the one partitioned sum left.

Used by ``experiments/custom/fit.py`` through ``model.module`` (``configs/conv1d.py``); no change to istjax.
"""

import flax.linen as nn
import jax.numpy as jnp

from istjax.models.layers import BatchStatNorm, channel_batch_norm


def _names(*names):
    return nn.with_logical_partitioning(nn.initializers.lecun_normal(), names)


def _zeros(*names):
    return nn.with_logical_partitioning(nn.initializers.zeros, names)


class Conv1D(nn.Module):
    channels: tuple = (32, 64)
    num_classes: int = 10
    remedy: str = "none"
    full_channels: tuple = ()  # the full network's channels, set by subnet() (empty: this is the full network)

    def partition_rules(self):
        inner = self.remedy.startswith("inner")
        return {"signal": None, "conv_0": "conv_0", "conv_1": None if inner else "conv_1", "classes": None}

    def subnet(self, units):
        return self.clone(channels=(units["conv_0"], units.get("conv_1", self.channels[1])),
                          full_channels=tuple(self.channels))

    def _rescale(self, h, i):
        """A partitioned sum over the channels of layer ``i``, on the full network's scale (remedy "scale")."""
        if self.remedy != "scale" or not self.full_channels:
            return h
        return h * (self.full_channels[i] / self.channels[i])

    def test_batch_statistics(self):
        """The "batchnorm" remedy normalises with the statistics of the batch at test time too (istjax reads it)."""
        return self.remedy == "batchnorm"

    def _norm(self, h, group):
        if self.remedy == "batchnorm":
            return BatchStatNorm(group=group)(h)
        if self.remedy not in ("norm", "inner_norm"):
            return h
        group = None if group == "conv_1" and self.remedy.startswith("inner") else group
        return nn.LayerNorm(scale_init=nn.with_logical_partitioning(nn.initializers.ones, (group,)),
                            bias_init=_zeros(group))(h)

    @nn.compact
    def __call__(self, x, train=True):
        h = x.reshape(x.shape[0], -1, 1)  # [N, 40] -> [N, 40, 1]
        h = nn.Conv(self.channels[0], (5,), kernel_init=_names(None, "signal", "conv_0"), bias_init=_zeros("conv_0"))(h)
        h = nn.relu(self._norm(h, "conv_0"))
        h = nn.Conv(self.channels[1], (5,), kernel_init=_names(None, "conv_0", "conv_1"), bias_init=_zeros("conv_1"))(h)
        h = nn.relu(self._norm(self._rescale(h, 0), "conv_1"))
        h = jnp.mean(h, axis=1)  # [N, C1]
        out = nn.Dense(self.num_classes, kernel_init=_names("conv_1", "classes"), bias_init=_zeros("classes"))(h)
        if self.remedy == "batchnorm":  # the IST paper's last layer: BatchNorm without affine on the logits
            out = channel_batch_norm(out)
        return self._rescale(out, 1)
