"""The owner-side arithmetic of the sharded mode (`istjax.core.shard`), on one process.

N owners are simulated in a loop, the all-to-alls, all-gather and allreduce done by stacking: what the owners
distribute and the workers assemble must be exactly `extract`'s sub-networks, and what they collect exactly `merge`'s
result, for plain, tiled (GraphSAGE's ``[self, neighbour]``), two-group, shared and held-whole leaves.
``owner_logits`` (evaluation from the owners' slices, partial sums reduced) is checked against the whole model, for
every model istjax ships. IST's round over the whole model (``distribute`` / ``collect``) and its owner side, both
derived from its pieces (`istjax.algorithms.exchange`), are checked equal on every family.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import istjax
from istjax.core import shard
from istjax.core.partition import owner_counts, per_group, stratified, uniform
from istjax.core.spec import spec_from_table
from istjax.core.subnet import extract, merge
from istjax.models import MLP


def _tree(h, t):
    rng = np.random.default_rng(0)

    def leaf(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    return {"in": leaf(5, h), "hh": leaf(h, h), "tiled": leaf(2 * h, 3), "bias": leaf(h), "small": leaf(t, 4),
            "out": leaf(3)}


def _spec(tree):
    return spec_from_table(tree, {"in": (None, "h"), "hh": ("h", "g"), "tiled": ("h*2", None), "bias": ("h",),
                                  "small": ("t", None)})


def _stack(trees, pick=lambda x: x):
    """Stack leaf ``pick(x)`` of every tree on a new axis 0 (None leaves stay None)."""
    return jax.tree.map(lambda *xs: jnp.stack([pick(x) for x in xs]), *trees)


@pytest.mark.parametrize("n,w", [(2, 2), (2, 4), (3, 3)])
def test_owners_distribute_and_collect_exactly_what_extract_and_merge_do(n, w):
    h, t = 2 * n * w, w  # groups h and g owned (stratified), t dealt uniformly: held whole
    tree = _tree(h, t)
    spec = _spec(tree)
    sizes = dict(spec.group_sizes)
    sampler = per_group({"t": uniform()}, default=stratified(n))
    owned = frozenset(g for g, o in owner_counts(sampler, sizes).items() if o == n)
    assert owned == {"h", "g"}
    p = sampler.sample(jax.random.key(3), sizes, w)
    layouts = [shard.Layout(n, o, w, sizes, owned) for o in range(n)]
    lanes = w // n
    assert [layouts[0].role(s) for s in jax.tree.leaves(spec.leaves)] == [
        shard.OWNED, shard.OWNED, shard.OWNED, shard.SHARED, shard.HELD_WHOLE, shard.OWNED]  # sorted: bias .. tiled
    parts = [jax.tree.map(lay.shard, spec.leaves, tree) for lay in layouts]
    for lay in layouts:  # the shards put back together are the whole tree
        whole = jax.tree.map(lambda s, *xs: shard.unshard(lay, s, jnp.stack(xs)), spec.leaves, *parts)
        jax.tree.map(np.testing.assert_array_equal, whole, tree)

    # Out: owner o sends piece [d] to owner d; owner d assembles its workers' sub-networks.
    # Each owner's steps jitted, as the runtime runs them (and one compilation instead of an op-by-op dispatch).
    outs = [jax.jit(partial(shard.owner_distribute, lay, spec.leaves))(part, p) for lay, part in zip(layouts, parts)]
    want = jax.jit(partial(extract, spec=spec))(tree, p)
    assembled = []
    for d, lay in enumerate(layouts):
        received = _stack([out for out, _ in outs], lambda x: x[d])
        workers = jax.jit(partial(shard.worker_assemble, lay, spec.leaves))(received, outs[d][1])
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b[d * lanes:(d + 1) * lanes]), workers, want)
        assembled.append(workers)

    # Back: every worker changed its sub-network; the owners collect what merge would.
    trained = [jax.tree.map(lambda x, k=d: x * 1.5 + k, a) for d, a in enumerate(assembled)]
    returns = [jax.jit(partial(shard.worker_return, lay, spec.leaves))(tr) for lay, tr in zip(layouts, trained)]
    gathered = _stack([whole for _, whole, _ in returns])
    sums = jax.tree.map(lambda *xs: sum(xs), *[s for _, _, s in returns])
    collected = []
    for o, lay in enumerate(layouts):
        returned = _stack([back for back, _, _ in returns], lambda x: x[o])
        collect = jax.jit(partial(shard.owner_collect, lay, spec.leaves, disjoint={g: True for g in sizes}))
        collected.append(collect(parts[o], p, returned, gathered, sums))
    merged = jax.jit(partial(merge, spec=spec))(tree, jax.tree.map(lambda *xs: jnp.concatenate(xs), *trained), p)
    whole = jax.tree.map(lambda s, *xs: shard.unshard(layouts[0], s, jnp.stack(xs)), spec.leaves, *collected)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), whole, merged)


@pytest.mark.parametrize("hidden,use_bias", [((8, 8), False), ((4, 8, 12), True), ((), True)])
def test_mlp_owner_logits_equal_the_whole_model(hidden, use_bias):
    """Owners hold slices of every hidden layer; the logits from their slices, with the partial sums of each layer
    summed across owners (`jax.lax.psum` under `vmap`, as the MPI runtime's allreduce), equal ``apply``."""
    n = 2
    model = MLP(hidden=hidden, num_classes=3, use_bias=use_bias)
    task = istjax.classifier(model, jnp.zeros((4, 6)), num_classes=3)
    params = task.init(jax.random.key(1))
    sizes = dict(task.spec.group_sizes)
    lay = shard.Layout(n, 0, n, sizes, frozenset(sizes))
    parts = _stack([jax.tree.map(lambda s, x, o=o: lay.shard(s, x, o), task.spec.leaves, params) for o in range(n)])
    x = jnp.asarray(np.random.default_rng(2).normal(size=(300, 6)), jnp.float32)

    def mine(part, owner):
        return model.owner_logits({"params": part}, x, owner=owner, num_owners=n,
                                  reduce=lambda v: jax.lax.psum(v, "owners"))

    logits = jax.vmap(mine, axis_name="owners")(parts, jnp.arange(n))
    full = model.apply({"params": params}, x, train=False)
    for o in range(n):
        np.testing.assert_allclose(logits[o], full, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind,hidden,layer_norm", [("gcn", (8,), True), ("gcn", (4, 8), False),
                                                    ("graphsage", (8, 4), True), ("graphsage", (4,), False)])
def test_graph_owner_logits_equal_the_whole_model(kind, hidden, layer_norm):
    """GCN and GraphSAGE (tiled ``[self, neighbour]`` rows): the logits of a batch of nodes from the owners' slices
    of every hidden layer, partial sums and LayerNorm statistics summed across owners, equal ``apply``."""
    from istjax.graph.graph import from_edges
    from istjax.models import GCN, GraphSAGE

    n, nodes = 2, 30
    rng = np.random.default_rng(3)
    graph = from_edges(rng.normal(size=(nodes, 5)).astype(np.float32), rng.integers(0, nodes, size=(70, 2)))
    model = (GCN if kind == "gcn" else GraphSAGE)(hidden=hidden, num_classes=3, layer_norm=layer_norm)
    task = istjax.classifier(model, jnp.zeros((4,)), example_shared={"graph": graph}, num_classes=3)
    params = task.init(jax.random.key(1))
    sizes = dict(task.spec.group_sizes)
    lay = shard.Layout(n, 0, n, sizes, frozenset(sizes))
    parts = _stack([jax.tree.map(lambda s, x, o=o: lay.shard(s, x, o), task.spec.leaves, params) for o in range(n)])
    x = jnp.asarray(rng.integers(0, nodes, size=(12,)), jnp.float32)

    def mine(part, owner):
        return model.owner_logits({"params": part}, x, {"graph": graph}, owner=owner, num_owners=n,
                                  reduce=lambda v: jax.lax.psum(v, "owners"))

    logits = jax.vmap(mine, axis_name="owners")(parts, jnp.arange(n))
    full = model.apply({"params": params}, x, {"graph": graph}, train=False)
    for o in range(n):
        np.testing.assert_allclose(logits[o], full, rtol=2e-5, atol=2e-5)


def _owners_logits(task, model, x, n, owned=None):
    """Logits of ``model`` from ``n`` owners' slices of random parameters and perturbed statistics (owners under
    `vmap`, ``reduce = psum``), and the whole model's."""
    params = task.init(jax.random.key(1))
    state = jax.tree.map(lambda v: v + jax.random.uniform(jax.random.key(5), v.shape),
                         task.init_state(jax.random.key(2)))  # running statistics that are not 0 and 1
    sizes = {**task.spec.group_sizes, **task.state_spec.group_sizes}
    lay = shard.Layout(n, 0, n, sizes, frozenset(sizes) if owned is None else owned)

    def shards(spec, tree):
        return _stack([jax.tree.map(lambda s, v, o=o: lay.shard(s, v, o), spec.leaves, tree) for o in range(n)])

    def mine(p, s, owner):
        return model.owner_logits({"params": p, **s}, x, owner=owner, num_owners=n,
                                  reduce=lambda v: jax.lax.psum(v, "owners"))

    logits = jax.vmap(mine, axis_name="owners")(shards(task.spec, params), shards(task.state_spec, state),
                                                jnp.arange(n))
    return logits, model.apply({"params": params, **state}, x, train=False)


def _image_models():
    from istjax.models import CNN, VGG, DepthResNet, PreActResNet, ResNet

    return {
        "cnn": CNN(widths=(4, 8), blocks=(1, 1), num_classes=3),
        "resnet, every channel": ResNet(stage_sizes=(1, 1), widths=(4, 8), num_classes=3),
        "resnet, inner channels": ResNet(stage_sizes=(1, 1), widths=(4, 8), num_classes=3, channel_partition="inner"),
        "preact resnet": PreActResNet(stage_sizes=(1, 2), widths=(4, 8), num_classes=3),
        "vgg, batch statistics": VGG(features=((4,), (8, 4)), hidden=(6,), num_classes=3, batch_norm="batch"),
        "resist, pre-activation": DepthResNet(stage_sizes=(3, 5), widths=(4, 8), num_classes=3,
                                              test_branch_scale=0.5),
        "resist, post-activation, dealt first blocks": DepthResNet(stage_sizes=(3, 3), widths=(4, 8), num_classes=3,
                                                                   preactivation=False, partition_strided=True),
    }


@pytest.mark.parametrize("name", list(_image_models()))
def test_image_owner_logits_equal_the_whole_model(name):
    """Channel-partitioned CNN, ResNets and VGG (each conv's partial sums over input channels summed across owners,
    BatchNorm per channel on the owner's channels) and ResIST's depth-split ResNet (each owner's blocks in turn; the
    dealt first blocks held whole by every owner): the owners' logits equal ``apply``, running statistics included."""
    n = 2
    model = _image_models()[name]
    x = jnp.asarray(np.random.default_rng(2).normal(size=(5, 8, 8, 1)), jnp.float32)
    task = istjax.classifier(model, x[:2], num_classes=3)
    sizes = dict(task.spec.group_sizes)
    owned = frozenset(sizes) - task.owner.whole
    assert task.owner.evaluate is not None and task.owner.whole == frozenset(
        g for g in sizes if g.startswith("first_"))
    logits, full = _owners_logits(task, model, x, n, owned)
    for o in range(n):
        np.testing.assert_allclose(logits[o], full, rtol=2e-5, atol=2e-5)


# --- IST's round over the whole model and its owner side, derived from the same pieces ----------------------------

N_OWNERS, W_OWNERS = 2, 4
U = N_OWNERS * W_OWNERS  # an owned group's width: a multiple of N * W (equal shares of every owner's units)


def _family(name):
    """IST (ResIST) of every family, its groups dealt stratified by ``N_OWNERS`` owners, as the sharded mode runs it."""
    import optax

    from istjax.graph import from_edges
    from istjax.graph import task as graph_task
    from istjax.models import CNN, GCN, VGG, DepthResNet, GraphSAGE, ResNet

    rng = np.random.default_rng(11)
    graph = {"graph": from_edges(rng.normal(size=(30, 5)).astype(np.float32), rng.integers(0, 30, size=(60, 2)))}
    images = jnp.zeros((2, 6, 6, 2))
    tasks = {
        "mlp, carried adam": lambda: istjax.classifier(MLP(hidden=(2 * U, 2 * U), num_classes=3), jnp.zeros((2, 6)),
                                                       num_classes=3),
        "cnn, running statistics": lambda: istjax.classifier(CNN(widths=(U, 2 * U), blocks=(1, 1), num_classes=3),
                                                             images, num_classes=3),
        "resnet": lambda: istjax.classifier(ResNet(stage_sizes=(1, 1), widths=(U, 2 * U), num_classes=3), images,
                                            num_classes=3),
        "vgg": lambda: istjax.classifier(VGG(features=((U,), (U,)), hidden=(U,), num_classes=3), images,
                                         num_classes=3),
        "resist, first blocks held whole": lambda: istjax.classifier(
            DepthResNet(stage_sizes=(U + 1, U + 1), widths=(4, 8), num_classes=3, partition_strided=True), images,
            num_classes=3),
        "gcn": lambda: graph_task.node_classifier(GCN(hidden=(2 * U,), num_classes=3), graph, num_classes=3),
        "graphsage, tiled groups": lambda: graph_task.node_classifier(
            GraphSAGE(hidden=(U, U), num_classes=3, layer_norm=True), graph, num_classes=3),
    }
    task = tasks[name]()
    common = dict(num_workers=W_OWNERS, local_steps=1)
    if name.startswith("resist"):
        return istjax.resist(task, optax.sgd(0.1), num_owners=N_OWNERS, **common)
    carry = "carried adam" in name
    return istjax.ist(task, optax.adam(1e-2) if carry else optax.sgd(0.1), sampler=stratified(N_OWNERS),
                      optimizer_state="carry" if carry else "reset", **common)


def _trained(tree):
    """What local training might give back: every float leaf changed, elementwise (alike on `[W]` and `[L]` stacks)."""
    return jax.tree.map(lambda x: x * 1.5 + 0.25 if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def _owner_round(alg, state, layouts):
    """The round as ``len(layouts)`` owners run it from their parts of ``state`` (collectives done by stacking):
    every owner's workers' starting states and every owner's part of the next state."""
    pieces, side = alg.subnet, alg.owner_side
    leaves = pieces.spec.leaves
    parts = [jax.tree.map(lay.shard, leaves, pieces.held(state)) for lay in layouts]
    states = [state._replace(**{"opt_state": (), **part}) for part in parts]
    plans = [jax.jit(pieces.plan)(s) for s in states]  # every owner computes the same plan
    outs = [jax.jit(partial(side.distribute, lay))(part, p) for lay, part, p in zip(layouts, parts, plans)]
    started, returns = [], []
    for d, lay in enumerate(layouts):
        received = _stack([out for out, _ in outs], lambda x: x[d])
        workers = jax.jit(lambda r, m, lay=lay: pieces.start(shard.worker_assemble(lay, leaves, r, m), state.round))(
            received, outs[d][1])
        started.append(workers)
        returns.append(jax.jit(partial(shard.worker_return, lay, leaves))(_trained(pieces.held(workers))))
    gathered = _stack([whole for _, whole, _ in returns])
    sums = jax.tree.map(lambda *xs: sum(xs), *[s for _, _, s in returns])
    collected = []
    for o, lay in enumerate(layouts):
        returned = _stack([back for back, _, _ in returns], lambda x: x[o])
        collected.append(jax.jit(partial(side.collect, lay))(states[o], plans[o], returned, gathered, sums))
    return started, collected


@pytest.mark.parametrize("name", ["mlp, carried adam", "cnn, running statistics", "resnet", "vgg",
                                  "resist, first blocks held whole", "gcn", "graphsage, tiled groups"])
def test_ist_round_and_its_owner_side_agree_on_every_family(name):
    """IST's ``distribute`` / ``collect`` (the whole model) and its owner side (N owners' parts), both derived from
    its pieces (`istjax.algorithms.exchange`): every owner's workers start as the whole round's do (a reset
    optimizer state built, a carried one dealt), and the owners' parts of the next state, joined, are the whole
    round's next state."""
    from istjax.runtimes.mpi import sharded_layout

    alg = _family(name)
    state = alg.init(jax.random.key(5))
    workers, plan = jax.jit(alg.distribute)(state)
    trained = workers._replace(**_trained(alg.subnet.held(workers)))
    want = jax.jit(alg.collect)(state, trained, plan)
    layouts = [sharded_layout(alg, N_OWNERS, o) for o in range(N_OWNERS)]
    started, collected = _owner_round(alg, state, layouts)
    lanes = W_OWNERS // N_OWNERS
    for d, mine in enumerate(started):
        jax.tree.map(lambda a, b, d=d: np.testing.assert_array_equal(a, b[d * lanes:(d + 1) * lanes]), mine, workers)
    leaves = alg.subnet.spec.leaves
    got = jax.tree.map(lambda s, *xs: shard.unshard(layouts[0], s, jnp.stack(xs)), leaves,
                       *[alg.subnet.held(c) for c in collected])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), got, alg.subnet.held(want))
    for c in collected:
        np.testing.assert_array_equal(jax.random.key_data(c.key), jax.random.key_data(want.key))
        assert int(c.round) == int(want.round) == 1
