"""Run under ``mpiexec -n N`` (N = 2 or 3): the sharded mode runs every family through the algorithm's own pieces.

Families: MLP IST with carried Adam, channel IST on a CNN with running statistics carried and on a ResNet with
them recomputed (from each rank's channels), ResIST (blocks held in shards, the strided first blocks held whole),
GCN on Cluster-GCN batches and GraphSAGE (tiled ``[self, neighbour]`` axes held in shards). For each, after 2 rounds
on ``mpiexec -n N`` with W = 2N or N workers:

* the whole state gathered from the shards equals the plain reference round (`istjax.algorithms.reference`,
  Python loops) run on one process from the same key, parameters and model state; with carried Adam, which the
  plain loop does not carry, it equals the simulate runtime, optimizer state included;
* the measured bytes per worker equal the analytic ones (`Algorithm.comm`) where every partitioned leaf is held in
  shards; for ResIST, the leaves held whole add exactly the all-gather of every worker's piece;
* no rank holds more than 1/N of the largest owned leaf of the model;
* the model is evaluated in place (no gather) with the gathered model's loss and accuracy, on every rank.

Arguments, if any, name the families to run (a case's first word: ``mlp resist``); none runs them all.
Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_mpi.py.
"""

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.algorithms.reference import reference_round
from istjax.core import shard as shard_lib
from istjax.data.cluster_batches import cluster_batch_fn
from istjax.graph import from_edges
from istjax.graph import task as graph_task
from istjax.models import CNN, GCN, MLP, DepthResNet, GraphSAGE, ResNet
from istjax.runtimes import mpi as M

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W = 2 * N if N == 2 else N  # 2 ranks: 2 workers each; 3 ranks: one each (the runtime's unmapped path)
U = N * W  # every owned group's width is a multiple of N * W (equal shares of every owner's units)
K, B, C = 2, 8, 3
ROUNDS = 2


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def dense(r, d=6):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, d)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


def images(r):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, 6, 6, 2)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


def node_ids(r):
    rng = np.random.default_rng(100 + r)
    return {"x": jnp.asarray(rng.integers(0, 30, size=(W, K, B)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


rng = np.random.default_rng(11)
graph = from_edges(rng.normal(size=(30, 5)).astype(np.float32), rng.integers(0, 30, size=(60, 2)))
full_graph = {"graph": graph}
clustered = graph_task.with_clusters(full_graph, rng.integers(0, C, size=30), np.arange(0, 30, 2), 4, method="metis")
clusters = cluster_batch_fn(clustered, num_workers=W, local_steps=K, clusters_per_step=2, seed=3)
stratified = istjax.stratified(num_owners=N)

mlp = istjax.classifier(MLP(hidden=(2 * U, 2 * U), num_classes=C), jnp.zeros((B, 6)), MLP.rules(2),
                        num_classes=C)
cnn = istjax.classifier(CNN(widths=(U, 2 * U), blocks=(1, 1), num_classes=C), jnp.zeros((B, 6, 6, 2)),
                        num_classes=C)
resnet = istjax.classifier(ResNet(stage_sizes=(1, 1), widths=(U, 2 * U), num_classes=C),
                           jnp.zeros((B, 6, 6, 2)), num_classes=C)
depth = istjax.classifier(DepthResNet(stage_sizes=(U + 1, U + 1), widths=(4, 8), num_classes=C,
                                      partition_strided=True), jnp.zeros((B, 6, 6, 2)), num_classes=C)
sage = graph_task.node_classifier(GraphSAGE(hidden=(U, U), num_classes=C, layer_norm=True), full_graph,
                                  num_classes=C)
gcn = graph_task.cluster_classifier(GCN(hidden=(2 * U,), num_classes=C), clustered)

# Plain SGD outside the Adam case: Adam divides by the root of a squared-gradient average, so a last-bit difference
# in a near-zero gradient (a rank runs its workers mapped or unmapped, the reference in Python loops) grows past any
# tolerance that still tells a bug.
cases = {
    "mlp ist, carried adam": (lambda b, **o: istjax.ist(mlp, optax.adam(1e-2), num_workers=W, local_steps=K,
                                                         sampler=stratified, optimizer_state="carry", backend=b, **o),
                              dense, None, True),
    "cnn channel ist, running statistics": (lambda b, **o: istjax.ist(cnn, optax.sgd(0.1), num_workers=W,
                                                                      local_steps=K, sampler=stratified, backend=b,
                                                                      **o), images, None, True),
    "resnet channel ist, recomputed statistics": (lambda b, **o: istjax.ist(resnet, optax.sgd(0.1), num_workers=W,
                                                                            local_steps=K, sampler=stratified,
                                                                            model_state="recompute", backend=b, **o),
                                                  images, None, True),
    "resist": (lambda b, **o: istjax.resist(depth, optax.sgd(0.1), num_workers=W, local_steps=K, num_owners=N,
                                            backend=b, **o), images, None, False),
    "gcn cluster batches": (lambda b, **o: istjax.ist(gcn, optax.sgd(0.1), num_workers=W, local_steps=K,
                                                      sampler=stratified, backend=b, **o), clusters, clustered, True),
    "graphsage (tiled groups)": (lambda b, **o: istjax.ist(sage, optax.sgd(0.1), num_workers=W, local_steps=K,
                                                           sampler=stratified, backend=b, **o),
                                 node_ids, full_graph, True),
}


def close(a, b, what, atol=2e-6):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), (what, len(la), len(lb))
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=atol, err_msg=what)


def extra_gather_bytes(alg, layout):
    """Per worker per round, what the all-gather of leaves held whole adds to the analytic bytes: a worker sends its
    piece (counted by the analytic bytes) and its rank receives all W pieces, L workers' worth of which it sent."""
    pieces = alg.subnet
    abstract = jax.eval_shape(lambda k: pieces.held(alg.init(k)), jax.random.key(0))
    slots = pieces.sampler.slots(layout.group_sizes, W)
    extra = 0
    for leaf, x in zip(jax.tree.leaves(pieces.spec.leaves), jax.tree.leaves(abstract)):
        if layout.role(leaf) == shard_lib.HELD_WHOLE:
            piece = math.prod(d if a is None else slots[a.group] * a.tiles for d, a in zip(x.shape, leaf.axes))
            extra += piece * x.dtype.itemsize * (W // layout.lanes - 1)
    return extra


chosen = sys.argv[1:]
assert all(any(n.split()[0] == c for n in cases) for c in chosen), (chosen, list(cases))
for name, (make, data, shared, all_owned) in cases.items():
    if chosen and name.split()[0] not in chosen:
        continue
    alg = make("mpi", mode="sharded")
    state = alg.init(jax.random.key(5))
    for r in range(ROUNDS):
        state, metrics = alg.round(state, data(r), shared)
    plain = make("simulate")
    layout = M.sharded_layout(plain, N, ME)
    extra = 0 if all_owned else extra_gather_bytes(plain, layout)
    got = (metrics["measured_bytes_received"], metrics["measured_bytes_sent"])
    assert got == (alg.comm.received + extra, alg.comm.sent), (name, got, tuple(alg.comm), extra)
    # Memory: what this rank holds of every owned leaf is 1/N of it.
    full_shapes = jax.eval_shape(lambda k: plain.subnet.held(plain.init(k)), jax.random.key(0))
    mine = alg.subnet.held(state)
    for leaf, whole, part in zip(jax.tree.leaves(plain.subnet.spec.leaves), jax.tree.leaves(full_shapes),
                                 jax.tree.leaves(mine)):
        if layout.role(leaf) == shard_lib.OWNED:
            assert part.size * N == math.prod(whole.shape), (name, leaf, part.shape, whole.shape)
    whole = alg.runtime.gather(state)
    if ME == 0:
        ref = plain.init(jax.random.key(5))
        for r in range(ROUNDS):  # the plain loop resets the optimizer state; a carried one is checked on simulate
            ref = plain.round(ref, data(r), shared)[0] if plain.carries_optimizer_state else \
                reference_round(plain, ref, data(r), shared)
        close(whole.params, ref.params, f"{name}: params")
        close(whole.model_state, ref.model_state, f"{name}: model state")
        close(whole.opt_state, ref.opt_state, f"{name}: optimizer state")
    else:
        assert whole is None
    # Evaluation in place: every family's model has owner_logits and is evaluated from each rank's slice (partial
    # sums all-reduced; ResIST's blocks owner after owner); the result equals the gathered model's evaluation, on
    # every rank.
    assert alg.runtime.evaluate is not None, name
    if alg.runtime.evaluate is not None:
        graph_case = shared is not None
        shape = (30,) if graph_case else (512, 6) if name.startswith("mlp") else (512, 6, 6, 2)
        x = np.arange(30, dtype=np.float32) if graph_case else np.random.default_rng(9).normal(size=shape)
        test = {"x": jnp.asarray(x, jnp.float32),
                "y": jnp.asarray(np.random.default_rng(9).integers(0, C, size=len(x)), jnp.int32)}
        loss, aux = jax.jit(alg.runtime.evaluate)(state.params, state.model_state, test, shared)
        every = M._world().allgather((float(loss), float(aux["accuracy"])))
        assert len(set(every)) == 1, every
        if ME == 0:
            ref_loss, ref_aux = plain.task.evaluate(whole.params, whole.model_state, test, shared)
            np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
            assert float(aux["accuracy"]) == float(ref_aux["accuracy"])
        say(f"OK sharded {name}: evaluated in place (no gather) == the gathered model's evaluation, loss "
            f"{float(loss):.6f}")
    say(f"OK sharded {name} on {N} ranks, W={W}: == the plain {'simulate' if plain.carries_optimizer_state else 'reference'} "
        f"round (params, model state, optimizer state); measured bytes {got} == analytic {tuple(alg.comm)}" + (f" + all-gather {extra}" if extra else ""))
M._world().Barrier()
say("ALL OK")
