"""Run under ``mpiexec -n 2``: the wave-2 core on MPI: model state, shared inputs, ``backend="mpi"`` from Python.

* A residual CNN with running-statistics BatchNorm (`istjax.models.CNN`): IST (parameter server; sharded with a
  round-counted learning-rate schedule), ResIST, data parallel and local SGD bound with ``backend="mpi"`` equal
  simulate after 2 rounds, parameters and model state;
  measured bytes equal the analytic ones (which count the BatchNorm statistics).
* A graph model reading a shared adjacency: every rank passes the same ``shared``; IST on MPI equals simulate.

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_mpi.py.
"""

import sys
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.core.schedule import make_schedule, round_scheduled
from istjax.models import CNN, DepthResNet
from istjax.runtimes import mpi as M

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from test_families import TinyGraph, _graph, N_NODES  # noqa: E402  (the same graph model as the unit tests)

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W, K, B, C = 4, 2, 8, 3  # B = 8: a batch of 6 made one BatchNorm channel ill-conditioned in float32
ROUNDS = 2


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def images(r):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, 6, 6, 2)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


def nodes(r):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, N_NODES)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


def run(alg, data, shared=None):
    state = alg.init(jax.random.key(7))
    metrics = None
    for r in range(ROUNDS):
        state, metrics = alg.round(state, data(r), shared)
    return state, metrics


def close(a, b, what, atol=2e-6):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la, what
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=atol, err_msg=what)


cnn = istjax.classifier(CNN(widths=(8, 16), blocks=(1, 1), num_classes=C), jnp.zeros((B, 6, 6, 2)),
                        num_classes=C)
cases = {
    # IST's parameter server with a schedule counted in rounds (the plain path, plus round 1 at a tenth of the
    # learning rate: ranks rebuild a reset optimizer state); data parallel and local SGD below run it unscheduled.
    "ist parameter_server (step lr schedule)": (lambda b, **o: istjax.ist(
        cnn, round_scheduled(optax.sgd(0.1), make_schedule("step", num_rounds=2, decay_at=(0.5,))), num_workers=W,
        local_steps=K, backend=b, **o), {"mode": "parameter_server"}),
    "ist sharded (step lr schedule)": (lambda b, **o: istjax.ist(
        cnn, round_scheduled(optax.sgd(0.1), make_schedule("step", num_rounds=2, decay_at=(0.5,))), num_workers=W,
        local_steps=K, sampler=istjax.stratified(num_owners=N), backend=b, **o), {"mode": "sharded"}),
    # ResIST: a depth-split pre-activation ResNet, blocks dealt with a minimum depth (overlaps averaged).
    "resist parameter_server": (lambda b, **o: istjax.resist(istjax.classifier(
        DepthResNet(stage_sizes=(3, 3), widths=(8, 16), num_classes=C), jnp.zeros((B, 6, 6, 2)), num_classes=C),
        optax.sgd(0.1), num_workers=W, local_steps=K, min_depth=1, backend=b, **o), {"mode": "parameter_server"}),
    "data_parallel": (lambda b, **o: istjax.data_parallel(cnn, optax.sgd(0.1), num_workers=W, local_steps=K,
                                                          backend=b, **o), {"mode": "parameter_server"}),
    "local_sgd": (lambda b, **o: istjax.local_sgd(cnn, optax.sgd(0.1), num_workers=W, local_steps=K, backend=b,
                                                  **o), {"mode": "parameter_server"}),
}
for name, (make, options) in cases.items():
    alg = make("mpi", **options)  # the Python API binds the MPI runtime like --config.runtime.name=mpi
    assert alg.runtime.name == "mpi" and alg.runtime.primary == (ME == 0)
    state, metrics = run(alg, images)
    assert (metrics["measured_bytes_received"], metrics["measured_bytes_sent"]) == tuple(alg.comm), (name, metrics)
    whole = alg.runtime.gather(state)  # collective: every rank calls it
    if ME == 0:
        ref, _ = run(make("simulate"), images)
        close(whole.params, ref.params, f"{name} params")
        close(whole.model_state, ref.model_state, f"{name} model state")
    else:
        assert whole is None
    say(f"OK cnn {name}: mpi == simulate (params and BatchNorm statistics) after {ROUNDS} rounds; measured bytes "
        f"{metrics['measured_bytes_received']} == analytic {alg.comm.received}")

shared = _graph()  # every rank builds the same graph and passes it; it never crosses MPI
graph = istjax.classifier(TinyGraph(hidden=8), jnp.zeros((B, N_NODES)), example_shared=shared, num_classes=C)
for mode in M.MODES:
    sampler = istjax.stratified(num_owners=N) if mode == "sharded" else None
    alg = istjax.ist(graph, optax.sgd(0.1), num_workers=W, local_steps=K, sampler=sampler, backend="mpi", mode=mode)
    state, _ = run(alg, nodes, shared)
    whole = alg.runtime.gather(state)
    if ME == 0:
        ref, _ = run(istjax.ist(graph, optax.sgd(0.1), num_workers=W, local_steps=K, sampler=sampler), nodes, shared)
        close(whole.params, ref.params, f"graph {mode}")
    say(f"OK shared input ({mode}): the adjacency reached every rank's workers; mpi == simulate")
# GIST: GraphSAGE (tiled [self, neighbour] groups) full-graph on a shared Graph, and GCN on Cluster-GCN batches.
from istjax.graph import from_edges  # noqa: E402
from istjax.data.cluster_batches import cluster_batch_fn  # noqa: E402
from istjax.graph import task as graph_task  # noqa: E402
from istjax.models import GCN, GraphSAGE  # noqa: E402

rng = np.random.default_rng(11)
g = from_edges(rng.normal(size=(30, 5)).astype(np.float32), rng.integers(0, 30, size=(60, 2)))
full = {"graph": g}
sage = graph_task.node_classifier(GraphSAGE(hidden=(8, 8), num_classes=C, layer_norm=True), full, num_classes=C)


def node_ids(r):
    rr = np.random.default_rng(100 + r)
    return {"x": jnp.asarray(rr.integers(0, 30, size=(W, K, B)), jnp.float32),
            "y": jnp.asarray(rr.integers(0, C, size=(W, K, B)), jnp.int32)}


clustered = graph_task.with_clusters(full, rng.integers(0, C, size=30), np.arange(0, 30, 2), 4, method="metis")
gcn = graph_task.cluster_classifier(GCN(hidden=(8,), num_classes=C), clustered)
cluster_ids = cluster_batch_fn(clustered, num_workers=W, local_steps=K, clusters_per_step=2, seed=3)
# The sharded mode of every family (GraphSAGE's tiled groups, GCN, ResIST, carried Adam) is sharded_families.py's.
for label, task, data, sh, modes in (("graphsage full graph", sage, node_ids, full, ("parameter_server",)),
                                     ("gcn cluster batches", gcn, cluster_ids, clustered, ("parameter_server",))):
    for mode in modes:
        sampler = istjax.stratified(num_owners=N) if mode == "sharded" else None
        # Plain SGD: Adam divides each update by the root of its squared-gradient average, so a last-bit difference
        # in a near-zero gradient (a rank runs its worker unmapped, simulate under vmap: other summation orders)
        # became differences of up to 2e-4 after these rounds on AMD EPYC, which no tolerance tells from a bug.
        alg = istjax.ist(task, optax.sgd(0.1), num_workers=W, local_steps=K, sampler=sampler, backend="mpi",
                         mode=mode)
        state, _ = run(alg, data, sh)
        whole = alg.runtime.gather(state)
        if ME == 0:
            ref, _ = run(istjax.ist(task, optax.sgd(0.1), num_workers=W, local_steps=K, sampler=sampler), data, sh)
            close(whole.params, ref.params, f"gist {label} {mode}")
        say(f"OK gist {label} ({mode}): mpi == simulate")
M._world().Barrier()
say("ALL OK")
