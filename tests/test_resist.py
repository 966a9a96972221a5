"""ResIST (arXiv 2107.00961): IST over the depth of a pre-activation ResNet, shared layers averaged, test-time
branch scaling. Checked against the plain reference loop, by hand, and across runtimes."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.reference import reference_round
from istjax.models import DepthResNet

K, B, C = 2, 8, 3
X = jnp.zeros((B, 8, 8, 3))


def _model(**fields):
    return DepthResNet(**{"stage_sizes": (3, 4), "widths": (4, 8), "num_classes": C, **fields})


def _task(model):
    return istjax.classifier(model, X, num_classes=C)


def _batches(w, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.normal(size=(w, K, B, 8, 8, 3)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(w, K, B)), jnp.int32)}


def _close(a, b, what=""):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6, err_msg=what)


def test_blocks_are_the_only_neuron_groups():
    alg = istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=2, local_steps=K)
    assert alg.name == "resist" and alg.exchange == "subnetworks"
    assert alg.task.spec.group_sizes == {"blocks_0": 2, "blocks_1": 3}
    shared = [leaf for leaf in jax.tree.leaves(alg.task.spec.leaves) if leaf.shared]
    assert shared  # stem, first blocks, final BatchNorm and head: held by every worker, averaged
    # Each worker moves its blocks and every shared layer: less than local SGD's whole model.
    ls = istjax.local_sgd(alg.task, optax.sgd(0.1), num_workers=2, local_steps=K)
    assert alg.comm.received < ls.comm.received


@pytest.mark.parametrize("w,min_depth", [(2, 0), (3, 2), (4, 1)])
@pytest.mark.slow
def test_resist_round_equals_reference_loop(w, min_depth):
    """Disjoint (3 blocks on 2 workers: padded), a minimum depth (overlapping blocks averaged by count), and more
    workers than a stage's blocks with overlap; parameters and BatchNorm statistics."""
    alg = istjax.resist(_task(_model()), optax.sgd(0.1, momentum=0.9), num_workers=w, local_steps=K,
                        min_depth=min_depth)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        b = _batches(w, seed=r)
        fast, _ = alg.round(state, b)
        slow = reference_round(alg, state, b)
        _close(fast.params, slow.params, f"params round {r}")
        _close(fast.model_state, slow.model_state, f"model state round {r}")
        state = fast


@pytest.mark.slow
def test_sub_resnet_equals_full_network_without_the_other_blocks():
    """Worker w's shallow sub-ResNet computes what the full network computes when the blocks w does not hold are
    removed (their residual branch zeroed: the last conv of each such block set to 0)."""
    model = _model()
    task = _task(model)
    params, stats = task.init(jax.random.key(1)), task.init_state(jax.random.key(1))
    sampler = istjax.per_group({"blocks_0": istjax.uniform(pad=True), "blocks_1": istjax.uniform(pad=True)})
    p = sampler.sample(jax.random.key(2), task.spec.group_sizes, 2)
    slots = sampler.slots(task.spec.group_sizes, 2)
    sub = istjax.extract(params, p, task.spec)
    sub_stats = istjax.extract(stats, p, task.state_spec)
    x = _batches(1)["x"][0, 0]
    for w in range(2):
        sub_model = model.subnet(slots)
        got = sub_model.apply({"params": jax.tree.map(lambda a: a[w], sub),
                               "batch_stats": jax.tree.map(lambda a: a[w], sub_stats)["batch_stats"]}, x, train=True,
                              mutable=["batch_stats"])[0]
        removed = jax.tree.map(lambda a: a, params)
        for i, n in ((0, 2), (1, 3)):
            held = set(np.asarray(p.indices[f"blocks_{i}"][w]).tolist()) - {n}
            kernel = removed[f"stage{i}_blocks"]["conv2"]["kernel"]
            mask = jnp.asarray([1.0 if b in held else 0.0 for b in range(n)]).reshape((n, 1, 1, 1, 1))
            removed[f"stage{i}_blocks"]["conv2"]["kernel"] = kernel * mask
        want = model.apply({"params": removed, **stats}, x, train=True, mutable=["batch_stats"])[0]
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_test_time_branch_scaling():
    """At test time every partitioned block's residual branch is scaled by 1/S (S = num_workers); training never
    scales; with the switch off the test-time network is the trained one."""
    model = _model()
    task = _task(model)
    params, stats = task.init(jax.random.key(3)), task.init_state(jax.random.key(3))
    x = _batches(1)["x"][0, 0]
    alg = istjax.resist(_task(model), optax.sgd(0.1), num_workers=4, local_steps=K, min_depth=1)
    off = istjax.resist(_task(model), optax.sgd(0.1), num_workers=4, local_steps=K, min_depth=1,
                        test_scale=False)
    batch = {"x": x, "y": jnp.zeros((B,), jnp.int32)}
    scaled = model.clone(test_branch_scale=0.25).apply({"params": params, **stats}, x, train=False)
    plain = model.apply({"params": params, **stats}, x, train=False)
    # Stage 0 has 2 partitioned blocks and stage 1 has 3; with a minimum depth of 1 on 4 workers each worker trains
    # 1 of them: the test-time scales are 1/2 and 1/3 (the fraction of a stage a worker trains).
    _close(alg.task.evaluate(params, stats, batch)[0],
           _task(model.clone(test_branch_scale=(0.5, 1 / 3))).evaluate(params, stats, batch)[0])
    # Blocks that divide evenly among the workers: the paper's 1/S.
    deeper = _model(stage_sizes=(3, 5))
    even = istjax.resist(_task(deeper), optax.sgd(0.1), num_workers=2, local_steps=K)
    p2, s2 = even.task.init(jax.random.key(4)), even.task.init_state(jax.random.key(4))
    _close(even.task.evaluate(p2, s2, batch)[0],
           _task(deeper.clone(test_branch_scale=0.5)).evaluate(p2, s2, batch)[0])
    _close(off.task.evaluate(params, stats, batch)[0], _task(model).evaluate(params, stats, batch)[0])
    assert not np.allclose(np.asarray(scaled), np.asarray(plain))
    # Scale 0 removes every partitioned block at test time: the shallow network of the shared layers only.
    zero = model.clone(test_branch_scale=0.0).apply({"params": params, **stats}, x, train=False)
    removed = jax.tree.map(lambda a: a, params)
    for i in (0, 1):
        removed[f"stage{i}_blocks"]["conv2"]["kernel"] = jnp.zeros_like(removed[f"stage{i}_blocks"]["conv2"]["kernel"])
    _close(zero, model.apply({"params": removed, **stats}, x, train=False))
    # Training mode ignores the test-time scale.
    _close(model.clone(test_branch_scale=0.25).apply({"params": params, **stats}, x, train=True,
                                                     mutable=["batch_stats"])[0],
           model.apply({"params": params, **stats}, x, train=True, mutable=["batch_stats"])[0])


@pytest.mark.slow
def test_naive_ablation_deals_first_blocks_and_matches_the_reference():
    """ResIST's ablation models: post-activation blocks, and first (strided) blocks dealt as one-unit groups.
    The round equals the plain loop, and the worker dealt a first block's padding slot computes the network whose
    first-block branch is removed (its shortcut alone)."""
    model = _model(preactivation=False, partition_strided=True)
    alg = istjax.resist(_task(model), optax.sgd(0.1, momentum=0.9), num_workers=2, local_steps=K)
    assert alg.task.spec.group_sizes == {"blocks_0": 2, "blocks_1": 3, "first_0": 1, "first_1": 1}
    state = alg.init(jax.random.key(5))
    b = _batches(2, seed=3)
    fast, _ = alg.round(state, b)
    slow = reference_round(alg, state, b)
    _close(fast.params, slow.params, "params")
    _close(fast.model_state, slow.model_state, "model state")

    task = alg.task
    params, stats = task.init(jax.random.key(6)), task.init_state(jax.random.key(6))
    p = alg.sampler.sample(jax.random.key(7), task.spec.group_sizes, 2)
    slots = alg.sampler.slots(task.spec.group_sizes, 2)
    sub = istjax.extract(params, p, task.spec)
    sub_stats = istjax.extract(stats, p, task.state_spec)
    x = _batches(1)["x"][0, 0]
    for w in range(2):
        got = model.subnet(slots).apply({"params": jax.tree.map(lambda a: a[w], sub),
                                         "batch_stats": jax.tree.map(lambda a: a[w], sub_stats)["batch_stats"]},
                                        x, train=True, mutable=["batch_stats"])[0]
        removed = jax.tree.map(lambda a: a, params)
        for i, n in ((0, 2), (1, 3)):
            held = set(np.asarray(p.indices[f"blocks_{i}"][w]).tolist()) - {n}
            mask = jnp.asarray([1.0 if j in held else 0.0 for j in range(n)]).reshape((n, 1))
            bn = removed[f"stage{i}_blocks"]["bn2"]  # post-activation: the branch ends in BatchNorm
            bn["scale"], bn["bias"] = bn["scale"] * mask, bn["bias"] * mask
            first = removed[f"stage{i}_block0_branch"]["bn2"]
            keep = float(int(p.indices[f"first_{i}"][w, 0]) == 0)
            first["scale"], first["bias"] = first["scale"] * keep, first["bias"] * keep
        want = model.apply({"params": removed, **stats}, x, train=True, mutable=["batch_stats"])[0]
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)
    holders = [int(p.indices["first_1"][w, 0]) == 0 for w in range(2)]
    assert sum(holders) == 1  # one worker holds the strided block's branch, the other its padding


@pytest.mark.slow
def test_resist_simulate_equals_devices():
    sim = istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=4, local_steps=K, min_depth=1)
    dev = istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=4, local_steps=K, min_depth=1,
                        backend="devices")
    s1 = s2 = sim.init(jax.random.key(0))
    for r in range(2):
        b = _batches(4, seed=r)
        s1, _ = sim.round(s1, b)
        s2, _ = dev.round(s2, b)
    _close(s1.params, s2.params)
    _close(s1.model_state, s2.model_state)


def test_bad_resist_input_is_refused_before_compiling():
    with pytest.raises(ValueError, match=r"num_workers=4 is more than the 2 partitioned block\(s\) of 'blocks_0'"):
        istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=4, local_steps=1)
    with pytest.raises(ValueError, match=r"min_depth=3: stage group 'blocks_0' has only 2"):
        istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=2, local_steps=1, min_depth=3)
    with pytest.raises(ValueError, match=r"stage 5 does not exist; the stages are 0 .. 1"):
        _model(partitioned_stages=(5,))
    with pytest.raises(ValueError, match=r"stage 0 has 1 block\(s\)"):
        _model(stage_sizes=(1, 4), partitioned_stages=(0,))
    with pytest.raises(ValueError, match=r"model_state='recompute', test_scale=True\): recomputed statistics"):
        istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=2, local_steps=1,
                      model_state="recompute")
    istjax.resist(_task(_model()), optax.sgd(0.1), num_workers=2, local_steps=1, model_state="recompute",
                  test_scale=False)  # consistent: the unscaled network is evaluated
    with pytest.raises(TypeError, match=r"takes a task, as every algorithm factory does.*istjax.classifier"):
        istjax.resist(_model(), optax.sgd(0.1), num_workers=2, local_steps=1)  # the module, not a task
    mlp = istjax.classifier(istjax.models.MLP(hidden=(8,), num_classes=3), jnp.zeros((2, 4)), num_classes=3)
    with pytest.raises(ValueError, match=r"needs a depth-split ResNet"):
        istjax.resist(mlp, optax.sgd(0.1), num_workers=2, local_steps=1)
    # Partitioning one section only (the ablation): the other stage's blocks are shared.
    one = istjax.resist(_task(_model(partitioned_stages=(1,))), optax.sgd(0.1), num_workers=2,
                        local_steps=1)
    assert one.task.spec.group_sizes == {"blocks_1": 3}


@pytest.mark.slow
def test_resist_from_a_config(tmp_path):
    import ml_collections

    import istjax.launch.config as config_lib

    c = config_lib.default_config()
    c.algorithm.name, c.algorithm.min_depth = "resist", 1
    c.model = ml_collections.ConfigDict({"name": "depth_resnet", "stage_sizes": (3, 3), "widths": (4, 8),
                                         "image_shape": (8, 8, 1)})
    c.num_workers, c.local_steps, c.batch_size, c.num_rounds, c.eval_every, c.progress = 4, 2, 16, 2, 2, False
    c.eval_train_examples, c.target_accuracy = 400, None
    summary = istjax.train_and_evaluate(c, tmp_path / "run")
    assert summary["algorithm"] == "resist" and summary["rounds"] == 2
    # The driver evaluates ResIST's test-time network (branches scaled), and `istjax eval` agrees; the same
    # checkpoint evaluated without the scale is another network.
    from istjax.launch.driver import evaluate_run

    scaled = evaluate_run(tmp_path / "run")
    assert scaled["test_loss"] == pytest.approx(summary["test_loss"], rel=1e-5)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    saved["algorithm"]["test_scale"] = False
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    assert evaluate_run(tmp_path / "run")["test_loss"] != pytest.approx(scaled["test_loss"], rel=1e-4)
    c.algorithm.min_depth = 0
    with pytest.raises(config_lib.ConfigError, match=r"algorithm.min_depth=0: num_workers=4 is more than the 2"):
        config_lib.validate(c)
    c.model = ml_collections.ConfigDict({"name": "mlp", "hidden": (8,)})
    with pytest.raises(config_lib.ConfigError, match="needs model.name='depth_resnet'"):
        config_lib.validate(c)


def test_ablation_configs_are_the_papers_cumulative_steps():
    """fmnist_resist_ablation.py:<step> changes one thing per step, in the paper's order, and every step validates
    (model, sampler and W) before anything trains."""
    import pathlib

    from istjax.launch import cli
    from istjax.launch import config as config_lib

    path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "configs" / "fmnist_resist_ablation.py"
    steps = ("naive", "share_strided", "one_section", "test_scale", "preactivation")
    seen = []
    for step in steps:
        c, _, _, _ = cli.parse_train_args(["istjax", f"--config={path}:{step}"])
        config_lib.validate(c, load_data=False)
        seen.append((c.model.partition_strided, tuple(c.model.partitioned_stages), c.algorithm.test_scale,
                     c.model.preactivation))
    assert seen == [(True, (0, 1, 2), False, False), (False, (0, 1, 2), False, False), (False, (2,), False, False),
                    (False, (2,), True, False), (False, (2,), True, True)]
    with pytest.raises(config_lib.ConfigError, match="unknown step"):
        cli.parse_train_args(["istjax", f"--config={path}:bogus"])
