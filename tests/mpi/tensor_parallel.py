"""Run under ``mpiexec -n 2 python tensor_parallel.py``: tensor parallel equals single-process full-model training.

`istjax.tensor_parallel` on a small `SparseMLP` (hidden 16, 10 labels), P = W = 2 shards, K = 3 steps a round, two
rounds, SGD and Adam: rank r holds columns r of the embedding bag and label block r of the output layer. The state
gathered to rank 0 (params and Adam's moments) equals K steps of plain optax training of the whole model on the same
examples (each step all W workers' rows); the round's loss equals the plain loss; the evaluation from the shards
(no whole logits: `RuntimeHandle.evaluate`) equals ``task.evaluate`` of the gathered model; each rank holds
``1 / P`` of every weight; the bytes read from the compiled step equal the analytic ``algorithm.comm``.

Rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_tensor_parallel.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.models import SparseMLP
from istjax.runtimes import mpi as M

N, ME = M.size(), M.rank()
F, H, C, K, B = 20, 16, 10, 3, 4


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def batches(seed):
    """``[W, K, B, ...]``: the same on every rank (a seeded numpy draw)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((N, K, B, 5, 2), np.float32)
    x[..., 0] = rng.integers(0, F, size=(N, K, B, 5))
    x[..., 1] = rng.normal(size=(N, K, B, 5))
    y = -np.ones((N, K, B, 3), np.int32)
    for idx in np.ndindex(N, K, B):
        n = rng.integers(1, 4)
        y[idx][:n] = rng.choice(C, size=n, replace=False)
    return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def plain_round(task, optimizer, params, opt_state, round_batches):
    """K optax steps of the whole model on all W rows a step; the mean loss."""
    loss = task.train_loss(None)
    losses = []
    for k in range(K):
        batch = jax.tree.map(lambda v, k=k: v[:, k].reshape((-1,) + v.shape[3:]), round_batches)
        value, grads = jax.value_and_grad(lambda prm, batch=batch: loss(prm, {}, batch)[0])(params)
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        losses.append(float(value))
    return params, opt_state, float(np.mean(losses))


def close(a, b, what, rtol=2e-5, atol=2e-6):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=what)


def run(name, optimizer, task):
    alg = istjax.tensor_parallel(task, optimizer, num_workers=N, local_steps=K, batch_size=B, backend="mpi")
    state = alg.init(jax.random.key(0))
    whole = istjax.algorithms.tensor.tensor_parallel_pieces(task, optimizer, num_workers=N, local_steps=K,
                                                             batch_size=B).init(jax.random.key(0))
    assert state.params["bag"]["kernel"].shape == (F, H // N) and state.params["dense_out"]["kernel"].shape == (
        H, C // N), jax.tree.map(jnp.shape, state.params)
    params, opt_state = whole.params, whole.opt_state
    for r in range(2):
        round_batches = batches(10 + r)
        state, metrics = alg.round(state, round_batches)
        params, opt_state, plain_loss = plain_round(task, optimizer, params, opt_state, round_batches)
        np.testing.assert_allclose(float(metrics["train_loss"]), plain_loss, rtol=2e-5)
        assert metrics["measured_bytes_sent"] == alg.comm.sent, (metrics["measured_bytes_sent"], alg.comm)
        assert metrics["measured_bytes_received"] == alg.comm.received, (metrics["measured_bytes_received"], alg.comm)
    gathered = alg.runtime.gather(state)
    if ME == 0:
        close(gathered.params, params, f"{name} params")
        close(gathered.opt_state, opt_state, f"{name} optimizer state")
        assert int(gathered.round) == 2
    say(f"OK {name}: params == single process (2 rounds of K={K}), optimizer state too; loss == plain loss")
    say(f"OK {name}: measured bytes == analytic ({alg.comm.sent} sent, {alg.comm.received} received a round)")
    test = jax.tree.map(lambda v: v[0, 0], batches(99))
    got_loss, got_aux = jax.jit(alg.runtime.evaluate)(state.params, {}, test)
    if ME == 0:
        want_loss, want_aux = task.evaluate(params, {}, test)
        np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=2e-5)
        assert set(got_aux) == set(want_aux), (sorted(got_aux), sorted(want_aux))
        for k in want_aux:
            np.testing.assert_allclose(float(got_aux[k]), float(want_aux[k]), rtol=2e-5, err_msg=k)
    say(f"OK {name}: evaluation == single-process evaluation ({sorted(got_aux)})")


def main():
    model = SparseMLP(hidden=(H,), num_classes=C, num_features=F)
    task = istjax.classifier(model, jnp.zeros((2, 5, 2), jnp.float32), num_classes=C)
    wide = istjax.classifier(SparseMLP(hidden=(H,), num_classes=16, num_features=F), jnp.zeros((2, 5, 2)),
                             num_classes=16)
    try:
        istjax.tensor_parallel(wide, optax.sgd(0.1), num_workers=2 * N, local_steps=K, batch_size=B, backend="mpi")
    except istjax.ArgError as e:
        assert "one shard per process" in str(e), e
    else:
        raise AssertionError("num_workers != processes was not refused")
    say("OK num_workers != processes: refused on every rank")
    run("sgd", optax.sgd(0.5), task)
    run("adam", optax.adam(0.05), task)
    say("ALL OK")


if __name__ == "__main__":
    main()
