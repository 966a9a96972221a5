"""Run under ``mpiexec -n N python tensor_parallel.py [FAMILY ...]`` (N = 2 or 4): tensor parallel equals
single-process full-model training, for every family whose split comes from the model.

`istjax.tensor_parallel` with P = W = N shards, K = 3 steps a round, two rounds, on a small `SparseMLP` (hidden 16,
12 labels; SGD and Adam: rank r holds columns r of the embedding bag and label block r of the output layer), a
`SparseMLP` with two hidden layers (the second layer split by rows), an `MLP` with three hidden layers and
BatchNorm (Megatron's pairs), a `Transformer` (heads and feed-forward units), and the MLP computing in bfloat16
(against the whole bfloat16 model, within its rounding). The state
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
F, H, C, K, B = 20, 16, 12, 3, 4


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def sparse_batches(seed):
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


def dense_batches(seed, features=7):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.normal(size=(N, K, B, features)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(N, K, B)), jnp.int32)}


def text_batches(seed, t=5, vocab=11):
    ids = np.random.default_rng(seed).integers(0, vocab, size=(N, K, B, t + 1))
    return {"x": jnp.asarray(ids[..., :-1], jnp.int32), "y": jnp.asarray(ids[..., 1:], jnp.int32)}


def families():
    """name -> (task, batches, optimizers, (rtol, atol) of the gathered state, the float32 task a bfloat16 one is
    measured against). The transformer's atol is looser: Adam divides by the root of tiny second moments, so float32
    rounding in the order of the shards' partial sums moves a few weights by ~1e-5 after 6 steps of 0.05."""
    sparse = istjax.classifier(SparseMLP(hidden=(H,), num_classes=C, num_features=F), jnp.zeros((2, 5, 2)),
                               num_classes=C)
    deep_sparse = istjax.classifier(SparseMLP(hidden=(H, 8), num_classes=C, num_features=F), jnp.zeros((2, 5, 2)),
                                    num_classes=C)
    mlp = istjax.models.MLP(hidden=(8, 8, 8), num_classes=C)  # BatchNorm on the units and the logits, no biases
    transformer = istjax.models.Transformer(num_classes=11, num_layers=2, embed_dim=8, num_heads=4, head_dim=2,
                                            mlp_dim=8, context=5)
    sgd, adam = optax.sgd(0.5), optax.adam(0.05)
    mlp_task = istjax.classifier(mlp, jnp.zeros((2, 7)), num_classes=C)
    # bfloat16: without BatchNorm, whose statistics of 4 W examples a step would amplify any rounding difference
    plain = istjax.models.MLP(hidden=(8, 8, 8), num_classes=C, batch_norm=False, output_batch_norm=False,
                              use_bias=True)
    plain_task = istjax.classifier(plain, jnp.zeros((2, 7)), num_classes=C)
    return {
        "sparse_mlp": (sparse, sparse_batches, {"sgd": sgd, "adam": adam}, (2e-5, 2e-6), None),
        "sparse_mlp_depth2": (deep_sparse, sparse_batches, {"sgd": sgd}, (2e-5, 2e-6), None),
        "mlp_depth3": (mlp_task, dense_batches, {"adam": adam}, (2e-5, 2e-6), None),
        "transformer": (istjax.classifier(transformer, jnp.zeros((2, 5), jnp.int32), num_classes=11), text_batches,
                        {"adam": adam}, (2e-5, 3e-5), None),
        "mlp_bfloat16": (istjax.classifier(plain.clone(dtype="bfloat16"), jnp.zeros((2, 7)), num_classes=C),
                         dense_batches, {"sgd": optax.sgd(0.1)}, None, plain_task),
    }


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


def within_rounding(got, low, exact, what):
    """bfloat16: the shards' result is as far from the whole bfloat16 model's as bfloat16's own rounding takes that
    from float32 (twice its distance at most), and not equal to float32's (it did round)."""
    dist = lambda a, b: float(np.sqrt(sum(np.sum((np.asarray(x) - np.asarray(y)) ** 2)  # noqa: E731
                                          for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))))
    ours, rounding = dist(got, low), dist(low, exact)
    assert 0 < rounding and ours <= 2 * rounding, (what, ours, rounding)
    return ours, rounding


def run(name, optimizer, task, batches, tolerance=(2e-5, 2e-6), exact_task=None):
    rtol, atol = tolerance or (None, None)
    alg = istjax.tensor_parallel(task, optimizer, num_workers=N, local_steps=K, batch_size=B, backend="mpi")
    state = alg.init(jax.random.key(0))
    whole = istjax.algorithms.tensor.tensor_parallel_pieces(task, optimizer, num_workers=N, local_steps=K,
                                                             batch_size=B).init(jax.random.key(0))
    if "bag" in state.params and len(task.module.hidden) == 1:
        assert state.params["bag"]["kernel"].shape == (F, H // N) and state.params["dense_out"]["kernel"].shape == (
            H, C // N), jax.tree.map(jnp.shape, state.params)
    held = sum(int(np.prod(v.shape)) for v in jax.tree.leaves(state.params))
    total = sum(int(np.prod(v.shape)) for v in jax.tree.leaves(whole.params))
    assert held < total, (held, total)
    params, opt_state = whole.params, whole.opt_state
    exact = whole.params, whole.opt_state
    for r in range(2):
        round_batches = batches(10 + r)
        state, metrics = alg.round(state, round_batches)
        params, opt_state, plain_loss = plain_round(task, optimizer, params, opt_state, round_batches)
        if exact_task is not None:
            exact = plain_round(exact_task, optimizer, *exact, round_batches)[:2]
        np.testing.assert_allclose(float(metrics["train_loss"]), plain_loss, rtol=rtol or 1e-2)
        assert metrics["measured_bytes_sent"] == alg.comm.sent, (metrics["measured_bytes_sent"], alg.comm)
        assert metrics["measured_bytes_received"] == alg.comm.received, (metrics["measured_bytes_received"], alg.comm)
    gathered = alg.runtime.gather(state)
    if ME == 0 and exact_task is None:
        close(gathered.params, params, f"{name} params", rtol, atol)
        close(gathered.opt_state, opt_state, f"{name} optimizer state", rtol, atol)
        assert int(gathered.round) == 2
        say(f"OK {name}: params == single process (2 rounds of K={K}), optimizer state too; loss == plain loss; a "
            f"rank holds {held} of {total} weights")
    elif ME == 0:
        ours, rounding = within_rounding(gathered.params, params, exact[0], name)
        say(f"OK {name}: params within bfloat16's rounding of the whole bfloat16 model's (distance {ours:.2e}; "
            f"bfloat16 from float32: {rounding:.2e}); a rank holds {held} of {total} weights")
    say(f"OK {name}: measured bytes == analytic ({alg.comm.sent} sent, {alg.comm.received} received a round)")
    test = jax.tree.map(lambda *v: jnp.concatenate([u.reshape((-1,) + u.shape[3:]) for u in v]), batches(98),
                        batches(99))  # 2 * W * K * B >= 48 examples: BatchNorm's test batches evaluate
    got_loss, got_aux = jax.jit(alg.runtime.evaluate)(state.params, {}, test)
    if ME == 0:
        want_loss, want_aux = task.evaluate(params, {}, test)
        np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=rtol or 5e-2)
        assert set(got_aux) == set(want_aux), (sorted(got_aux), sorted(want_aux))
        for k in want_aux:
            if exact_task is None:  # bfloat16's own shards may flip a near tie of the top class
                np.testing.assert_allclose(float(got_aux[k]), float(want_aux[k]), rtol=2e-5, err_msg=k)
    say(f"OK {name}: evaluation == single-process evaluation ({sorted(got_aux)})")


def main(names):
    wide = istjax.classifier(SparseMLP(hidden=(H,), num_classes=16, num_features=F), jnp.zeros((2, 5, 2)),
                             num_classes=16)
    try:
        istjax.tensor_parallel(wide, optax.sgd(0.1), num_workers=2 * N, local_steps=K, batch_size=B, backend="mpi")
    except istjax.ArgError as e:
        assert "one shard per process" in str(e), e
    else:
        raise AssertionError("num_workers != processes was not refused")
    say("OK num_workers != processes: refused on every rank")
    every = families()
    for family in names or every:
        task, batches, optimizers, tolerance, exact_task = every[family]
        for opt_name, optimizer in optimizers.items():
            run(f"{family} {opt_name}", optimizer, task, batches, tolerance, exact_task)
    say("ALL OK")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
