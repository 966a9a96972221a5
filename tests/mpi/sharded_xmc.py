"""Run under ``mpiexec -n N`` (N = 2 or 3): sharded IST on the extreme-classification task equals simulate.

`istjax.models.SparseMLP` (an embedding bag over 40 feature ids -> hidden units -> 12 labels, the multi-label
softmax loss) trained by IST with W = 2N (2 ranks) or N (3 ranks) workers, hidden units dealt stratified by N owners,
K = 2 local Adam steps (moments carried with their parameters) and SGD, for 2 rounds:

* the state gathered from the ranks' shards equals the simulate runtime's from the same key and batches
  (parameters, optimizer state);
* measured bytes per worker equal the analytic ones;
* no rank holds more than 1/N of the embedding bag or of the output layer;
* the model is evaluated in place, with no gather, with the gathered model's loss and P@1/3/5 on every rank: by
  label blocks (the runtime's evaluation: the output layer's rows exchanged for a label block, then hidden units and
  top-k candidates) and by partial sums of the output layer reduced (the owner pass).

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_xmc_model.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.models import SparseMLP
from istjax.runtimes import mpi as M

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W = 2 * N if N == 2 else N
H = 4 * N * W
F, C, K, B, NNZ, L = 40, 12, 2, 8, 6, 4


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def pairs(rng, shape):
    ids = np.stack([np.sort(rng.choice(F, size=NNZ, replace=False)) for _ in range(int(np.prod(shape)))])
    values = rng.normal(size=ids.shape) * (rng.random(ids.shape) < 0.8)  # some padded-like zero values
    return np.stack([ids, values], axis=-1).reshape(*shape, NNZ, 2).astype(np.float32)


def label_sets(rng, shape):
    out = np.full((int(np.prod(shape)), L), -1, np.int32)
    for row in out:
        k = rng.integers(1, L + 1)
        row[:k] = np.sort(rng.choice(C, size=k, replace=False))
    return out.reshape(*shape, L)


def batch(r):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(pairs(rng, (W, K, B))), "y": jnp.asarray(label_sets(rng, (W, K, B)))}


def close(a, b, what):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), (what, len(la), len(lb))
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6, err_msg=what)


model = SparseMLP(hidden=(H,), num_classes=C, num_features=F)
task = istjax.classifier(model, jnp.asarray(pairs(np.random.default_rng(0), (2,))), num_classes=C)
stratified = istjax.stratified(num_owners=N)
cases = {"adam, carried": (optax.adam(1e-2), "carry"), "sgd": (optax.sgd(0.5), "reset")}
for name, (optimizer, carry) in cases.items():
    def make(backend, **o):
        return istjax.ist(task, optimizer, num_workers=W, local_steps=K, sampler=stratified,
                          optimizer_state=carry, backend=backend, **o)

    alg, plain = make("mpi", mode="sharded"), make("simulate")
    state, ref = alg.init(jax.random.key(5)), plain.init(jax.random.key(5))
    for r in range(2):
        state, metrics = alg.round(state, batch(r))
        ref, _ = plain.round(ref, batch(r))
    # The runtime's estimate of a round beyond the state (`RuntimeHandle.round_memory`, the memory cap's), from
    # shapes: at least the sub-networks this rank's workers receive and send back.
    estimate = alg.runtime.round_memory(*jax.eval_shape(lambda: (state, batch(r))))
    assert estimate >= (W // N) * (alg.comm.received + alg.comm.sent), (estimate, tuple(alg.comm))
    got = (metrics["measured_bytes_received"], metrics["measured_bytes_sent"])
    assert got == (alg.comm.received, alg.comm.sent), (name, got, tuple(alg.comm))
    mine = state.params  # this rank's shard of every owned leaf
    assert mine["bag"]["kernel"].shape == (F, H // N) and mine["dense_out"]["kernel"].shape == (H // N, C), \
        jax.tree.map(jnp.shape, mine)
    whole = alg.runtime.gather(state)
    if ME == 0:
        close(whole.params, ref.params, f"{name}: params")
        close(whole.opt_state, ref.opt_state, f"{name}: optimizer state")
    test = {"x": jnp.asarray(pairs(np.random.default_rng(9), (64,))),
            "y": jnp.asarray(label_sets(np.random.default_rng(9), (64,)))}
    loss, aux = jax.jit(alg.runtime.evaluate)(state.params, state.model_state, test, None)
    every = M._world().allgather((float(loss), float(aux["precision_at_1"]), float(aux["precision_at_5"])))
    assert len(set(every)) == 1, every
    # The same from every owner's partial logits reduced (the owner pass every other model uses).
    reduce = M.mpi_collectives(M._world(), ME).all_sum
    sums_loss, sums_aux = jax.jit(lambda prm, t: task.owner.evaluate(prm, {}, t, owner=ME, num_owners=N,
                                                                     reduce=reduce))(state.params, test)
    if ME == 0:
        ref_loss, ref_aux = plain.task.evaluate(whole.params, whole.model_state, test)
        for got_loss, got_aux in ((loss, aux), (sums_loss, sums_aux)):
            np.testing.assert_allclose(float(got_loss), float(ref_loss), rtol=1e-5)
            for k in ("precision_at_1", "precision_at_3", "precision_at_5"):
                assert float(got_aux[k]) == float(ref_aux[k]), (k, got_aux[k], ref_aux[k])
    say(f"OK sharded xmc {name} on {N} ranks, W={W}: == simulate (params, optimizer state); measured bytes {got} "
        f"== analytic; each rank holds 1/{N} of the bag and the output layer; evaluated in place (label blocks, "
        f"partial sums) == gathered, "
        f"loss {float(loss):.6f} P@1 {float(aux['precision_at_1']):.3f}")
M._world().Barrier()
say("ALL OK")
