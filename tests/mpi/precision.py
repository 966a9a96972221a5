"""Run under ``mpiexec -n N``: a bfloat16 exchange on the MPI runtime equals simulate with the same rounding.

IST and ResIST's exchange (parameter server; the change or the values sent), data parallel's gradients, local SGD's
and DiLoCo's replicas, with float32 and bfloat16 compute: the parameters after two rounds agree with simulate to the
dtype's rounding, on the parameter server, the replicas and (IST) the sharded mode; the bytes handed to MPI are the
analytic ones (an all-gather of 16-bit pieces where a float32 run all-reduces: each rank receives N of them). Rank 0
prints one
``OK ...`` line per check and ``ALL OK`` at the end. Driven by tests/test_mpi.py.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.launch.metrics import SPLIT
from istjax.models.mlp import MLP
from istjax.runtimes import mpi as M

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W = int(sys.argv[1])
K, B, D, C, H = 2, 8, 16, 5, 48
ROUNDS = 2
TOL = 2.0 ** -6  # a few bfloat16 roundings: values on a rounding boundary may land one ulp apart


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def batches(r):
    rng = np.random.default_rng(r)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, D)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


def task(dtype):
    model = MLP(hidden=(H, H), num_classes=C, use_bias=True, dtype=dtype)
    return istjax.classifier(model, jnp.zeros((B, D)), MLP.rules(2), num_classes=C)


def make(name, backend, dtype="float32", values="delta"):
    t, opt = task(dtype), optax.sgd(0.1)
    wire = {"exchange_dtype": "bfloat16", "exchange_values": values}
    factory = {"ist": istjax.ist, "data_parallel": istjax.data_parallel, "local_sgd": istjax.local_sgd,
               "diloco": istjax.diloco}[name]
    return factory(t, opt, num_workers=W, local_steps=K, backend=backend, **wire)


def run(alg_or_rt, init):
    state = init(jax.random.key(11))
    for r in range(ROUNDS):
        state, metrics = alg_or_rt.round(state, batches(r))
    return state, metrics


CASES = [("ist", "float32", "delta"), ("ist", "float32", "params"), ("ist", "bfloat16", "delta"),
         ("data_parallel", "float32", "delta"), ("local_sgd", "float32", "delta"),
         ("local_sgd", "bfloat16", "params"), ("diloco", "float32", "delta")]

for name, dtype, values in CASES:
    label = f"{name} compute {dtype} exchange bfloat16 ({values})"
    rt = M.mpi_runtime(make(name, "simulate", dtype, values))
    state, metrics = run(rt, rt.init)
    analytic = rt.algorithm.comm
    gathers = name != "ist"  # replicas and gradients: an all-gather of 16 bits brings each rank N pieces
    assert metrics["measured_bytes_sent"] == analytic.sent, (label, metrics, analytic)
    assert metrics["measured_bytes_received"] == analytic.received * (N if gathers else 1), (label, metrics, analytic)
    if name == "ist":  # half the float32 exchange's bytes
        assert 2 * analytic.sent == istjax.ist(task(dtype), optax.sgd(0.1), num_workers=W, local_steps=K).comm.sent
    full = make(name, "simulate", dtype, values)
    params = rt.gather_params(state)
    if ME == 0:
        ref_state, ref_metrics = run(full, full.init)
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_state.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=TOL, atol=TOL, err_msg=label)
        split = {k: float(v) for k, v in ref_metrics.items() if k in SPLIT}
        mpi_split = {k: float(v) for k, v in metrics.items() if k in SPLIT}
        assert set(split) == set(mpi_split), (label, split, mpi_split)
        for k, v in split.items():
            np.testing.assert_allclose(mpi_split[k], v, rtol=1e-2, atol=1e-3, err_msg=f"{label} {k}")
    say(f"OK {label}: mpi parameter_server == simulate after {ROUNDS} rounds; measured bytes per worker per round "
        f"sent {metrics['measured_bytes_sent']} received {metrics['measured_bytes_received']} (analytic "
        f"{tuple(analytic)}{', x N received: all-gather' if gathers else ''})")

# The sharded mode: every rank owns 1/N of each hidden layer; the owners round what they deal, the workers send their
# change or their values, the owners read it against their exact shard. Shared leaves (the output bias) are
# all-gathered as 16 bits where a float32 run all-reduces them: each rank receives N of those pieces.
for values in ("delta", "params"):
    label = f"ist sharded exchange bfloat16 ({values})"

    def sharded_ist(backend):
        return istjax.ist(task("float32"), optax.sgd(0.1), num_workers=W, local_steps=K, backend=backend,
                          sampler=istjax.stratified(num_owners=N), exchange_dtype="bfloat16", exchange_values=values)

    rt = M.mpi_runtime(sharded_ist("simulate"), mode="sharded")
    state, metrics = run(rt, rt.init)
    analytic, t = rt.algorithm.comm, rt.algorithm.task
    shared = sum(2 * x.size for x, s in zip(jax.tree.leaves(jax.eval_shape(t.init, jax.random.key(0))),
                                           jax.tree.leaves(t.spec.leaves)) if s.shared)
    assert shared > 0 and metrics["measured_bytes_sent"] == analytic.sent, (label, metrics, analytic)
    assert metrics["measured_bytes_received"] == analytic.received + (N - 1) * shared, (label, metrics, analytic)
    params = rt.gather_params(state)
    if ME == 0:
        full = sharded_ist("simulate")
        ref_state, _ = run(full, full.init)
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_state.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=TOL, atol=TOL, err_msg=label)
    say(f"OK {label}: mpi sharded == simulate after {ROUNDS} rounds; measured bytes per worker per round sent "
        f"{metrics['measured_bytes_sent']} received {metrics['measured_bytes_received']} (analytic {tuple(analytic)}; "
        f"+ (N - 1) x {shared} B of shared leaves all-gathered)")

M._world().Barrier()
say("ALL OK")
