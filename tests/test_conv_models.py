"""Tests for istjax.models.resnet and istjax.models.vgg: ResNet, PreActResNet and VGG partitioned over channels."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.reference import reference_round
from istjax.core.spec import path_str
from istjax.models.resnet import RESNET_PRESETS, PreActResNet, ResNet
from istjax.models.vgg import VGG

C = 3  # classes
X = jax.random.normal(jax.random.key(1), (8, 8, 8, 3))
TINY = {
    "resnet": lambda **kw: ResNet(stage_sizes=(1, 1), widths=(64, 128), width_multiplier=1 / 16, num_classes=C, **kw),
    "preact": lambda **kw: PreActResNet(stage_sizes=(1, 2), widths=(64, 128), width_multiplier=1 / 16,
                                        num_classes=C, **kw),
    "vgg": lambda **kw: VGG(features=((64,), (128, 64)), hidden=(96,), width_multiplier=1 / 16, num_classes=C, **kw),
}
GROUPS = {
    "resnet": {"stage_0": 4, "stage_1": 8, "block_0_0": 4, "block_1_0": 8},
    "preact": {"stage_0": 4, "stage_1": 8, "block_0_0": 4, "block_1_0": 8, "block_1_1": 8},
    "vgg": {"conv_0_0": 4, "conv_1_0": 8, "conv_1_1": 4, "fc_0": 6},
}


def _boxed(tree):
    return jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))


def _names(tree):
    return jax.tree.leaves(nn.get_partition_spec(tree), is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))


def _abstract(model, x=X):
    return jax.eval_shape(lambda: model.init(jax.random.key(0), x, train=False))


def _num_params(model, shape=(1, 32, 32, 3)):
    v = _abstract(model, jnp.zeros(shape))
    return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(nn.unbox(v["params"])))


@pytest.mark.parametrize("kind", list(TINY))
def test_every_param_named_by_a_rule_and_groups_sized(kind):
    model = TINY[kind]()
    v = _abstract(model)
    rules = model.partition_rules()
    assert {g for g in rules.values() if g is not None} == set(GROUPS[kind])
    assert rules["image_channels"] is None and rules["classes"] is None
    leaves, names = _boxed(v["params"]), _names(v["params"])
    assert leaves and len(leaves) == len(names) == len(jax.tree.leaves(nn.unbox(v["params"])))
    for spec, leaf in zip(names, leaves):
        assert isinstance(leaf, nn.LogicallyPartitioned)
        assert len(spec) == len(leaf.value.shape) and all(n is None or n in rules for n in spec), spec
    spec = istjax.spec_from_logical(v["params"], rules)
    assert spec.group_sizes == GROUPS[kind]
    assert jax.eval_shape(lambda w: model.apply(w, X, train=False), nn.unbox(v)).shape == (8, C)


def test_resnet_layout_names():
    p = nn.get_partition_spec(_abstract(TINY["resnet"]())["params"])
    assert tuple(p["conv_stem"]["kernel"]) == (None, None, "image_channels", "stage_0")
    assert tuple(p["stage1_block0_conv1"]["kernel"]) == (None, None, "stage_0", "block_1_0")
    assert tuple(p["stage1_block0_conv2"]["kernel"]) == (None, None, "block_1_0", "stage_1")
    assert tuple(p["stage1_block0_proj_conv"]["kernel"]) == (None, None, "stage_0", "stage_1")
    assert tuple(p["stage1_block0_proj_bn"]["scale"]) == ("stage_1",)
    assert tuple(p["head"]["kernel"]) == ("stage_1", "classes") and tuple(p["head"]["bias"]) == ("classes",)
    assert "stage0_block0_proj_conv" not in p  # stage 0: stride 1 at the stem's width, identity shortcut
    pre = nn.get_partition_spec(_abstract(TINY["preact"]())["params"])
    assert tuple(pre["stage1_block0_bn1"]["scale"]) == ("stage_0",)  # BN on the block's input stream
    assert tuple(pre["stage1_block1_bn1"]["scale"]) == ("stage_1",)
    assert tuple(pre["stage1_block0_proj_conv"]["kernel"]) == (None, None, "stage_0", "stage_1")
    assert "stage1_block0_proj_bn" not in pre and "bn_stem" not in pre
    assert tuple(pre["bn_final"]["scale"]) == ("stage_1",)
    vgg = nn.get_partition_spec(_abstract(TINY["vgg"]())["params"])
    assert tuple(vgg["conv0_0"]["kernel"]) == (None, None, "image_channels", "conv_0_0")
    assert tuple(vgg["conv1_1"]["kernel"]) == (None, None, "conv_1_0", "conv_1_1")
    assert tuple(vgg["fc0"]["kernel"]) == ("conv_1_1", "fc_0")  # global average pool: no spatial tiles
    assert tuple(vgg["head"]["kernel"]) == ("fc_0", "classes")


@pytest.mark.parametrize("kind", ["resnet", "preact"])
def test_tied_axes_name_both_sides_of_every_addition(kind):
    model = TINY[kind]()
    tied = model.tied_axes()
    rules = model.partition_rules()
    assert tied == [("stage_0",), ("stage_1",)]
    assert all(len({rules[n] for n in t}) == 1 for t in tied)
    p = nn.get_partition_spec(_abstract(model)["params"])
    tied_names = {n for t in tied for n in t}
    for mod in p:
        if mod.endswith("_conv2") or mod.endswith("_proj_conv"):
            out = tuple(p[mod]["kernel"])[-1]
            stage = re.match(r"stage(\d+)_", mod).group(1)
            assert out == f"stage_{stage}" and out in tied_names  # branch and shortcut write the stream's name
    assert TINY["vgg"]().tied_axes() == []


@pytest.mark.parametrize("batch_norm", ["running", "batch"])
@pytest.mark.parametrize("kind", list(TINY))
def test_subnet_shapes_are_narrowed_full_shapes(kind, batch_norm):
    model = TINY[kind](batch_norm=batch_norm)
    rules = model.partition_rules()
    half = {g: n // 2 for g, n in GROUPS[kind].items()}
    sub = model.subnet(half)
    assert sub.width_multiplier == 1.0 and sub.batch_norm == batch_norm
    assert model.subnet({}).partition_rules() == rules
    full, small = _abstract(model), _abstract(sub)
    fl, sl, names = _boxed(full["params"]), _boxed(small["params"]), _names(full["params"])
    assert len(fl) == len(sl) == len(names)
    for spec, f, s in zip(names, fl, sl):
        want = tuple(half[rules[n]] if n is not None and rules[n] is not None else d
                     for n, d in zip(spec, f.value.shape))
        assert s.value.shape == want, (spec, f.value.shape, s.value.shape)
    assert istjax.spec_from_logical(small["params"], rules).group_sizes == half
    if batch_norm == "batch":
        assert set(full) == set(small) == {"params"}
        return
    # Every partitioned BatchNorm scale has running mean/var siblings of its shape, in the full net and the subnet.
    for tree in (full, small):
        params, stats = nn.unbox(tree["params"]), tree["batch_stats"]
        scales = {m for m, leaves in params.items() if "scale" in leaves}
        assert scales and set(stats) == scales
        for mod in scales:
            assert stats[mod]["mean"].shape == stats[mod]["var"].shape == params[mod]["scale"].shape


@pytest.mark.parametrize("kind", list(TINY))
def test_classifier_task_spec_and_state_spec(kind):
    task = istjax.classifier(TINY[kind](), X, num_classes=C)
    assert task.spec.group_sizes == GROUPS[kind]
    assert task.state_spec.group_sizes == GROUPS[kind]
    assert task.min_eval_batch == 1 and task.recompute_state is not None
    flat_params = {path_str(p): s for p, s in jax.tree_util.tree_flatten_with_path(task.spec.leaves)[0]}
    flat_state = {path_str(p): s for p, s in jax.tree_util.tree_flatten_with_path(task.state_spec.leaves)[0]}
    assert flat_state and all(k.startswith("batch_stats/") for k in flat_state)
    for path, leaf in flat_state.items():
        module = path.split("/")[1]
        assert leaf == flat_params[f"{module}/scale"], path
        assert not leaf.shared  # every BatchNorm here is on a partitioned channel group
    batch_task = istjax.classifier(TINY[kind](batch_norm="batch"), X, num_classes=C)
    assert not batch_task.has_state and batch_task.min_eval_batch == istjax.core.task.MIN_BATCH_STATISTICS_EVAL


def _close(a, b, what):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la, what
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6, err_msg=what)


@pytest.mark.parametrize("kind", list(TINY))
@pytest.mark.slow
def test_ist_round_equals_reference_loop(kind):
    W, K, B = 2, 2, 8  # batches of 8: BatchNorm on fewer examples is ill-conditioned in float32
    task = istjax.classifier(TINY[kind](), X, num_classes=C)
    alg = istjax.ist(task, optax.sgd(0.05), num_workers=W, local_steps=K)
    state = alg.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    batches = {"x": jnp.asarray(rng.normal(size=(W, K, B, 8, 8, 3)), jnp.float32),
               "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}
    fast, metrics = alg.round(state, batches)
    slow = reference_round(alg, state, batches)
    _close(fast.params, slow.params, f"{kind} params")
    _close(fast.model_state, slow.model_state, f"{kind} model state")
    assert np.isfinite(float(metrics["train_loss"]))
    moved = [not np.allclose(a, b) for a, b in zip(jax.tree.leaves(fast.params), jax.tree.leaves(state.params))]
    assert all(moved)  # every parameter (partitioned or shared) was trained and merged back


def test_preset_parameter_counts():
    # kuangliu/pytorch-cifar's ResNet18 / ResNet34 counts (10 classes); running statistics are not parameters.
    assert _num_params(ResNet.resnet18()) == 11_173_962
    assert _num_params(ResNet.resnet34()) == 21_282_122
    # He et al.'s ResNet-20 (0.27M) with 1x1 projection shortcuts (+BN) instead of zero padding.
    assert _num_params(ResNet.resnet20()) == 272_474
    assert _num_params(PreActResNet.resnet20()) == 272_282  # projections without BN, one final BN
    assert PreActResNet.resnet110().stage_sizes == (18, 18, 18) and PreActResNet.resnet56().widths == (16, 32, 64)
    assert PreActResNet.resnet18().stage_sizes == (2, 2, 2, 2)
    assert isinstance(PreActResNet.resnet18(), PreActResNet) and isinstance(ResNet.resnet18(), ResNet)
    assert ResNet.cifar(32).stage_sizes == (5, 5, 5)
    assert set(RESNET_PRESETS) == {"resnet18", "resnet34", "resnet20", "resnet56", "resnet110"}


def test_width_multiplier_and_flat_inputs():
    tiny18 = ResNet.resnet18(width_multiplier=1 / 16, num_classes=C)
    assert tiny18.stage_widths() == (4, 8, 16, 32)
    assert ResNet(stage_sizes=(1,), widths=(3,), width_multiplier=0.1).stage_widths() == (1,)  # at least 1
    assert ResNet(stage_sizes=(1,), widths=(10,), width_multiplier=0.25).stage_widths() == (3,)  # 2.5 rounds up
    model = ResNet(stage_sizes=[1, 1], widths=[64, 128], inner=[[32], [64]], width_multiplier=1 / 16,
                   image_shape=[8, 8, 3], num_classes=C)
    assert model.stage_sizes == (1, 1) and model.inner == ((32,), (64,)) and model.image_shape == (8, 8, 3)
    assert model.inner_widths() == ((2,), (4,))
    one_stage = ResNet(stage_sizes=(1,), widths=(4,), image_shape=(8, 8, 3), num_classes=C)
    flat = X.reshape(8, -1)
    variables = jax.jit(lambda x: one_stage.init(jax.random.key(0), x, train=False))(flat)
    out, upd = jax.jit(lambda v, x: one_stage.apply(v, x, train=True, mutable=["batch_stats"]))(variables, flat)
    assert out.shape == (8, C) and bool(jnp.all(jnp.isfinite(out)))
    assert not np.allclose(upd["batch_stats"]["bn_stem"]["mean"], variables["batch_stats"]["bn_stem"]["mean"])
    assert not ResNet().test_batch_statistics() and VGG(batch_norm="batch").test_batch_statistics()


@pytest.mark.parametrize("cls, kwargs, field", [
    (ResNet, dict(stage_sizes=(1, 1), widths=(8,)), "widths"),
    (ResNet, dict(stage_sizes=(1, 0), widths=(8, 16)), "stage_sizes"),
    (ResNet, dict(stage_sizes=(), widths=()), "stage_sizes"),
    (PreActResNet, dict(stage_sizes=(1, 2), widths=(8, 16), inner=((8,), (16,))), "inner[1]"),
    (PreActResNet, dict(stage_sizes=(1, 2), widths=(8, 16), inner=((8,),)), "inner"),
    (ResNet, dict(width_multiplier=0.0), "width_multiplier"),
    (ResNet, dict(width_multiplier=float("nan")), "width_multiplier"),
    (PreActResNet, dict(batch_norm="layer"), "batch_norm"),
    (ResNet, dict(bn_momentum=1.0), "bn_momentum"),
    (ResNet, dict(num_classes=0), "num_classes"),
    (ResNet, dict(image_shape=(8, 8)), "image_shape"),
    (VGG, dict(features=((64,), ())), "features[1]"),
    (VGG, dict(features=()), "features"),
    (VGG, dict(hidden=(512, -1)), "hidden"),
    (VGG, dict(width_multiplier=-1), "width_multiplier"),
    (VGG, dict(batch_norm=True), "batch_norm"),
])
def test_validation_errors_name_the_field(cls, kwargs, field):
    with pytest.raises(ValueError, match=re.escape(f"{cls.__name__}.{field}=")):
        cls(**kwargs)


def test_bad_preset_depth():
    with pytest.raises(ValueError, match=r"ResNet\.cifar\(depth=21\).*6n \+ 2"):
        ResNet.cifar(21)
    with pytest.raises(ValueError, match=r"PreActResNet\.preset\(name='resnet50'\).*resnet18"):
        PreActResNet.preset("resnet50")


def _held_mask(spec, partition, w):
    """Per leaf, a 0/1 array keeping exactly the positions worker w holds on every partitioned axis."""
    from istjax.core.spec import tile_positions

    def leaf_mask(leaf_spec, x):
        mask = np.ones(np.shape(x), np.float32)
        for axis, a in enumerate(leaf_spec.axes):
            if a is None:
                continue
            size = spec.group_sizes[a.group]
            held = np.asarray(partition.indices[a.group][w])
            keep = np.zeros(np.shape(x)[axis], np.float32)
            keep[np.asarray(tile_positions(held, size, a.tiles))] = 1.0
            shape = [1] * np.ndim(x)
            shape[axis] = -1
            mask = mask * keep.reshape(shape)
        return mask

    return lambda tree: jax.tree.map(leaf_mask, spec.leaves, tree)


@pytest.mark.parametrize("kind", list(TINY))
def test_worker_subnetwork_equals_full_network_without_the_other_channels(kind):
    """Worker w's narrow network (training mode, batch statistics) computes the full network's logits when every
    channel and unit w does not hold is removed (its weights, BatchNorm scale and bias zeroed): the spec names every
    axis a channel touches, residual additions included."""
    model = TINY[kind]()
    for got, removed, stats in _two_workers(model):
        want = model.apply({"params": removed, **stats}, X, train=True, mutable=list(stats))[0]
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def _two_workers(model):
    """For each of two workers of a uniform partition (halves): the logits of its narrow network (training mode)
    and the full parameters with every channel it does not hold zeroed, with the full model's statistics."""
    task = istjax.classifier(model, X, num_classes=C)
    params, stats = task.init(jax.random.key(2)), task.init_state(jax.random.key(2))
    sampler = istjax.uniform()
    p = sampler.sample(jax.random.key(3), task.spec.group_sizes, 2)
    slots = sampler.slots(task.spec.group_sizes, 2)
    assert all(slots[g] * 2 == n for g, n in task.spec.group_sizes.items())  # halves: one factor, 2, for scaling
    sub = istjax.extract(params, p, task.spec)
    sub_stats = istjax.extract(stats, p, task.state_spec)
    for w in range(2):
        variables = {"params": jax.tree.map(lambda a: a[w], sub), **jax.tree.map(lambda a: a[w], sub_stats)}
        got = model.subnet(slots).apply(variables, X, train=True, mutable=list(stats))[0]
        yield got, jax.tree.map(lambda a, m: a * m, params, _held_mask(task.spec, p, w)(params)), stats


# ---------------------------------------------------------------------------------------------------------------
# Layouts and activation scaling (channel_partition, activation_scale; issue 20's diagnosis)

RESNETS = {k: TINY[k] for k in ("resnet", "preact")}


def _scale_conv2(params, factor):
    """Every block's conv2 kernel times ``factor``: the same as multiplying its inner activations (conv2 is linear
    and has no bias), computed without the model's scaling code."""
    return {k: ({**v, "kernel": v["kernel"] * factor} if k.endswith("_conv2") else v) for k, v in params.items()}


@pytest.mark.parametrize("kind", list(RESNETS))
def test_inner_layout_partitions_only_block_channels(kind):
    task = istjax.classifier(RESNETS[kind](channel_partition="inner"), X, num_classes=C)
    assert set(task.spec.group_sizes) == {g for g in GROUPS[kind] if g.startswith("block_")}
    leaves = jax.tree.leaves(task.spec.leaves, is_leaf=lambda s: hasattr(s, "axes"))
    groups = {a.group for s in leaves for a in s.axes if a is not None}
    assert groups == set(task.spec.group_sizes)  # the stream, stem, projections and head are whole (shared)


@pytest.mark.parametrize("kind", list(RESNETS))
@pytest.mark.parametrize("scale", ["none", "train"])
def test_inner_layout_subnetwork_equals_full_network_without_the_other_channels(kind, scale):
    """With only the inner channels partitioned, worker w's narrow network is the full network with the inner
    channels w does not hold removed; with ``activation_scale="train"`` its inner activations are also multiplied
    by (block's inner channels) / (channels w holds)."""
    model = RESNETS[kind](channel_partition="inner", activation_scale=scale)
    for got, removed, stats in _two_workers(model):
        if scale == "train":
            removed = _scale_conv2(removed, 2.0)
        plain = RESNETS[kind](channel_partition="inner")
        want = plain.apply({"params": removed, **stats}, X, train=True, mutable=list(stats))[0]
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", list(RESNETS))
def test_test_time_scaling_is_conv2_scaled_by_test_keep(kind):
    """``activation_scale="test"``: the network evaluated at test time (the task's) multiplies every block's inner
    activations by ``test_keep``; the training network and every sub-network are unscaled."""
    model = RESNETS[kind](channel_partition="inner", activation_scale="test", test_keep=0.25)
    task = istjax.classifier(model, X, num_classes=C)
    params, stats = task.init(jax.random.key(2)), task.init_state(jax.random.key(2))
    batch = {"x": X, "y": jnp.zeros((X.shape[0],), jnp.int32)}
    loss, _ = task.evaluate(params, stats, batch)
    plain = RESNETS[kind](channel_partition="inner")
    logits = plain.apply({"params": _scale_conv2(params, 0.25), **stats}, X, train=False)
    want = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()
    np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
    assert model.subnet({"block_0_0": 2}).inner_scale is None  # sub-networks train unscaled
    train_logits = model.apply({"params": params, **stats}, X, train=True, mutable=list(stats))[0]
    np.testing.assert_allclose(np.asarray(train_logits), np.asarray(
        plain.apply({"params": params, **stats}, X, train=True, mutable=list(stats))[0]), rtol=1e-6)


@pytest.mark.parametrize("kind", list(RESNETS))
@pytest.mark.parametrize("layout", ["all", "inner"])
@pytest.mark.slow
def test_ist_with_one_worker_equals_full_model_training(kind, layout):
    """W = 1 channel IST is plain SGD with momentum on the full network, BatchNorm statistics updated step by
    step: a round of K steps equals K hand-written optax steps."""
    model = RESNETS[kind](channel_partition=layout)
    task = istjax.classifier(model, X, num_classes=C)
    K, B = 3, 8
    opt = optax.sgd(0.05, momentum=0.9)
    alg = istjax.ist(task, opt, num_workers=1, local_steps=K, model_state="carry", optimizer_state="carry")
    state = alg.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    batches = {"x": jnp.asarray(rng.normal(size=(1, K, B, 8, 8, 3)), jnp.float32),
               "y": jnp.asarray(rng.integers(0, C, size=(1, K, B)), jnp.int32)}
    new, _ = alg.round(state, batches)

    params, stats, opt_state = state.params, state.model_state, opt.init(state.params)
    for k in range(K):
        def loss(p):
            logits, upd = model.apply({"params": p, **stats}, batches["x"][0, k], train=True, mutable=list(stats))
            return optax.softmax_cross_entropy_with_integer_labels(logits, batches["y"][0, k]).mean(), upd

        (_, stats), g = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = opt.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
    _close(new.params, params, f"{kind} {layout} params")
    _close(new.model_state, stats, f"{kind} {layout} statistics")


@pytest.mark.parametrize("field, value", [("channel_partition", "stream"), ("activation_scale", "dropout"),
                                          ("test_keep", 0.0), ("test_keep", 1.5)])
def test_layout_and_scaling_fields_are_checked(field, value):
    with pytest.raises(ValueError, match=f"ResNet.{field}="):
        ResNet(stage_sizes=(1,), widths=(4,), **{field: value})


def test_activation_scale_none_from_the_command_line_is_the_none_choice():
    # ml_collections parses ``--config.model.activation_scale=none`` to None.
    assert ResNet(stage_sizes=(1,), widths=(4,), activation_scale=None).activation_scale == "none"
