"""The ``"activations"`` exchange (tensor parallel), either mode: one shard per rank (W = N); every rank holds its
shard of every layer and runs the algorithm's shard round (`istjax.Algorithm.tensor`) with mpi4jax collectives inside
the compiled step; its bytes are read from the compiled program (`mpi_bytes`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core import memory as memory_lib
from istjax.core.errors import ArgError
from istjax.core.state import TrainState, summarize
import istjax.runtimes.mpi.buffers as buffers
import istjax.runtimes.mpi.rounds as rounds
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic
from istjax.runtimes.mpi.world import ROOT

__all__ = ["WHOLE_STATE", "install", "mpi_bytes"]

#: Every rank holds its shard of every layer.
WHOLE_STATE = False


def mpi_bytes(jaxpr, times: int = 1) -> tuple[int, int]:
    """``(received, sent)``: bytes of the buffers the mpi4jax calls in ``jaxpr`` (and the jaxprs nested in it) are
    handed and return (inputs sent, outputs received), a scan's body counted its ``length`` times."""
    received = sent = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name.endswith("_mpi"):
            sent += times * sum(int(np.prod(v.aval.shape)) * v.aval.dtype.itemsize for v in eqn.invars
                                if hasattr(v.aval, "shape"))
            received += times * sum(int(np.prod(v.aval.shape)) * v.aval.dtype.itemsize for v in eqn.outvars
                                    if hasattr(v.aval, "shape"))
        inner_times = times * int(eqn.params.get("length", 1)) if eqn.primitive.name == "scan" else times
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    r, s_ = mpi_bytes(inner, inner_times)
                    received, sent = received + r, sent + s_
    return received, sent


def install(rt: MPIRuntime) -> None:
    """Tensor parallel: rank r holds shard r of every layer; a round is the shard's K steps in one jit."""
    alg = rt.algorithm
    pieces = alg.tensor
    if rt.size != pieces.num_shards:
        raise ArgError("num_workers", alg.num_workers,
                       f"tensor_parallel runs one shard per process: num_workers={alg.num_workers} shards on "
                       f"{rt.size} processes.", use=[{"num_workers": rt.size}, f"mpiexec -n {alg.num_workers}"])
    coll = buffers.mpi_collectives(rt.comm, rt.rank)
    x = buffers.TreeCollectives(rt.comm)
    train = jax.jit(functools.partial(pieces.train, coll))
    measured: dict = {}

    def round_fn(state, batches, shared=None, *, split=True):
        rounds.check_batches(batches, rt)
        lead = {v.shape[0] for v in jax.tree.leaves(batches)}
        if lead != {alg.num_workers}:  # a rank's own rows would train each shard on other examples: refused
            raise ValueError(f"batches have leading sizes {sorted(lead)}; tensor parallel reads all W="
                             f"{alg.num_workers} workers' rows [W, K, B, ...] on every rank (every shard computes "
                             f"the same examples), not a rank's own rows.")
        if "bytes" not in measured:  # read once from the program the round runs
            measured["bytes"] = mpi_bytes(jax.make_jaxpr(train)(state, batches).jaxpr)
        state, metrics_K = train(state, batches)
        rt._track(state)
        traffic = Traffic(received=measured["bytes"][0], sent=measured["bytes"][1])
        metrics_WxK = jax.tree.map(lambda m: jnp.broadcast_to(m, (alg.num_workers,) + m.shape), metrics_K)
        rt.last_traffic = traffic  # every shard computes the same loss: no metric exchange
        return state, {**{k: np.asarray(v) for k, v in summarize(metrics_WxK).items()},
                       "measured_bytes_sent": traffic.sent, "measured_bytes_received": traffic.received}

    def gather(state):
        got = x.gather((state.params, state.opt_state))
        if rt.rank != ROOT:
            return None
        return pieces.join(TrainState(got[0], state.model_state, got[1], state.key, state.round))

    def round_memory(state, batches, shared=None) -> int:  # one compiled program: its outputs and temporaries
        return memory_lib.step_bytes(train.lower(state, batches).compile().memory_analysis())

    rt.init = jax.jit(lambda key: pieces.init(key, rt.rank))  # the shard's state only (`TensorPieces.init`)
    rt.round, rt.gather, rt.round_memory = round_fn, gather, round_memory
    rt.evaluate = functools.partial(pieces.evaluate, coll)
