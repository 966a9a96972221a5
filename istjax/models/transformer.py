"""A small pre-LayerNorm decoder-only transformer (a character-level language model) whose attention heads and
feed-forward units, or whose blocks, are neuron groups.

``ids [B, T] -> token + position embedding -> [x + attn(LN(x)); x + ffn(LN(x))] * L -> LN -> head -> [B, T, V]``,
causal self-attention, GELU feed-forward; learned or rotary positions.

Two ways to split it (``split``), each ordinary IST over neuron groups (`istjax.ist`, no new training code):

* ``"width"``: in layer ``i`` the heads are group ``"heads_i"`` (query, key and value kernels ``[D, heads, head_dim]``
  by their head axis, the output kernel ``[heads, head_dim, D]`` by its first axis) and the feed-forward units group
  ``"mlp_i"`` (``[D, F]`` by columns, ``[F, D]`` by rows). A worker's sub-transformer holds its heads and units of
  every layer: its attention runs over its heads only (the softmax of a head never sees another head) and the output
  projection sums over the heads present. Embeddings, LayerNorms, the output biases and the head are shared (every
  worker holds them whole; merge averages them).
* ``"depth"``: the blocks run under `flax.linen.scan`, so every block parameter carries a leading ``[L]`` axis, group
  ``"blocks"``; a worker's sub-transformer is the same network with its blocks only (ResIST's split of a ResNet).

The scaling question (``scaling``): a sub-network with a fraction p of a branch's heads, units or blocks sees smaller
sums than the full network. ``"none"``: no correction. ``"train"``: a sub-network multiplies each partitioned
branch's output (attention, feed-forward; by depth, both branches of each block) by 1/p while it trains (EST,
HeteroFL: inverted dropout), the full network runs as it is. ``"test"``: training is unscaled, and the test-time
network multiplies each partitioned branch by p, the fraction a worker trains (dropout's original scaling, ResIST's
1/S), set by `scaled_for_test` from the sampler's slots. Both use a worker's slots over the group's size, exact when
W divides every group (or the sampler overlaps); with padding (``uniform_pad``) the slots count the padding too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from istjax.core import partition, precision
from istjax.core.errors import ArgError, Code
import istjax.models.layers as layers
import istjax.models.owner_forward as owner_forward

__all__ = ["Transformer", "generate", "lm_scores"]

SPLITS = ("width", "depth")
SCALINGS = ("none", "train", "test")
POSITIONS = ("learned", "rotary")
_INIT = nn.initializers.normal(0.02)  # GPT-2's


def lm_scores(logits_BxTxV: jax.Array, labels_BxT: jax.Array) -> tuple[jax.Array, dict]:
    """The mean cross-entropy of the next character over every position (nats per character) and the fraction of
    positions whose most likely character is the next one (float32 whatever the compute dtype)."""
    logits_BxTxV = logits_BxTxV.astype(jnp.float32)
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits_BxTxV, labels_BxT))
    accuracy = jnp.mean((jnp.argmax(logits_BxTxV, axis=-1) == labels_BxT).astype(jnp.float32))
    return loss, {"accuracy": accuracy}


def generate(model: "Transformer", params, prompt_ids, length: int, key: jax.Array,
             temperature: float = 0.8, context: Optional[int] = None) -> list[int]:
    """``length`` characters after ``prompt_ids``, each drawn from the softmax of the model's logits over
    ``temperature``, the model reading the last ``context`` characters (default ``model.context``; give the windows
    the model trained on when they were shorter: later learned positions never trained). The window is right-padded
    to ``context`` (causal attention: padding after a position never reaches it), so one jitted step, logits and
    draw, serves every character. The same ``key`` gives the same characters."""
    if not 0 < temperature:
        raise ArgError("temperature", temperature, f"temperature={temperature!r}:", "give a number > 0.")
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise ArgError("prompt_ids", prompt_ids, "generate() needs a prompt of at least one character;", "")
    c = min(int(context or model.context), model.context)

    @jax.jit
    def step(p, x_1xC, t, k):
        logits_V = jax.lax.dynamic_index_in_dim(model.apply({"params": p}, x_1xC, train=False)[0], t, keepdims=False)
        return jax.random.categorical(k, logits_V.astype(jnp.float32) / temperature)

    for k in jax.random.split(key, length):
        window = ids[-c:]
        x = jnp.asarray([window + [0] * (c - len(window))], jnp.int32)
        ids.append(int(step(params, x, len(window) - 1, k)))
    return ids[len(prompt_ids):]


def _rotary(x_BxTxHxK: jax.Array) -> jax.Array:
    """Rotary position embedding (Su et al. 2021) of queries or keys, over the pairs ``(k, k + K/2)`` of each head."""
    t, half = x_BxTxHxK.shape[1], x_BxTxHxK.shape[-1] // 2
    freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = jnp.arange(t, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    x = x_BxTxHxK.astype(jnp.float32)  # float32 whatever the compute dtype, returned in it
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1).astype(x_BxTxHxK.dtype)


def _layer_norm(name: str):
    """A LayerNorm over the residual stream (logical axis ``"embed"``, never partitioned), run in float32 whatever
    the compute dtype, its output in the input's (`istjax.core.precision.in_float32`)."""
    return precision.in_float32(nn.LayerNorm(
        name=name, scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",))))


def _param(module: nn.Module, name: str, shape: tuple, names: tuple, init=_INIT):
    """A float32 parameter of ``module``, read in the module's compute dtype (``module.dtype``)."""
    return precision.cast(module.param(name, nn.with_logical_partitioning(init, names), shape), module.dtype)


class _Attention(nn.Module):
    """Causal self-attention over this module's heads, summed through the output projection (no bias: the block
    adds it once). Returns ``[B, T, D]``, the sum over the heads present."""

    heads: int
    head_dim: int
    group: str
    fused_qkv: bool
    rotary: bool
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        d, h, k = x_BxTxD.shape[-1], self.heads, self.head_dim
        if self.fused_qkv:  # one kernel, a head's query, key and value contiguous: [D, heads, 3, head_dim]
            qkv = precision.einsum("btd,dhsk->sbthk", x_BxTxD, _param(self, "qkv", (d, h, 3, k),
                                                               ("embed", self.group, "qkv", "head_dim")))
            q, kk, v = qkv[0], qkv[1], qkv[2]
        else:
            q, kk, v = (precision.einsum("btd,dhk->bthk", x_BxTxD, _param(self, n, (d, h, k), ("embed", self.group,
                                                                                          "head_dim")))
                        for n in ("query", "key", "value"))
        if self.rotary:
            q, kk = _rotary(q), _rotary(kk)
        t = x_BxTxD.shape[1]
        logits = precision.einsum("bthk,bshk->bhts", q, kk).astype(jnp.float32) / jnp.sqrt(jnp.float32(k))
        causal = jnp.tril(jnp.ones((t, t), bool))
        weights = jax.nn.softmax(jnp.where(causal, logits, jnp.finfo(logits.dtype).min), axis=-1)  # float32
        out = precision.einsum("bhts,bshk->bthk", weights.astype(v.dtype), v)
        return precision.einsum("bthk,hkd->btd", out, _param(self, "out", (h, k, d), (self.group, "head_dim", "embed")))


class _FeedForward(nn.Module):
    """``gelu(x W1 + b1) W2`` over this module's units (no output bias: the block adds it once)."""

    units: int
    group: str
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        d = x_BxTxD.shape[-1]
        h = precision.einsum("btd,du->btu", x_BxTxD, _param(self, "in_kernel", (d, self.units), ("embed", self.group)))
        h = nn.gelu(h + _param(self, "in_bias", (self.units,), (self.group,), nn.initializers.zeros)[None, None, :])
        return precision.einsum("btu,ud->btd", h, _param(self, "out_kernel", (self.units, d), (self.group, "embed")))


class _Block(nn.Module):
    """``x + s_a attn(LN(x)) + b_a`` then ``x + s_f ffn(LN(x)) + b_f``: ``s_a``, ``s_f`` scale the sums over the
    heads and units present, not the shared output biases; with ``whole_branch`` (a block dealt by depth) they scale
    the whole branch, bias included. Returns ``(x, None)``: the carry of a scan over blocks (``split="depth"``)."""

    heads: int
    head_dim: int
    units: int
    heads_group: str
    mlp_group: str
    fused_qkv: bool
    rotary: bool
    attn_scale: float = 1.0
    mlp_scale: float = 1.0
    whole_branch: bool = False
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x_BxTxD: jax.Array, _=None):
        d = x_BxTxD.shape[-1]
        norm = _layer_norm
        bias = lambda name: _param(self, name, (d,), ("embed",), nn.initializers.zeros)[None, None, :]  # noqa: E731
        a = _Attention(self.heads, self.head_dim, self.heads_group, self.fused_qkv, self.rotary, dtype=self.dtype,
                       name="attn")(norm("ln_attn")(x_BxTxD))
        x = x_BxTxD + self._scaled(self.attn_scale, a, bias("attn_bias"))
        f = _FeedForward(self.units, self.mlp_group, dtype=self.dtype, name="mlp")(norm("ln_mlp")(x))
        return x + self._scaled(self.mlp_scale, f, bias("mlp_bias")), None

    def _scaled(self, scale: float, branch: jax.Array, bias: jax.Array) -> jax.Array:
        return scale * (branch + bias) if self.whole_branch else scale * branch + bias


def _head_counts(width: int, positions: str, multiple_of: int, near: int) -> list[int]:
    """Up to two head counts nearest ``near``, ascending, that are multiples of ``multiple_of`` and divide ``width``
    (``head_dim=0``: each head ``width / count`` wide, an even number under rotary positions)."""
    fits = [h for h in range(multiple_of, width + 1, multiple_of)
            if width % h == 0 and (positions != "rotary" or width // h % 2 == 0)]
    return sorted(sorted(fits, key=lambda h: (abs(h - near), h))[:2])


class Transformer(nn.Module):
    """A decoder-only character-level transformer split by width or depth (module docstring).

    Attributes:
      num_classes: the vocabulary (from the data).
      num_layers: blocks L.
      embed_dim: the residual stream's width D.
      num_heads: heads per layer: one number, or one per layer (`subnet` sets a worker's).
      head_dim: each head's width; 0: ``embed_dim / num_heads`` (refused when it does not divide).
      mlp_dim: feed-forward units per layer: one number, or one per layer.
      context: the longest sequence (learned positions: their table's rows); a longer one is refused.
      positions: ``"learned"`` or ``"rotary"`` (rotary needs an even ``head_dim``).
      split: ``"width"`` (heads and units) or ``"depth"`` (blocks).
      scaling: ``"none"``, ``"train"`` (a sub-network scales its partitioned branches by 1/p) or ``"test"`` (the
        test-time network scales them by p); module docstring.
      fused_qkv: one ``[D, heads, 3, head_dim]`` kernel for queries, keys and values (a head's three contiguous).
      full_heads, full_mlp, full_layers: the full network's sizes, set by `subnet` (leave them empty).
      test_fractions: ``((group, p), ...)``, set by `scaled_for_test` on the test-time network (leave it empty).
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`); parameters stay float32,
        LayerNorm statistics and the attention softmax are float32.
    """

    num_classes: int = 84
    num_layers: int = 4
    embed_dim: int = 128
    num_heads: Any = 4
    head_dim: int = 0
    mlp_dim: Any = 512
    context: int = 64
    positions: str = "learned"
    split: str = "width"
    scaling: str = "train"
    fused_qkv: bool = False
    full_heads: Sequence[int] = ()
    full_mlp: Sequence[int] = ()
    full_layers: int = 0
    test_fractions: tuple = ()
    dtype: str = "float32"

    def __post_init__(self):
        for field in ("num_layers", "embed_dim", "context"):
            if not layers.is_pos_int(getattr(self, field)):
                raise ArgError(field, getattr(self, field),
                               f"Transformer.{field}={getattr(self, field)!r}: must be a positive integer,",
                               "e.g. num_layers=4, embed_dim=128, context=64.")
        layers.check_choice("Transformer", "split", self.split, SPLITS)
        if self.scaling is None:  # a config's model.scaling=none reads as None
            object.__setattr__(self, "scaling", "none")
        layers.check_choice("Transformer", "scaling", self.scaling, SCALINGS)
        layers.check_choice("Transformer", "positions", self.positions, POSITIONS)
        heads = self._per_layer("num_heads", self.num_heads)
        mlp = self._per_layer("mlp_dim", self.mlp_dim)
        object.__setattr__(self, "num_heads", heads)
        object.__setattr__(self, "mlp_dim", mlp)
        object.__setattr__(self, "head_dim", self._head_dim(heads))
        object.__setattr__(self, "full_heads", tuple(self.full_heads))
        object.__setattr__(self, "full_mlp", tuple(self.full_mlp))
        object.__setattr__(self, "test_fractions", tuple(tuple(p) for p in self.test_fractions))
        if isinstance(self.full_layers, bool) or not isinstance(self.full_layers, int) or self.full_layers < 0:
            raise ArgError("full_layers", self.full_layers, f"Transformer.full_layers={self.full_layers!r}:",
                           "leave it 0 (subnet sets it).")
        if not isinstance(self.fused_qkv, bool):
            raise ArgError("fused_qkv", self.fused_qkv, f"Transformer.fused_qkv={self.fused_qkv!r}:", "True or False.")
        if self.split == "depth" and (len(set(heads)) > 1 or len(set(mlp)) > 1):
            raise ArgError("split", self.split, f"Transformer(split='depth') scans identical blocks, but num_heads="
                                                f"{heads} and mlp_dim={mlp} differ between layers;",
                           "give one number each, or split='width'.")
        super().__post_init__()

    def _per_layer(self, field: str, value) -> tuple[int, ...]:
        if layers.is_pos_int(value):
            return (int(value),) * self.num_layers
        values = layers.pos_ints("Transformer", field, value, f"give one positive number, or one per layer "
                                                               f"({self.num_layers}).")
        if len(values) != self.num_layers:
            raise ArgError(field, value, f"Transformer.{field}={value!r} has {len(values)} entries for "
                                         f"num_layers={self.num_layers};", "give one number, or one per layer.")
        return values

    def _head_dim(self, heads: tuple[int, ...]) -> int:
        k = self.head_dim
        if k == 0:
            full = tuple(self.full_heads) or heads
            if len(set(full)) > 1:
                raise ArgError("head_dim", k, f"Transformer(num_heads={full}): head_dim=0 means embed_dim / num_heads, "
                                              f"which differs between layers here;",
                               "give head_dim explicitly (every layer's heads share it).")
            if any(self.embed_dim % h for h in full):
                width = max(1, self.embed_dim // full[0])
                width += width % 2 if self.positions == "rotary" else 0  # rotary rotates pairs: an even width
                raise ArgError("head_dim", k, f"Transformer(embed_dim={self.embed_dim}, num_heads={full}): head_dim=0 "
                                              f"means embed_dim / num_heads, which is not a whole number;",
                               ("give head_dim explicitly (e.g.", {"head_dim": width}, ") or", {"num_heads": ...},
                                f"dividing {self.embed_dim}."))
            k = self.embed_dim // full[0]
        if not layers.is_pos_int(k):
            raise ArgError("head_dim", k, f"Transformer.head_dim={k!r}: must be a positive integer", "(0: embed_dim / "
                                                                                                    "num_heads).")
        if self.positions == "rotary" and k % 2:
            raise ArgError("head_dim", k, f"Transformer.head_dim={k} with positions='rotary': rotary embeddings rotate "
                                          f"pairs of a head's features, so head_dim must be even;",
                           f"use head_dim={' or '.join(str(e) for e in (k + 1, k - 1) if e)}, or positions='learned'.")
        return int(k)

    # The model contract (istjax.core.contract) ---------------------------------------------------------------

    def partition_rules(self) -> dict[str, Optional[str]]:
        """Width: ``heads_i`` and ``mlp_i`` are groups; depth: ``blocks``; every other axis stays whole."""
        rules: dict[str, Optional[str]] = {"vocab": None, "classes": None, "embed": None, "positions": None,
                                           "head_dim": None, "qkv": None}
        if self.split == "depth":
            return {**rules, "blocks": "blocks", "heads": None, "mlp": None}
        for i in range(self.num_layers):
            rules[f"heads_{i}"], rules[f"mlp_{i}"] = f"heads_{i}", f"mlp_{i}"
        return rules

    def subnet(self, units: Mapping[str, int]) -> "Transformer":
        """This network at one worker's sizes: ``units["heads_i"]`` heads and ``units["mlp_i"]`` feed-forward units
        in layer i (width), or ``units["blocks"]`` blocks (depth)."""
        if self.split == "depth":
            full = self.full_layers or self.num_layers
            return self.clone(num_layers=int(units.get("blocks", full)), full_layers=full,
                              num_heads=self.num_heads[0], mlp_dim=self.mlp_dim[0])
        heads, mlp = tuple(self.full_heads) or self.num_heads, tuple(self.full_mlp) or self.mlp_dim
        return self.clone(num_heads=tuple(int(units.get(f"heads_{i}", h)) for i, h in enumerate(heads)),
                          mlp_dim=tuple(int(units.get(f"mlp_{i}", f)) for i, f in enumerate(mlp)),
                          full_heads=heads, full_mlp=mlp)

    def scaled_for_test(self, fractions: Mapping[str, float]) -> "Transformer":
        """The test-time network: with ``scaling="test"``, each partitioned branch scaled by ``fractions[group]``,
        the fraction of the group a worker trains (from the sampler's slots); else this network."""
        if self.scaling != "test":
            return self
        return self.clone(test_fractions=tuple(sorted((g, float(p)) for g, p in fractions.items())))

    def group_size_fix(self, group: str, num_workers: int) -> Optional[tuple]:
        """The fix for a layer's heads that W workers cannot share evenly (`istjax.core.contract`): a head count W
        divides that also divides embed_dim (``head_dim=0`` derives each head's width from it), else that count with
        each head's width given, or padding. None for feed-forward units and blocks: any multiple of W builds."""
        heads = tuple(self.full_heads) or self.num_heads
        if not group.startswith("heads_") or len(set(heads)) > 1 or self.head_dim * heads[0] != self.embed_dim:
            return None  # head_dim set apart from the width: any head count builds
        w = num_workers
        counts = _head_counts(self.embed_dim, self.positions, w, heads[0])
        if counts:
            why = f"(a multiple of {w} that divides embed_dim={self.embed_dim})"
            use = [[{"num_heads": c} for c in counts]]
        else:
            why = f"(no multiple of {w} divides embed_dim={self.embed_dim}: give each head its width)"
            use = [{"num_heads": w * max(1, round(heads[0] / w))}, Code("with", ()), {"head_dim": self.head_dim}]
        return ("Use", *use, why, ", or sample with", partition.PAD, "to pad and mask the short workers.")

    def group_sizes(self) -> dict[str, int]:
        """The neuron groups and their sizes in the full network."""
        if self.split == "depth":
            return {"blocks": self.full_layers or self.num_layers}
        heads, mlp = tuple(self.full_heads) or self.num_heads, tuple(self.full_mlp) or self.mlp_dim
        return {**{f"heads_{i}": h for i, h in enumerate(heads)}, **{f"mlp_{i}": f for i, f in enumerate(mlp)}}

    def owner_logits(self, variables, ids: jax.Array, shared=None, *, owner, num_owners: int, reduce) -> jax.Array:
        """The test-time logits from owner ``owner``'s slice (`istjax.core.contract`; the MPI runtime's sharded
        mode): owner ``o`` of ``N`` holds heads and units ``[o * s, (o + 1) * s)`` of every layer (width) or blocks
        ``[o * s, (o + 1) * s)`` (depth), and the shared layers whole. By width, every attention and feed-forward
        branch gives the owner's partial sum over its heads or units, and ``reduce`` adds them (an activation ``[B,
        T, D]`` moves, never a weight); by depth, the blocks run as N turns (`owner_forward.in_turns`)."""
        del shared  # a language model reads no shared input
        mine = self.subnet({g: n // num_owners for g, n in self.group_sizes().items()})
        if self.split == "depth":
            intercept = owner_forward.in_turns("stack", owner, num_owners, reduce)
        else:
            def intercept(next_fun, args, kwargs, context):
                out = next_fun(*args, **kwargs)
                if context.method_name == "__call__" and isinstance(context.module, (_Attention, _FeedForward)):
                    return reduce(out)  # partial sums over the owner's heads or units
                return out
        with nn.intercept_methods(intercept):
            return mine.apply(variables, ids, train=False)

    def tensor_axes(self) -> frozenset:
        """Tensor parallelism's cut (`istjax.core.contract`): every layer's heads and feed-forward units (Megatron's
        attention and MLP split); refused by depth (its blocks run one after another)."""
        if self.split != "width":
            raise ArgError("split", self.split, f"tensor_parallel cuts every layer's heads and feed-forward units; "
                                                f"Transformer(split={self.split!r}) stacks its blocks as one scanned "
                                                f"parameter.", "Use split='width' (the same network).")
        return frozenset(self.group_sizes())

    def tensor_logits(self, variables, ids: jax.Array, shared=None, *, ops) -> jax.Array:
        """Shard ``ops.index()``'s forward pass (`istjax.core.contract`): it holds heads and units
        ``[p * s, (p + 1) * s)`` of every layer and the rest whole; each attention and feed-forward branch runs on
        the shard's heads or units (its input entering them, `istjax.core.collectives.Differentiable.enter`) and
        their partial sums are added (``reduce``): one all-reduce after each branch, the whole logits on every
        shard."""
        del shared
        mine = self.subnet({g: n // ops.size for g, n in self.group_sizes().items()})

        def intercept(next_fun, args, kwargs, context):
            if context.method_name == "__call__" and isinstance(context.module, (_Attention, _FeedForward)):
                return ops.reduce(next_fun(ops.enter(args[0]), *args[1:], **kwargs))
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(intercept):
            return mine.apply(variables, ids, train=False)

    def scores(self, logits_BxTxV: jax.Array, labels_BxT: jax.Array):
        """The language model's loss (nats per character) and next-character accuracy (`lm_scores`)."""
        return lm_scores(logits_BxTxV, labels_BxT)

    def _scale(self, group: str, present: int, full: int, train: bool) -> float:
        """A partitioned branch's factor: 1/p while a sub-network trains (``"train"``), p at test (``"test"``)."""
        s = dict(self.test_fractions).get(group, 1.0)
        if train and self.scaling == "train" and full and present != full:
            s *= full / present
        return s

    # The network ------------------------------------------------------------------------------------------------

    @nn.compact
    def __call__(self, ids_BxT: jax.Array, train: bool = True) -> jax.Array:
        t = ids_BxT.shape[-1]
        if ids_BxT.ndim != 2 or t > self.context:
            raise ArgError("context", self.context, f"Transformer(context={self.context}) got token ids of shape "
                                                    f"{tuple(ids_BxT.shape)}: it reads [batch, sequence] with a "
                                                    f"sequence of at most {self.context};",
                           f"use windows of at most {self.context} characters (data.kwargs.context) or a larger "
                           f"model.context.")
        ids = ids_BxT.astype(jnp.int32)
        x = nn.Embed(self.num_classes, self.embed_dim, name="embed", **precision.dtype_options(self.dtype),
                     embedding_init=nn.with_logical_partitioning(_INIT, ("vocab", "embed")))(ids)
        if self.positions == "learned":
            x = x + _param(self, "positions", (self.context, self.embed_dim), ("positions", "embed"))[None, :t]
        x = self.body(x, train)
        x = _layer_norm("ln_final")(x)
        return nn.Dense(self.num_classes, name="head", **precision.dense_options(self.dtype),
                        kernel_init=nn.with_logical_partitioning(_INIT, ("embed", "classes")),
                        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))(x)

    def body(self, x: jax.Array, train: bool) -> jax.Array:
        """The L blocks: one module per layer (width split), or one scanned stack (depth split)."""
        rotary = self.positions == "rotary"
        if self.split == "depth":
            s = self._scale("blocks", self.num_layers, self.full_layers, train)
            stack = nn.scan(_Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.num_layers,
                            metadata_params={nn.PARTITION_NAME: "blocks"})
            return self.stack(stack(self.num_heads[0], self.head_dim, self.mlp_dim[0], "heads", "mlp",
                                    self.fused_qkv, rotary, s, s, True, dtype=self.dtype, name="blocks"), x)
        full_heads, full_mlp = tuple(self.full_heads), tuple(self.full_mlp)
        for i in range(self.num_layers):
            heads, units = self.num_heads[i], self.mlp_dim[i]
            x, _ = _Block(heads, self.head_dim, units, f"heads_{i}", f"mlp_{i}", self.fused_qkv, rotary,
                          self._scale(f"heads_{i}", heads, full_heads[i] if full_heads else 0, train),
                          self._scale(f"mlp_{i}", units, full_mlp[i] if full_mlp else 0, train),
                          dtype=self.dtype, name=f"block_{i}")(x)
        return x

    def stack(self, blocks: nn.Module, x: jax.Array) -> jax.Array:
        """The scanned blocks applied to ``x`` (a method of its own so that the sharded evaluation, `owner_logits`,
        can run each owner's blocks in turn)."""
        return blocks(x, None)[0]
