"""The core every model family builds on: model state, test-time evaluation, per-group samplers, shared inputs.

A small residual CNN with running-statistics BatchNorm (`istjax.models.CNN`) and a tiny graph model that reads a
shared adjacency are run through the vectorised runtimes and the plain reference loop; `merge(extract(...))` is the
identity on parameters and model state; bad configs are refused naming the field.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.algorithms.reference import reference_round
from istjax.models import CNN

K, B, C = 2, 8, 3


def _cnn_task(widths=(4, 8), inner=None, batch_norm="running"):
    model = CNN(widths=widths, blocks=(1, 1), inner=inner, num_classes=C, batch_norm=batch_norm)
    return istjax.classifier(model, jnp.zeros((B, 6, 6, 2)), num_classes=C)


def _image_batches(w, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.normal(size=(w, K, B, 6, 6, 2)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(w, K, B)), jnp.int32)}


def _close(a, b, rtol=2e-5, atol=2e-6, what=""):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la, what
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=what)


# Channels dealt uniformly; block 0's inner group (2 channels) is smaller than W = 4, so it is dealt with overlap.
MIXED = istjax.per_group({"block_0_0": istjax.overlapping(1)}, default=istjax.uniform())


@pytest.mark.slow
def test_cnn_task_has_running_statistics_partitioned_like_their_scale():
    task = _cnn_task()
    state = task.init_state(jax.random.key(0))
    assert set(state) == {"batch_stats"}
    flat_state = {istjax.core.spec.path_str(p): s for p, s in
                  jax.tree_util.tree_flatten_with_path(task.state_spec.leaves)[0]}
    flat_params = {istjax.core.spec.path_str(p): s for p, s in
                   jax.tree_util.tree_flatten_with_path(task.spec.leaves)[0]}
    assert flat_state["batch_stats/stage0_block0_bn1/mean"] == flat_params["stage0_block0_bn1/scale"]
    assert flat_state["batch_stats/stage1_down_bn/var"].axes[0].group == "stage_1"
    assert task.state_spec.group_sizes == task.spec.group_sizes


@pytest.mark.parametrize("sampler,w", [(istjax.uniform(), 2), (MIXED, 4), (istjax.overlapping(2), 3)])
@pytest.mark.slow
def test_merge_of_extract_is_identity_on_params_and_model_state(sampler, w):
    task = _cnn_task(inner=((2,), (8,)))
    params, state = task.init(jax.random.key(1)), task.init_state(jax.random.key(1))
    state = jax.tree.map(lambda s: s + jax.random.uniform(jax.random.key(2), s.shape), state)  # not all 0 / 1
    p = sampler.sample(jax.random.key(3), task.spec.group_sizes, w)
    disjoint = istjax.core.partition.disjoint_groups(sampler, task.spec.group_sizes)
    for tree, spec in ((params, task.spec), (state, task.state_spec)):
        back = istjax.merge(tree, istjax.extract(tree, p, spec), p, spec, disjoint=disjoint)
        _close(back, tree, rtol=1e-6, atol=0)  # overlaps average equal copies: exact up to rounding


def test_per_group_sampler_serves_a_group_smaller_than_w():
    sizes = {"block_0_0": 2, "stage_0": 8}
    slots = MIXED.slots(sizes, 4)
    assert slots == {"block_0_0": 1, "stage_0": 2}
    p = MIXED.sample(jax.random.key(0), sizes, 4)
    blocks = np.asarray(p.indices["block_0_0"]).ravel()
    assert sorted(set(blocks.tolist())) == [0, 1] and len(blocks) == 4  # each block held by two workers
    channels = np.sort(np.asarray(p.indices["stage_0"]).ravel())
    np.testing.assert_array_equal(channels, np.arange(8))  # channels dealt without overlap
    flags = istjax.core.partition.disjoint_groups(MIXED, sizes)
    assert flags == {"block_0_0": False, "stage_0": True}
    with pytest.raises(ValueError, match=r"neuron group 'block_0_0' \(2 units\).*per_group"):
        istjax.uniform().slots(sizes, 4)
    with pytest.raises(ValueError, match=r"has no neuron group 'blocks'"):
        istjax.per_group({"blocks": istjax.overlapping(1)}, default=istjax.uniform()).slots(sizes, 4)


@pytest.mark.parametrize("sampler,w,policy", [(istjax.uniform(), 2, "carry"), (MIXED, 4, "carry"),
                                              (istjax.uniform(), 2, "recompute")])
@pytest.mark.slow
def test_cnn_ist_round_equals_reference_loop(sampler, w, policy):
    task = _cnn_task(inner=((2,), (8,)))
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=w, local_steps=K, sampler=sampler, model_state=policy)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        b = _image_batches(w, seed=r)
        fast, metrics = alg.round(state, b)
        slow = reference_round(alg, state, b)
        _close(fast.params, slow.params, what=f"params round {r}")
        _close(fast.model_state, slow.model_state, what=f"model state round {r}")
        assert np.isfinite(float(metrics["train_loss"]))
        state = fast
    # The running statistics moved: training updated them and the merge wrote them back.
    init = alg.init(jax.random.key(0)).model_state
    assert not np.allclose(np.asarray(jax.tree.leaves(state.model_state)[0]), np.asarray(jax.tree.leaves(init)[0]))


@pytest.mark.slow
def test_recompute_policy_sets_statistics_of_the_merged_model():
    task = _cnn_task()
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=K, model_state="recompute")
    state = alg.init(jax.random.key(0))
    b = _image_batches(2)
    new, _ = alg.round(state, b)
    want = task.recompute_state(new.params, new.model_state, jax.tree.map(lambda v: v[:, 0], b))
    _close(new.model_state, want)


@pytest.mark.parametrize("name", ["data_parallel", "local_sgd"])
def test_cnn_replicated_rounds_equal_reference_loop(name):
    alg = getattr(istjax, name)(_cnn_task(), optax.sgd(0.1), num_workers=2, local_steps=K)
    state = alg.init(jax.random.key(0))
    b = _image_batches(2)
    fast, _ = alg.round(state, b)
    slow = reference_round(alg, state, b)
    _close(fast.params, slow.params)
    _close(fast.model_state, slow.model_state)


@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd"])
@pytest.mark.slow
def test_cnn_simulate_equals_devices(name):
    task = _cnn_task()
    make = getattr(istjax, name)
    sim = make(task, optax.sgd(0.1), num_workers=4, local_steps=K)
    dev = make(task, optax.sgd(0.1), num_workers=4, local_steps=K, backend="devices")
    s1 = s2 = sim.init(jax.random.key(0))
    for r in range(2):
        b = _image_batches(4, seed=r)
        s1, _ = sim.round(s1, b)
        s2, _ = dev.round(s2, b)
    _close(s1.params, s2.params, rtol=1e-4, atol=1e-5)
    _close(s1.model_state, s2.model_state, rtol=1e-4, atol=1e-5)


def test_evaluation_uses_running_statistics_in_test_mode():
    task = _cnn_task()
    params, state = task.init(jax.random.key(0)), task.init_state(jax.random.key(0))
    b = jax.tree.map(lambda v: v[0, 0], _image_batches(1))
    shifted = jax.tree.map(lambda s: s + 3.0, state)
    l1, _ = task.evaluate(params, state, b)
    l2, _ = task.evaluate(params, shifted, b)
    assert float(l1) != float(l2)  # test mode reads the running statistics
    t1, _ = task.train_loss(None)(params, state, b)[0], None
    t2, _ = task.train_loss(None)(params, shifted, b)[0], None
    assert float(t1) == float(t2)  # training mode normalises with the batch's own


# --- A shared input: a tiny graph model reading one adjacency every worker shares. ----------------------------

N_NODES, H = 7, 6


class TinyGraph(nn.Module):
    """``logits = relu(x A W1) W2``: per-example node signals ``x: [B, N]``, a shared adjacency ``A: [N, N]``."""

    hidden: int = H

    def partition_rules(self):
        return {"nodes": None, "hidden": "hidden", "classes": None}

    def subnet(self, units):
        return self.clone(hidden=units.get("hidden", self.hidden))

    @nn.compact
    def __call__(self, x_BxN, shared, train: bool = True):
        adj_NxN = shared["adj"]
        assert adj_NxN.shape == (N_NODES, N_NODES), adj_NxN.shape  # unstacked, whatever the runtime
        h = nn.relu(nn.Dense(self.hidden, use_bias=False, kernel_init=nn.with_logical_partitioning(
            nn.initializers.lecun_normal(), ("nodes", "hidden")))(x_BxN @ adj_NxN))
        return nn.Dense(C, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                                    ("hidden", "classes")),
                        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))(h)


def _graph():
    rng = np.random.default_rng(5)
    adj = (rng.random((N_NODES, N_NODES)) < 0.4).astype(np.float32)
    return {"adj": jnp.asarray(adj + adj.T + np.eye(N_NODES, dtype=np.float32))}


def _graph_task(shared):
    return istjax.classifier(TinyGraph(), jnp.zeros((B, N_NODES)), example_shared=shared, num_classes=C)


def _node_batches(w, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.normal(size=(w, K, B, N_NODES)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(w, K, B)), jnp.int32)}


@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd"])
def test_shared_input_reaches_every_worker_unstacked(name):
    shared = _graph()
    task = _graph_task(shared)
    make = getattr(istjax, name)
    w = 3
    sim = make(task, optax.sgd(0.1), num_workers=w, local_steps=K)
    b = _node_batches(w)
    state = sim.init(jax.random.key(0))
    fast, _ = sim.round(state, b, shared)
    _close(fast.params, reference_round(sim, state, b, shared).params)
    # The adjacency enters the compiled round once: no [W, N, N] (or [W, K, N, N]) value exists anywhere in it.
    text = str(jax.make_jaxpr(sim.round.compiled)(state, b, shared))
    assert f"{w},{N_NODES},{N_NODES}]" not in text and f"{w},{K},{N_NODES},{N_NODES}]" not in text
    # The devices runtime (W = 3 on 3 of the 4 fake devices) agrees and replicates, never stacks, the graph.
    dev = make(task, optax.sgd(0.1), num_workers=w, local_steps=K, backend="devices")
    _close(dev.round(state, b, shared)[0].params, fast.params, rtol=1e-4, atol=1e-5)
    # Leaving the shared input out is an error from the model, not a silent broadcast.
    with pytest.raises(Exception):
        sim.round(state, b)


# --- Models by name, groups from the spec, and bad input. -------------------------------------------------------


def _cnn_config(**model):
    c = config_lib.default_config()
    c.model = ml_collections.ConfigDict(dict(name="cnn", widths=(4, 8), image_shape=(8, 8, 1), **model))
    c.num_workers, c.local_steps, c.batch_size, c.num_rounds, c.eval_every, c.progress = 2, 2, 8, 2, 2, False
    c.target_accuracy = None
    return c


@pytest.mark.slow
def test_cnn_trains_from_a_config_by_name(tmp_path):
    c = _cnn_config()
    summary = istjax.train_and_evaluate(c, tmp_path / "run")
    assert summary["rounds"] == 2 and np.isfinite(summary["test_loss"])
    # Resuming restores the model state too (the checkpoint holds params, model_state, opt_state, key, round).
    c.num_rounds = 3
    again = istjax.train_and_evaluate(c, tmp_path / "run", resume=True)
    assert again["rounds"] == 3


@pytest.mark.parametrize("edit,message", [
    (lambda c: setattr(c.model, "name", "resnet9000"),
     r"model.name='resnet9000' is not a known model.*choose one of \[.*'cnn'.*'mlp'.*register_model"),
    (lambda c: setattr(c.model, "widht", (4, 8)), r"model 'cnn' \(CNN\) has no field model.widht=\(4, 8\)"),
    (lambda c: c.sampler.groups.update({"blocks": "overlapping"}),
     r"sampler.groups.blocks='overlapping': the model has no neuron group 'blocks'.*; its groups are"),
    (lambda c: setattr(c, "num_workers", 8),
     r"with num_workers=8 and sampler.name='uniform': num_workers=8 is larger than neuron group 'stage_0' \(4 units\)"),
    (lambda c: setattr(c.model, "widths", (4, 0)), r"model.widths=\(4, 0\)"),
])
def test_bad_model_config_is_refused_naming_the_field(edit, message):
    c = _cnn_config()
    edit(c)
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(c)


def test_group_smaller_than_w_is_served_by_a_per_group_sampler_in_the_config():
    c = _cnn_config(inner=((2,), (8,)))
    c.num_workers = 4
    with pytest.raises(config_lib.ConfigError, match=r"neuron group 'block_0_0' \(2 units\).*sampler.groups"):
        config_lib.validate(c)
    c.sampler.groups.block_0_0 = "overlapping"
    c.sampler.min_units = 1
    config_lib.validate(c)  # accepted: the block group is dealt with overlap, the channels uniformly
    assert config_lib.make_sampler(c).name == "per_group(block_0_0=overlapping,*=uniform)"


def test_a_module_without_subnet_or_rules_is_refused_up_front():
    class Plain(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(C)(x)

    with pytest.raises(TypeError, match="no partition_rules"):
        istjax.classifier(Plain(), jnp.zeros((2, 4)), num_classes=C)
    task = istjax.classifier(Plain(), jnp.zeros((2, 4)), rules={}, num_classes=C)
    with pytest.raises(ValueError, match="no neuron group"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1)


def test_rules_that_would_add_mismatched_channels_are_refused():
    class Residual(nn.Module):
        width: int = 4

        def partition_rules(self):
            return {"input": None, "a": "a", "b": "b", "classes": None}

        def tied_axes(self):
            return [("a", "b")]  # h_a + h_b below

        def subnet(self, units):
            return self.clone(width=units["h"])

        @nn.compact
        def __call__(self, x, train: bool = True):
            init = nn.initializers.lecun_normal()
            ha = nn.Dense(self.width, use_bias=False, kernel_init=nn.with_logical_partitioning(init, ("input", "a")))(x)
            hb = nn.Dense(self.width, use_bias=False, kernel_init=nn.with_logical_partitioning(init, ("input", "b")))(x)
            return nn.Dense(C, kernel_init=nn.with_logical_partitioning(init, ("a", "classes")))(ha + hb)

    with pytest.raises(ValueError, match=r"adds the channels of logical axes \('a', 'b'\).*different neuron groups"):
        istjax.classifier(Residual(), jnp.zeros((2, 5)), num_classes=C)
    istjax.classifier(Residual(), jnp.zeros((2, 5)), rules={"input": None, "a": "h", "b": "h", "classes": None},
                      num_classes=C)


def _family_tasks():
    """One small task of each model family istjax ships (the leaves every extract path meets: kernels cut by rows
    or columns, heads, convolution channels cut on both sides, an embedding bag, graph features)."""
    from istjax.models import MLP, SparseMLP, Transformer
    return {"mlp": istjax.classifier(MLP(hidden=(6, 8), num_classes=C), jnp.zeros((B, 5)), num_classes=C),
            "cnn": _cnn_task(),
            "transformer": istjax.classifier(Transformer(num_classes=7, num_layers=2, embed_dim=8, num_heads=4,
                                                         mlp_dim=12, context=5), jnp.zeros((2, 5), jnp.int32),
                                             num_classes=7),
            "sparse_mlp": istjax.classifier(SparseMLP(hidden=(8,), num_classes=C, num_features=12),
                                            jnp.zeros((2, 4, 2)), num_classes=C),
            "gcn": _graph_task(_graph())}


@pytest.mark.parametrize("family", ["mlp", "cnn", "transformer", "sparse_mlp", "gcn"])
@pytest.mark.parametrize("sampler,w", [(istjax.uniform(pad=True), 3), (istjax.overlapping(2), 2),
                                       (istjax.nested([0.5, 1.0]), 2), (istjax.uniform(pad=True), 6)])
def test_every_familys_extract_and_merge_equal_the_element_wise_gathers_bit_for_bit(family, sampler, w):
    from istjax.core import subnet
    task = _family_tasks()[family]
    params = jax.jit(task.init)(jax.random.key(0))
    p = sampler.sample(jax.random.key(1), task.spec.group_sizes, w)
    got = istjax.extract(params, p, task.spec)
    want = jax.tree.map(lambda s, x: subnet._extract_elements(x, s, p, task.spec.group_sizes, w)
                        if not s.shared else x[None].repeat(w, 0), task.spec.leaves, params)
    sliced = [s for s in jax.tree.leaves(task.spec.leaves) if not s.shared and len(s.partitioned_axes) == 1]
    assert sliced  # every family has leaves cut on one axis
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    if sampler.disjoint:  # and merge of trained pieces back through slices, against the element-wise gather
        sizes = task.spec.group_sizes
        for s, x, y in zip(jax.tree.leaves(task.spec.leaves), jax.tree.leaves(params), jax.tree.leaves(got)):
            if not s.shared:
                np.testing.assert_array_equal(subnet._merge_disjoint(x, y * 2.0 + 1.0, s, p, sizes),
                                              subnet._merge_elements(x, y * 2.0 + 1.0, s, p, sizes))
