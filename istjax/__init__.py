"""istjax: Independent Subnetwork Training (IST, ResIST, GIST) in JAX and Flax.

IST: Yuan et al., "Distributed Learning of Deep Neural Networks using Independent Subnet Training",
arXiv 1910.02120. Import everything from here: ``import istjax``.
"""

from istjax.algorithms.base import WORKERS as WORKERS
from istjax.algorithms.base import Algorithm as Algorithm
from istjax.algorithms.base import RoundPlan as RoundPlan
from istjax.algorithms.base import TrainState as TrainState
from istjax.algorithms.base import WorkerState as WorkerState
from istjax.algorithms.base import data_parallel as data_parallel
from istjax.algorithms.base import ist as ist
from istjax.algorithms.base import local_sgd as local_sgd
from istjax.algorithms.base import local_train as local_train
from istjax.core.comm import CommBytes as CommBytes
from istjax.core.partition import Partition as Partition
from istjax.core.partition import Sampler as Sampler
from istjax.core.partition import nested as nested
from istjax.core.partition import overlapping as overlapping
from istjax.core.partition import stratified as stratified
from istjax.core.partition import uneven as uneven
from istjax.core.partition import uniform as uniform
from istjax.core.spec import GroupAxis as GroupAxis
from istjax.core.spec import LeafSpec as LeafSpec
from istjax.core.spec import SubnetSpec as SubnetSpec
from istjax.core.spec import spec_from_logical as spec_from_logical
from istjax.core.spec import spec_from_table as spec_from_table
from istjax.core.subnet import extract as extract
from istjax.core.subnet import extract_tree as extract_tree
from istjax.core.subnet import merge as merge
from istjax.core.subnet import merge_tree as merge_tree
from istjax.core.task import Task as Task
from istjax.core.task import classifier as classifier

__version__ = "0.1.0"

# The driver pulls in orbax, tensorboardX and tqdm; load it only when asked for.
_LAZY = {"train_and_evaluate": ("istjax.experiment.driver", "train_and_evaluate"),
         "default_config": ("istjax.experiment.config", "default_config")}


_SUBMODULES = ("audio", "backends", "checkpoint", "comm", "compare", "config", "data", "distributed", "metrics",
               "models", "partition", "plot", "reference", "spec", "subnet", "task", "tfds_data", "theory", "train")


def __getattr__(name):
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBMODULES:  # `istjax.data.load_dataset(...)` without a separate import
        return importlib.import_module(f"istjax.{name}")
    raise AttributeError(f"module 'istjax' has no attribute {name!r}")


__all__ = [
    "WORKERS",
    "Algorithm",
    "CommBytes",
    "GroupAxis",
    "LeafSpec",
    "Partition",
    "RoundPlan",
    "Sampler",
    "SubnetSpec",
    "Task",
    "TrainState",
    "WorkerState",
    "classifier",
    "data_parallel",
    "default_config",
    "extract",
    "extract_tree",
    "ist",
    "local_sgd",
    "local_train",
    "merge",
    "merge_tree",
    "nested",
    "overlapping",
    "spec_from_logical",
    "spec_from_table",
    "stratified",
    "train_and_evaluate",
    "uneven",
    "uniform",
]
