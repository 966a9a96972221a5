"""What the protocols' MPI scripts (consensus.py, dynamic.py, codistill.py) share: a BatchNorm MLP task, each
round's batches, rank 0's printing, and the check that a gathered MPI state equals the single-process one."""

import jax
import jax.numpy as jnp
import numpy as np

import istjax
from istjax.models.mlp import MLP
from istjax.runtimes import mpi as M

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

D, C = 6, 3  # features, classes
TASK = istjax.classifier(MLP(hidden=(8,), num_classes=C, batch_norm=True), jnp.zeros((2, D)), MLP.rules(1),
                         num_classes=C)


def say(msg):
    if M.rank() == 0:
        print(msg, flush=True)


def batches(r, w, k, shift=False):
    """Round ``r``'s `[W, K, 5, D]` batches (``shift``: the inputs moved by ``r``, so workers drift apart)."""
    kx, ky = jax.random.split(jax.random.key(100 + r))
    x = jax.random.normal(kx, (w, k, 5, D))
    return {"x": x + r if shift else x, "y": jax.random.randint(ky, (w, k, 5), 0, C)}


def check(rt, state, ref, tol, label):
    """The whole state gathered to rank 0 (collective) equals ``ref``: every leaf of params, model state and
    optimizer state, shapes exactly, values within ``tol``."""
    whole = rt.gather(state)
    if M.rank() == 0:
        for a, b in zip(jax.tree.leaves((whole.params, whole.model_state, whole.opt_state)),
                        jax.tree.leaves((ref.params, ref.model_state, ref.opt_state))):
            assert np.shape(a) == np.shape(b), (label, np.shape(a), np.shape(b))
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=label)
