"""Tests for istjax.models.cnn: the residual CNN with BatchNorm, partitioned over channels."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from istjax import spec_from_logical
from istjax.models.cnn import CNN
from istjax.models.layers import channel_batch_norm

X = jax.random.normal(jax.random.key(1), (4, 8, 8, 3))
FULL = dict(widths=(4, 8), blocks=(2, 1), inner=((6, 4), (12,)))
HALF = {"stage_0": 2, "stage_1": 4, "block_0_0": 3, "block_0_1": 2, "block_1_0": 6}


@pytest.fixture(scope="module")
def running():
    model = CNN(**FULL)
    return model, jax.jit(lambda key, x: model.init(key, x, train=False))(jax.random.key(0), X)  # eager: 2x slower


def _boxed_leaves(tree):
    return jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))


def test_init_collections(running):
    model, variables = running
    assert set(variables) == {"params", "batch_stats"}
    bs = variables["batch_stats"]["stage0_block0_bn1"]
    assert set(bs) == {"mean", "var"} and bs["mean"].shape == (6,)
    batch_model = CNN(**FULL, batch_norm="batch")
    bvars = batch_model.init(jax.random.key(0), X, train=False)
    assert set(bvars) == {"params"}
    # Same parameter tree (paths and shapes) in both BatchNorm modes.
    shapes = lambda t: jax.tree.map(np.shape, nn.unbox(t))  # noqa: E731
    assert shapes(bvars["params"]) == shapes(variables["params"])
    assert model.apply(variables, X, train=False).shape == (4, 10)


def test_every_param_boxed_with_known_names(running):
    model, variables = running
    rules = model.partition_rules()
    assert rules == {"image_channels": None, "classes": None, "stage_0": "stage_0", "stage_1": "stage_1",
                     "block_0_0": "block_0_0", "block_0_1": "block_0_1", "block_1_0": "block_1_0"}
    leaves = _boxed_leaves(variables["params"])
    assert leaves and all(isinstance(leaf, nn.LogicallyPartitioned) for leaf in leaves)
    specs = jax.tree.leaves(nn.get_partition_spec(variables["params"]),
                            is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    assert len(specs) == len(leaves)
    for spec, leaf in zip(specs, leaves):
        assert len(spec) == leaf.value.ndim
        assert all(n is None or n in rules for n in spec)
    p = nn.get_partition_spec(variables["params"])
    assert tuple(p["stage1_down_conv"]["kernel"]) == (None, None, "stage_0", "stage_1")
    assert tuple(p["stage0_block1_conv2"]["kernel"]) == (None, None, "block_0_1", "stage_0")
    assert tuple(p["stage0_block0_bn1"]["scale"]) == ("block_0_0",)
    assert tuple(p["head"]["kernel"]) == ("stage_1", "classes")
    spec = spec_from_logical(variables["params"], rules)
    assert spec.group_sizes == {"stage_0": 4, "stage_1": 8, "block_0_0": 6, "block_0_1": 4, "block_1_0": 12}


@pytest.mark.parametrize("batch_norm", ["running", "batch"])
def test_subnet_shapes_are_narrowed_full_shapes(batch_norm):
    model = CNN(**FULL, batch_norm=batch_norm)
    sub = model.subnet(HALF)
    assert sub.widths == (2, 4) and sub.inner == ((3, 2), (6,)) and sub.batch_norm == batch_norm
    assert model.subnet({}).inner_widths() == model.inner_widths()
    rules = model.partition_rules()
    full = jax.eval_shape(lambda: model.init(jax.random.key(0), X, train=False))
    small = jax.eval_shape(lambda: sub.init(jax.random.key(0), X, train=False))
    names = jax.tree.leaves(nn.get_partition_spec(full["params"]),
                            is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    fl, sl = _boxed_leaves(full["params"]), _boxed_leaves(small["params"])
    assert len(names) == len(fl) == len(sl)
    for spec, f, s in zip(names, fl, sl):
        expect = tuple(HALF[rules[n]] if n is not None and rules[n] is not None else d
                       for n, d in zip(spec, f.value.shape))
        assert s.value.shape == expect, (spec, f.value.shape, s.value.shape)
    if batch_norm == "running":
        # Running stats follow the sibling scale of their BatchNorm module.
        for mod, stats in small["batch_stats"].items():
            assert stats["mean"].shape == stats["var"].shape == small["params"][mod]["scale"].value.shape


def test_sliced_full_params_run_in_subnet(running):
    """Taking the first units of every group from the full variables gives valid subnet variables."""
    model, variables = running
    sub = model.subnet(HALF)
    rules = model.partition_rules()
    params = nn.unbox(variables["params"])
    names = nn.get_partition_spec(variables["params"])

    def narrow(a, spec):
        idx = tuple(slice(0, HALF[rules[n]]) if n is not None and rules[n] is not None else slice(None)
                    for n in spec)
        return a[idx]

    sliced = jax.tree.map(narrow, params, names)
    stats = {m: {k: v[: sliced[m]["scale"].shape[0]] for k, v in s.items()}
             for m, s in variables["batch_stats"].items()}
    out, upd = sub.apply({"params": sliced, "batch_stats": stats}, X, train=True, mutable=["batch_stats"])
    assert out.shape == (4, 10) and bool(jnp.all(jnp.isfinite(out)))
    assert jax.tree.map(np.shape, upd["batch_stats"]) == jax.tree.map(np.shape, stats)


def test_running_stats_update_and_eval_uses_them(running):
    model, variables = running
    y0 = model.apply(variables, X, train=False)
    assert np.array_equal(np.asarray(y0), np.asarray(model.apply(variables, X, train=False)))
    _, upd = model.apply(variables, X + 3.0, train=True, mutable=["batch_stats"])
    before, after = variables["batch_stats"], upd["batch_stats"]
    assert set(after) == set(before)
    assert not np.allclose(after["bn_stem"]["mean"], before["bn_stem"]["mean"])
    # momentum 0.9: new mean = 0.9 * 0 + 0.1 * batch mean of the stem conv output
    params = nn.unbox(variables["params"])
    stem_BxHxWxC = jax.lax.conv_general_dilated(X + 3.0, params["conv_stem"]["kernel"], (1, 1), "SAME",
                                                dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(after["bn_stem"]["mean"], 0.1 * jnp.mean(stem_BxHxWxC, axis=(0, 1, 2)),
                               rtol=1e-5, atol=1e-6)
    y1 = model.apply({"params": variables["params"], "batch_stats": after}, X, train=False)
    assert not np.allclose(y0, y1)


def test_batch_mode_is_stateless_and_uses_batch_stats():
    model = CNN(widths=(4, 8), batch_norm="batch")
    variables = model.init(jax.random.key(0), X, train=False)
    y_eval = model.apply(variables, X, train=False)
    y_train = model.apply(variables, X, train=True)
    np.testing.assert_allclose(y_eval, y_train, rtol=1e-6)
    # Output for one example depends on the rest of the batch (batch statistics).
    y_other = model.apply(variables, jnp.concatenate([X[:1], 5.0 * X[1:]]), train=False)
    assert not np.allclose(y_eval[0], y_other[0])


def test_channel_batch_norm_matches_flax_batchnorm():
    x = jax.random.normal(jax.random.key(2), (3, 5, 5, 4)) * 2.0 + 1.0
    scale, bias = jnp.arange(1.0, 5.0), jnp.arange(4.0) - 1.0
    ours = channel_batch_norm(x, scale, bias)
    bn = nn.BatchNorm(use_running_average=False, use_fast_variance=False)
    ref, _ = bn.apply({"params": {"scale": scale, "bias": bias},
                       "batch_stats": {"mean": jnp.zeros(4), "var": jnp.ones(4)}}, x, mutable=["batch_stats"])
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jnp.mean(channel_batch_norm(x), axis=(0, 1, 2)), jnp.zeros(4), atol=1e-5)


def test_tiny_model_and_jit():
    model = CNN(widths=(2,), blocks=(1,), num_classes=3)
    variables = model.init(jax.random.key(0), X, train=False)
    assert set(nn.unbox(variables["params"])) == {"conv_stem", "bn_stem", "stage0_block0_conv1", "stage0_block0_bn1",
                                                  "stage0_block0_conv2", "stage0_block0_bn2", "head"}
    out, _ = jax.jit(lambda v, x: model.apply(v, x, train=True, mutable=["batch_stats"]))(variables, X)
    assert out.shape == (4, 3) and bool(jnp.all(jnp.isfinite(out)))


def test_lists_are_normalised_to_tuples():
    model = CNN(widths=[4, 8], blocks=[1, 2], inner=[[3], [5, 6]])
    assert model.widths == (4, 8) and model.blocks == (1, 2) and model.inner == ((3,), (5, 6))


@pytest.mark.parametrize("kwargs, field", [
    (dict(widths=(4, 8), blocks=(1,)), "blocks"),
    (dict(widths=(4, 0)), "widths"),
    (dict(widths=(4, 8), inner=((4,),)), "inner"),
    (dict(widths=(4, 8), blocks=(1, 2), inner=((4,), (8,))), "inner[1]"),
    (dict(batch_norm="layer"), "batch_norm"),
    (dict(bn_momentum=1.0), "bn_momentum"),
    (dict(num_classes=0), "num_classes"),
])
def test_validation_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=re.escape(f"CNN.{field}=")):
        CNN(**kwargs)
