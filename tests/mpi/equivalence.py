"""Run under ``mpiexec -n N``: the MPI runtime (both modes) equals simulate and devices; bytes; sharded memory.

Every rank asserts; rank 0 prints one ``OK ...`` line per check and ``ALL OK`` at the end. Driven by
tests/test_mpi.py for N = 2, 3, 4 (W = 4, 3, 4 workers).
"""

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.launch.metrics import SPLIT
from istjax.runtimes import mpi as M
from istjax.models.mlp import MLP

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W = int(sys.argv[1])
FULL = "--full" in sys.argv  # also the devices backend
K, B, D, C, H = 2, 8, 16, 5, 144  # H divisible by N * W for (N, W) in (2, 4), (3, 3), (4, 4)
ROUNDS = 2
FOUR = 4  # float32 bytes


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def batches(r):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, D)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


task = istjax.classifier(MLP(hidden=(H, H), num_classes=C, use_bias=True), jnp.zeros((B, D)), MLP.rules(2),
                         num_classes=C)
make = {
    "ist": lambda b: istjax.ist(task, optax.sgd(0.1), num_workers=W, local_steps=K,
                                sampler=istjax.stratified(num_owners=N), backend=b),
    "data_parallel": lambda b: istjax.data_parallel(task, optax.sgd(0.1), num_workers=W, local_steps=K, backend=b),
    "local_sgd": lambda b: istjax.local_sgd(task, optax.sgd(0.1), num_workers=W, local_steps=K, backend=b),
}
full_leaves = jax.eval_shape(task.init, jax.random.key(0))
partitioned_bytes = [math.prod(x.shape) * FOUR for x, s in zip(jax.tree.leaves(full_leaves),
                                                              jax.tree.leaves(task.spec.leaves)) if not s.shared]


def run(alg_or_rt, init):
    state = init(jax.random.key(7))
    for r in range(ROUNDS):
        state, metrics = alg_or_rt.round(state, batches(r))
    return state, metrics


# 1. Sharded IST first, before this process computes any full model: memory check on what the rank holds.
rt = M.mpi_runtime(make["ist"]("simulate"), mode="sharded")
sharded_state, metrics = run(rt, rt.init)
assert (metrics["measured_bytes_received"], metrics["measured_bytes_sent"]) == tuple(rt.algorithm.comm)
say(f"OK ist sharded: measured bytes per worker per round received {metrics['measured_bytes_received']} "
    f"sent {metrics['measured_bytes_sent']} == analytic {tuple(rt.algorithm.comm)}")
held = max(x.nbytes for x in jax.live_arrays())
limit = max(partitioned_bytes) // N
assert rt.largest_array_bytes <= limit, (rt.largest_array_bytes, limit)
assert held <= limit, (held, limit)
say(f"OK sharded memory: largest array in a round {rt.largest_array_bytes} B, largest live {held} B, "
    f"largest full partitioned weight {max(partitioned_bytes)} B (/N = {limit})")
sharded_params = rt.gather_params(sharded_state)
assert "merge_cost" not in metrics  # no rank holds the merged model: no loss split in the sharded mode

results = {("ist", "sharded"): (sharded_params, rt, metrics)}
for name in make:
    for mode in M.MODES:
        if (name, mode) in results:
            continue
        if name != "ist" and mode == "sharded":  # nothing to shard: every rank holds the replica; refused
            try:
                M.mpi_runtime(make[name]("simulate"), mode=mode)
            except ValueError as e:
                assert "would change nothing" in str(e) and "parameter_server" in str(e), e
            else:
                raise AssertionError(f"{name} in sharded mode was not refused")
            say(f"OK {name} sharded: refused")
            continue
        rt = M.mpi_runtime(make[name]("simulate"), mode=mode)
        state, metrics = run(rt, rt.init)
        results[name, mode] = (rt.gather_params(state), rt, metrics)
        analytic = rt.algorithm.comm
        assert metrics["measured_bytes_received"] == analytic.received, (name, mode, metrics, analytic)
        assert metrics["measured_bytes_sent"] == analytic.sent, (name, mode, metrics, analytic)
        assert len(metrics["worker_loss"]) == W
        say(f"OK {name} {mode}: measured bytes per worker per round received {metrics['measured_bytes_received']} "
            f"sent {metrics['measured_bytes_sent']} == analytic {tuple(analytic)}")

# 1b. Data parallel with its gradients all-reduced as one buffer equals the per-leaf all-reduce (same bytes).
rt = M.mpi_runtime(make["data_parallel"]("simulate"), gradient_buffers="one")
state, metrics = run(rt, rt.init)
assert metrics["measured_bytes_received"] == rt.algorithm.comm.received, (metrics, rt.algorithm.comm)
one_params = rt.gather_params(state)
if ME == 0:
    for a, b in zip(jax.tree.leaves(one_params), jax.tree.leaves(results["data_parallel", "parameter_server"][0])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-6)
say("OK data_parallel gradient_buffers='one' == 'leaves'")

# 1c. A round asked for no loss split (the driver's rounds between evaluations) computes none, on any rank: no split
#     metrics on any rank, the same state as a round with it.
for name, mode in (("ist", "parameter_server"), ("local_sgd", "parameter_server")):
    rt = M.mpi_runtime(make[name]("simulate"), mode=mode)
    state0 = rt.init(jax.random.key(7))
    with_split, m_on = rt.round(state0, batches(0))
    without, m_off = rt.round(state0, batches(0), split=False)
    assert not set(m_off) & set(SPLIT), (name, sorted(m_off))
    assert ME != 0 or {"worker_train_loss", "merged_train_loss"} <= set(m_on), (name, sorted(m_on))
    for a, b in zip(jax.tree.leaves(rt.gather_params(with_split)), jax.tree.leaves(rt.gather_params(without))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    say(f"OK {name} {mode}: a round with split=False computes no loss split, the same state")

# 2. IST moves 1/W of the first and last layers and 1/W^2 of the hidden-to-hidden layer, per worker.
for mode in M.MODES:
    by_leaf = results["ist", mode][1].last_traffic.by_leaf
    expect = {"dense_0/kernel": D * H // W, "dense_1/kernel": (H // W) ** 2, "dense_out/kernel": H // W * C,
              "dense_out/bias": C}
    for path, elems in expect.items():
        got = [v for k, v in by_leaf.items() if k.endswith(path)]
        assert got and got[0] == [elems * FOUR * (W // N)] * 2, (mode, path, got, elems)
    say(f"OK ist {mode}: per-leaf bytes dense_0 1/W, dense_1 1/W^2, dense_out 1/W of the full weight")

# 3. Same seed, same config: simulate, devices (local devices of rank 0) and MPI in both modes agree.
if ME == 0:
    for name in make:
        refs, split = {}, None
        for backend in ("simulate", "devices") if FULL else ("simulate",):
            alg = make[name](backend)
            state, metrics = run(alg, alg.init)
            refs[backend] = state.params
            if backend == "simulate":
                split = {k: float(v) for k, v in metrics.items() if k in SPLIT}
        assert {"worker_train_loss", "merged_train_loss", "merge_cost"} <= set(split), split
        mpi_split = {k: float(v) for k, v in results[name, "parameter_server"][2].items() if k in SPLIT}
        assert set(mpi_split) == set(split), (name, mpi_split, split)
        for k, v in split.items():  # the last round's loss split: rank 0's (IST) or the ranks' mean (replicas)
            np.testing.assert_allclose(mpi_split[k], v, rtol=1e-4, atol=1e-6, err_msg=f"{name} {k}")
        say(f"OK {name}: loss split on mpi parameter_server == simulate ({', '.join(sorted(split))})")
        others = [(m, results[name, m][0]) for m in M.MODES if (name, m) in results]
        for label, params in [(b, p) for b, p in refs.items() if b != "simulate"] + others:
            for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(refs["simulate"])):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-6, err_msg=f"{name} {label}")
        say(f"OK {name}: simulate == {' == '.join(refs)[len('simulate == '):] or '(no devices run)'} == mpi "
            f"{' == mpi '.join(m for m, _ in others)} after {ROUNDS} rounds ({len(jax.devices())} local devices)")
else:
    for name in make:
        for mode in M.MODES:
            assert results.get((name, mode), (None,))[0] is None  # only rank 0 assembles the model
M._world().Barrier()
say("ALL OK")
