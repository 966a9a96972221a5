"""Run under ``mpiexec -n 2 python rank_data.py``: each rank holds only the training examples its workers read.

For the parameter-server and sharded modes (digits, W = 4, disjoint shards), `istjax.launch.driver.build` gives
every rank a batch function holding the examples of its two workers' shards alone (half the training set), whose
batches are rows ``2r, 2r + 1`` of the whole round's, and a dataset whose training split is only what evaluation
reads (``eval_train_examples``). With ``model_state="recompute"`` in the parameter-server mode, whose collect
reads every worker's batches, the rank holds them all. A file-backed data set (Fashion-MNIST's IDX format, a small
generated copy) reaches the batch function as `istjax.data.Rows`: a rank converts to float32 only the rows it holds.

Rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_mpi.py.
"""

import gzip
import pathlib
import shutil
import tempfile

import numpy as np

import istjax.data as data_lib
import istjax.launch.driver as driver
from istjax.data import images as I
from istjax.launch.config import default_config
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

# A drifting stream (data.drift_round): the rank's rows of every round, their labels renamed from the drift on.
c = config("parameter_server")
c.data.drift_round = 5
exp = driver.build(c)
assert exp.batch_fn.rows == (2 * ME, 2 * ME + 2) and exp.drift.at_round == 5
full = data_lib.make_batch_fn(whole, num_workers=W, local_steps=exp.batch_fn.local_steps,
                              batch_size=exp.batch_fn.batch_size, seed=exp.batch_fn.seed)
for r in (0, 4, 5, 7):
    mine = np.asarray(full(r)["y"])[2 * ME:2 * ME + 2]
    np.testing.assert_array_equal(np.asarray(exp.batch_fn(r)["y"]), exp.drift.permutation[mine] if r >= 5 else mine)
say("OK drift: a rank's rows carry the labels of each round's concept")


def idx_folder():
    """Rank 0 writes a 600 / 300 example Fashion-MNIST-format folder (gzipped IDX files); every rank gets its path."""
    folder = None
    if ME == 0:
        folder = pathlib.Path(tempfile.mkdtemp(prefix="istjax-rank-data-"))
        rng = np.random.default_rng(0)
        for key, n in (("train", 600), ("test", 300)):
            images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
            labels = (np.arange(n) % 10).astype(np.uint8)
            for kind, arr, magic in (("images", images, I.IDX_IMAGES_MAGIC), ("labels", labels, I.IDX_LABELS_MAGIC)):
                head = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
                (folder / I.FASHION_MNIST_FILES[f"{key}_{kind}"]).write_bytes(gzip.compress(head + arr.tobytes()))
    return M._world().bcast(None if folder is None else str(folder), root=0)


folder = idx_folder()
c = config("sharded")
c.data.name, c.data.kwargs.data_dir, c.data.kwargs.flatten = "fashion_mnist", folder, True
c.eval_train_examples = 300
files = data_lib.load_dataset("fashion_mnist", data_dir=folder, flatten=True)
assert isinstance(files.train_x, data_lib.Rows), type(files.train_x)
exp = driver.build(c)
fn = exp.batch_fn
assert len(fn.data["y"]) == 2 * (600 // W) and len(exp.dataset.train_y) == 300
full = data_lib.make_batch_fn(files._replace(train_x=np.asarray(files.train_x)), num_workers=W,
                              local_steps=fn.local_steps, batch_size=fn.batch_size, seed=fn.seed)
np.testing.assert_array_equal(np.asarray(fn(3)["x"]), np.asarray(full(3)["x"])[2 * ME:2 * ME + 2])
say(f"OK fashion_mnist files (Rows): each rank holds {len(fn.data['y'])} of 600 training examples as float32")
M._world().Barrier()
if ME == 0:
    shutil.rmtree(folder)
exp = driver.build(config("parameter_server", model_state="recompute"))
assert exp.batch_fn.rows is None and len(exp.batch_fn.data["y"]) == len(whole.train_y)
say("OK parameter_server with recomputed statistics: every rank holds every worker's examples")
M._world().Barrier()
say("ALL OK")
