"""Run under ``mpiexec -n 2 python rank_data.py``: each rank holds only the training examples its workers read.

For the parameter-server and sharded modes (digits, W = 4, disjoint shards), `istjax.experiment.driver.build` gives
every rank a batch function holding the examples of its two workers' shards alone (half the training set), whose
batches are rows ``2r, 2r + 1`` of the whole round's, and a dataset whose training split is only what evaluation
reads (``eval_train_examples``). With ``model_state="recompute"`` in the parameter-server mode, whose collect
reads every worker's batches, the rank holds them all.

Rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_mpi.py.
"""

import numpy as np

import istjax.data as data_lib
import istjax.experiment.driver as driver
from istjax.experiment.config import default_config
from istjax.runtimes import mpi as M

N, ME = M.size(), M.rank()
W = 2 * N


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def config(mode, **algorithm):
    c = default_config()
    c.runtime.name, c.runtime.mode, c.num_workers = "mpi", mode, W
    c.sampler.name, c.sampler.num_owners = "stratified", N
    c.eval_train_examples = 300
    for k, v in algorithm.items():
        c.algorithm[k] = v
    return c


whole = data_lib.load_dataset("digits")
for mode in ("parameter_server", "sharded"):
    exp = driver.build(config(mode))
    fn = exp.batch_fn
    assert fn.rows == (2 * ME, 2 * ME + 2), fn.rows
    assert len(fn.data["y"]) == 2 * (len(whole.train_y) // W), len(fn.data["y"])
    assert len(exp.dataset.train_y) == 300 and len(exp.dataset.test_y) == len(whole.test_y)
    full = data_lib.make_batch_fn(whole, num_workers=W, local_steps=fn.local_steps, batch_size=fn.batch_size,
                                  seed=fn.seed)
    for r in (0, 7):
        np.testing.assert_array_equal(np.asarray(fn(r)["x"]), np.asarray(full(r)["x"])[2 * ME:2 * ME + 2])
    say(f"OK {mode}: each rank holds {len(fn.data['y'])} of {len(whole.train_y)} training examples, its workers' "
        f"shards, and draws its rows of every round")
exp = driver.build(config("parameter_server", model_state="recompute"))
assert exp.batch_fn.rows is None and len(exp.batch_fn.data["y"]) == len(whole.train_y)
say("OK parameter_server with recomputed statistics: every rank holds every worker's examples")
M._world().Barrier()
say("ALL OK")
