"""Run under ``mpiexec -n N``: the transformer on the MPI runtime equals it on one process.

* IST by width and by depth, parameter server and sharded (each rank holding 1/N of every head, unit or block):
  after 2 rounds the (gathered) state equals the plain reference round run on one process from the same key, and
  the measured bytes equal the analytic ones;
* the sharded mode evaluates in place (partial sums over each rank's heads and units all-reduced; by depth, the
  blocks owner after owner), with the gathered model's loss and accuracy, on every rank;
* DiLoCo (parameter server) equals the reference round, its outer optimizer's state included.

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_mpi.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.algorithms.reference import reference_round
from istjax.models import Transformer
from istjax.runtimes import mpi as M

jax.config.update("jax_numpy_rank_promotion", "raise")

N, ME = M.size(), M.rank()
W, K, B, T, V = N, 2, 4, 6, 11
ROUNDS = 2


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def batches(r):
    x = np.random.default_rng(r).integers(0, V, size=(W, K, B, T + 1))
    return {"x": jnp.asarray(x[..., :-1], jnp.int32), "y": jnp.asarray(x[..., 1:], jnp.int32)}


def task(split, scaling):
    units = 2 * N * W  # equal shares of every owner's heads, units or blocks for every worker
    model = Transformer(num_classes=V, num_layers=units if split == "depth" else 2, embed_dim=8,
                        num_heads=2 if split == "depth" else units, head_dim=2, mlp_dim=units, context=8,
                        split=split, scaling=scaling)
    return istjax.classifier(model, jnp.zeros((2, T), jnp.int32), num_classes=V)


def close(a, b, what):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), (what, len(la), len(lb))
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6, err_msg=what)


def ist(split, scaling):
    def make(backend, mode):  # the sharded mode deals every group stratified by owner; simulate runs the same
        sampler = istjax.stratified(num_owners=N) if mode == "sharded" else None
        return istjax.ist(task(split, scaling), optax.sgd(0.1), num_workers=W, local_steps=K, sampler=sampler,
                          backend=backend, **({"mode": mode} if backend == "mpi" else {}))
    return make


cases = {
    "ist width (training-time scaling)": ist("width", "train"),
    "ist depth (test-time scaling)": ist("depth", "test"),
    "diloco": lambda backend, mode: istjax.diloco(task("width", "none"), optax.sgd(0.1), num_workers=W,
                                                  local_steps=K, backend=backend,
                                                  **({"mode": mode} if backend == "mpi" else {})),
}
test = {"x": jnp.asarray(np.random.default_rng(9).integers(0, V, size=(16, T)), jnp.int32),
        "y": jnp.asarray(np.random.default_rng(10).integers(0, V, size=(16, T)), jnp.int32)}

for name, make in cases.items():
    modes = ("parameter_server",) if name == "diloco" else ("parameter_server", "sharded")
    for mode in modes:
        alg, plain = make("mpi", mode), make("simulate", mode)
        state = alg.init(jax.random.key(5))
        for r in range(ROUNDS):
            state, metrics = alg.round(state, batches(r))
        got = (metrics["measured_bytes_received"], metrics["measured_bytes_sent"])
        assert got == (alg.comm.received, alg.comm.sent), (name, mode, got, tuple(alg.comm))
        whole = alg.runtime.gather(state) if mode == "sharded" else state
        if ME == 0:
            ref = plain.init(jax.random.key(5))
            for r in range(ROUNDS):
                ref = reference_round(plain, ref, batches(r))
            close(whole.params, ref.params, f"{name} {mode}: params")
            close(whole.opt_state, ref.opt_state, f"{name} {mode}: optimizer state")
        if mode == "sharded":
            assert alg.runtime.evaluate is not None, name
            loss, aux = jax.jit(alg.runtime.evaluate)(state.params, state.model_state, test, None)
            every = M._world().allgather((float(loss), float(aux["accuracy"])))
            assert len(set(every)) == 1, every
            if ME == 0:
                want, want_aux = plain.task.evaluate(whole.params, whole.model_state, test)
                np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
                assert float(aux["accuracy"]) == float(want_aux["accuracy"])
            say(f"OK {name} sharded: evaluated in place (no gather) == the gathered model's evaluation")
        say(f"OK {name} {mode} on {N} ranks: == the plain reference round; measured bytes {got} == analytic")
M._world().Barrier()
say("ALL OK")
