"""istjax: Independent Subnetwork Training (IST, ResIST, GIST) in JAX and Flax.

IST: Yuan et al., "Distributed Learning of Deep Neural Networks using Independent Subnet Training",
arXiv 1910.02120. Import everything from here: ``import istjax``.

The package's folders tell its architecture:

* ``istjax.core``: the partition algebra (spec, partition samplers, extract/merge, byte accounting), the round
  state and the `Task` interface.
* ``istjax.algorithms``: IST and the baselines as compositions of the core, and the plain reference rounds.
* ``istjax.runtimes``: where workers run (simulate, devices, MPI).
* ``istjax.models``: Flax modules by name, each with its partition rules.
* ``istjax.data``: loaders, the dataset registry and the batching plan.
* ``istjax.graph``: the sparse `Graph`, its aggregation ops, graph clusters and the GIST task.
* ``istjax.xmc``: extreme multi-label classification: ranking metrics (P@k, nDCG@k, PSP@k), blockwise top-k.
* ``istjax.launch``: config, driver, checkpoints, metrics, plots, comparisons and the CLI.
* ``istjax.theory``: the convergence toolkit.
"""

from istjax.algorithms.base import Algorithm as Algorithm
from istjax.algorithms.base import local_train as local_train
from istjax.algorithms.ist import ist as ist
from istjax.algorithms.replicated import data_parallel as data_parallel
from istjax.algorithms.tensor import tensor_parallel as tensor_parallel
from istjax.algorithms.replicated import local_sgd as local_sgd
from istjax.algorithms.replicated import diloco as diloco
from istjax.algorithms.federated import fedavg as fedavg
from istjax.algorithms.federated import fedist as fedist
from istjax.algorithms.federated import fedsgd as fedsgd
from istjax.algorithms.resist import resist as resist
from istjax.algorithms.consensus import admm as admm
from istjax.algorithms.codistill import codistillation as codistillation
from istjax.algorithms.dynamic import dynamic_averaging as dynamic_averaging
from istjax.core.comm import CommBytes as CommBytes
from istjax.core.errors import ArgError as ArgError
from istjax.core.partition import Partition as Partition
from istjax.core.partition import Sampler as Sampler
from istjax.core.partition import nested as nested
from istjax.core.partition import overlapping as overlapping
from istjax.core.partition import per_group as per_group
from istjax.core.partition import stratified as stratified
from istjax.core.partition import uneven as uneven
from istjax.core.partition import uniform as uniform
from istjax.core.spec import GroupAxis as GroupAxis
from istjax.core.spec import LeafSpec as LeafSpec
from istjax.core.spec import SubnetSpec as SubnetSpec
from istjax.core.spec import spec_for_state as spec_for_state
from istjax.core.spec import spec_from_logical as spec_from_logical
from istjax.core.spec import spec_from_table as spec_from_table
from istjax.core.state import WORKERS as WORKERS
from istjax.core.state import NonFiniteLoss as NonFiniteLoss
from istjax.core.state import check_finite as check_finite
from istjax.core.state import RoundPlan as RoundPlan
from istjax.core.state import TrainState as TrainState
from istjax.core.state import WorkerState as WorkerState
from istjax.core.subnet import extract as extract
from istjax.core.subnet import extract_tree as extract_tree
from istjax.core.subnet import merge as merge
from istjax.core.subnet import merge_tree as merge_tree
from istjax.core.task import OwnerPass as OwnerPass
from istjax.core.task import Task as Task
from istjax.core.task import classifier as classifier

__version__ = "0.2.0"

# The driver pulls in orbax, tensorboardX and tqdm; load it only when asked for.
_LAZY = {"train_and_evaluate": ("istjax.launch.driver", "train_and_evaluate"),
         "default_config": ("istjax.launch.config", "default_config")}

# `istjax.<name>` for every subpackage, without a separate import (`istjax.data.load_dataset(...)`).
_SUBMODULES = {name: f"istjax.{name}" for name in
               ("algorithms", "core", "data", "graph", "launch", "models", "runtimes", "theory", "xmc")}


def __getattr__(name):
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    raise AttributeError(f"module 'istjax' has no attribute {name!r}")


__all__ = [
    "WORKERS",
    "Algorithm",
    "ArgError",
    "CommBytes",
    "GroupAxis",
    "LeafSpec",
    "NonFiniteLoss",
    "Partition",
    "RoundPlan",
    "Sampler",
    "SubnetSpec",
    "Task",
    "OwnerPass",
    "TrainState",
    "WorkerState",
    "admm",
    "check_finite",
    "classifier",
    "codistillation",
    "data_parallel",
    "default_config",
    "diloco",
    "dynamic_averaging",
    "extract",
    "fedavg",
    "fedist",
    "fedsgd",
    "extract_tree",
    "ist",
    "local_sgd",
    "local_train",
    "merge",
    "merge_tree",
    "nested",
    "overlapping",
    "per_group",
    "resist",
    "spec_for_state",
    "spec_from_logical",
    "spec_from_table",
    "stratified",
    "tensor_parallel",
    "train_and_evaluate",
    "uneven",
    "uniform",
]
