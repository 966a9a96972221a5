"""Run under ``mpiexec -n 2 python sharded_resume.py WORKDIR [FAMILY]``: sharded MPI mode checkpoints and resumes
exactly. FAMILY: ``mlp`` (default: BatchNorm statistics held in shards with the weights), ``resist`` (a depth-split
ResNet: blocks held in shards, the strided first blocks held whole) or ``graphsage`` (tiled groups, on a graph).

1. An uninterrupted sharded run of 4 rounds (workdir ``full``).
2. The same run stopped by SIGTERM after round 2 (every rank signals itself), which commits a sharded checkpoint
   (each rank its own shard, no rank holding the model); then the same command again resumes from round 2.
3. Every rank's shard of the final checkpoints is bit-identical between the two runs, and no rank ever wrote a
   file holding the whole model.
4. A ledger claiming another rank count is refused on every rank with the launch to use.

Rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_mpi.py.
"""

import json
import pathlib
import sys

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

import istjax.launch.driver as driver
from istjax.launch.checkpoint import Checkpointer
from istjax.core import shard as shard_lib
from istjax.launch.config import ConfigError, default_config
from istjax.runtimes import mpi as M
from stopping import interrupted_after

ROOT = pathlib.Path(sys.argv[1])
FAMILY = sys.argv[2] if len(sys.argv) > 2 else "mlp"
N, ME = M.size(), M.rank()


def say(msg):
    if ME == 0:
        print(msg, flush=True)


def config():
    c = default_config()
    c.model = ml_collections.ConfigDict({"name": "mlp", "hidden": (16, 16), "batch_norm": True,
                                         "output_batch_norm": True})
    c.runtime.name, c.runtime.mode, c.sampler.name = "mpi", "sharded", "stratified"
    c.sampler.num_owners = N
    c.num_workers, c.local_steps, c.batch_size = 2 * N, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every, c.progress = 4, 2, 10, False
    c.target_accuracy = None
    if FAMILY == "resist":  # N * W = 4 partitioned blocks per stage, one of each owner's per worker
        c.algorithm.name, c.num_workers = "resist", N
        c.model = ml_collections.ConfigDict({"name": "depth_resnet", "stage_sizes": (N * N + 1, N * N + 1),
                                             "widths": (4, 8), "image_shape": (8, 8, 1), "partition_strided": True})
    elif FAMILY == "graphsage":
        c.data.name = "csbm"
        c.data.kwargs = ml_collections.ConfigDict({"num_nodes": 200, "num_classes": 3, "num_features": 8,
                                                      "num_val": 40, "num_test": 80, "seed": 1})
        c.model = ml_collections.ConfigDict({"name": "graphsage", "hidden": (4 * N, 4 * N), "layer_norm": True})
        c.num_workers, c.data.sharding = N, "shared"
    return c


driver.train_and_evaluate(config(), ROOT / "full")
say("OK uninterrupted sharded run: 4 rounds")

interrupted_after(driver, 2, lambda: driver.train_and_evaluate(config(), ROOT / "split"), 4)
ledger = json.loads((ROOT / "split" / "checkpoints" / "committed.json").read_text())
assert ledger == {"ranks": N, "steps": [2]}, ledger
say(f"OK SIGTERM after round 2: committed sharded checkpoint {ledger}")

driver.train_and_evaluate(config(), ROOT / "split")  # the same command resumes from the committed round 2


def shard(workdir, step):
    ck = Checkpointer(workdir / "checkpoints" / f"rank_{ME}", enabled=False)
    with ck:  # raw items: every array of this rank's shard, and the meta (digests included)
        return ck._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                                 meta=ocp.args.JsonRestore()))


full, split = shard(ROOT / "full", 4), shard(ROOT / "split", 4)
fa, sa = jax.tree.leaves(full["state"]), jax.tree.leaves(split["state"])
assert len(fa) == len(sa) and fa
for a, b in zip(fa, sa):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
assert full["meta"]["digests"] == split["meta"]["digests"]
say(f"OK resumed sharded run == uninterrupted run, bit for bit, on every rank's shard ({len(fa)} arrays each)")

# No file of either run holds a whole owned leaf: the rank's arrays are its shard, less than the whole model.
alg = driver.build(config()).algorithm
layout = M.sharded_layout(alg, N, ME)
full = jax.eval_shape(lambda k: {"params": alg.task.init(k), "model_state": alg.task.init_state(k)},
                      jax.random.key(0))
spec = {"params": alg.subnet.spec.leaves["params"], "model_state": alg.subnet.spec.leaves["model_state"]}
owned = [int(np.prod(x.shape)) for leaf, x in zip(jax.tree.leaves(spec), jax.tree.leaves(full))
         if layout.role(leaf) == shard_lib.OWNED]
sizes = [int(np.prod(np.shape(a))) for a in sa]
assert owned and max(owned) not in sizes, (max(owned), sorted(sizes))
assert sum(sizes) < sum(int(np.prod(x.shape)) for x in jax.tree.leaves(full)), sum(sizes)
say(f"OK {FAMILY}: a rank's checkpoint holds {sum(sizes)} elements, no whole owned leaf ({len(owned)} owned, the "
    f"largest {max(owned)} elements)")

M._world().Barrier()
if ME == 0:  # pretend the checkpoints came from a job with one more rank
    (ROOT / "split" / "checkpoints" / "committed.json").write_text(json.dumps({"ranks": N + 1, "steps": [4]}))
M._world().Barrier()
c = config()
c.num_rounds = 6
try:
    driver.train_and_evaluate(c, ROOT / "split", resume=True)
    raise AssertionError("a ledger of another rank count was accepted")
except ConfigError as e:
    assert f"written by {N + 1} MPI ranks" in str(e) and f"mpiexec -n {N + 1}" in str(e), e
say("OK a checkpoint of another rank count is refused, naming the launch to use")
M._world().Barrier()
say("ALL OK")
