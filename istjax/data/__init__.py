"""Data: loaders, the dataset registry and the per-worker batching plan.

Modules:

* ``arrays``: your own data: `from_arrays` (a Dataset of your arrays: split, standardised, checked) and
  `check_dataset` (the checks a `data.module` function's result passes).
* ``dataset``: `Dataset`, the container every loader returns, `standardize` (train statistics), `Rows` (a
  training split standardised row by row when indexed, as file-backed loaders return it) and `finalise`, what
  every loader ends with.
* ``builtin``: the loaders that ship with the install: `load_digits`, `load_mnist1d`, `load_synthetic_speech`.
* ``images``: image datasets from their published files: `load_fashion_mnist` (Debian's IDX files).
* ``registry``: `DATASETS`, `register_dataset(name, loader)` (a loader of yours by name) and
  `load_dataset(name, **kwargs)`, which also routes `tfds:<name>` to `tfds`.
* ``batching``: the on-device per-worker sampling plan: `make_index_fn`, `make_batch_fn`, `eval_batches`.
* ``augment``: on-device image augmentation (random crop with zero padding, random flip): `augment.augment`,
  `augment_batches` (a round's `[W, K, B, H, W, C]` batch, keys from (seed, round, worker, step)).
  `istjax.data.augment` stays the module; the function is `istjax.data.augment.augment`.
* ``tfds``: real datasets prepared with tensorflow-datasets, loaded into memory (`load_tfds`).
* ``audio``: log-mel speech features in JAX (`speech_features`), as the IST paper computed them.
* ``extreme``: extreme multi-label classification (XMC) data, one job to a module: the Extreme Classification
  Repository's text format (``extreme.text_format``: `read_xmc`, cached), a folder of such files
  (``extreme.folder``: `read_xmc_folder`), padded sparse batches (``extreme.batches``: `pack_rows`), a generator
  (``extreme.synthetic``: `synthetic_xmc`); `load_xmc` (`xmc-debian-deps`, `xmc-synthetic`) and the training views
  (`as_dataset`: `(id, value)` pairs, label sets) in `DATASETS` as `xmc_debian_deps`, `xmc_synthetic` and `xmc`
  (your own folder).
* ``files``: what every loader shares: `DataNotFoundError`, the data folder (`data_folder`: ``data_dir`` or
  ``$ISTJAX_DATA_DIR``), the damaged-file error and the on-disk cache.
* ``tuning``: the tuning split, the last fraction of the training examples evaluated in place of the reported split
  (`tuning_split`, ``data.tuning_fraction``), what a study chooses its settings on.
* ``ngram``: character n-gram count tables, the trivial baselines of a language model (`fit_ngram`,
  `ngram_baselines`).
* ``clients``: federated clients as data: `ClientSplit` (each client's training examples, with its seed, checked
  disjoint where made, recorded by `ClientSplit.to_record`) and the splits `iid`, `dirichlet` (label skew),
  `shards` (McMahan et al.'s pathological split) and `by_group` (natural clients).
* ``natural_clients``: Shakespeare's speaking roles (`shakespeare_roles`: each role's lines, split by position into
  train and test) and FSDD's speakers (`fsdd_speakers`); the roles as a data set (`load_shakespeare_roles`,
  ``shakespeare_roles``: each window its role's client) and `natural_split`, a data set's own clients
  (``Dataset.train_clients``: these, FSDD's speakers) as a `ClientSplit`. Figures of a split:
  `istjax.launch.plot_clients`.
* ``client_batches``: each federated round's clients and their local work: `client_sampler` (a `ClientSampler`: M
  of the N clients a round, a pure function of (seed, round), and the server's weights by example count) and
  `make_client_batch_fn` (a `ClientBatchFn`: the sampled clients' E epochs at batch B as ``[M, K, B]`` steps, with
  per-example weights, 0 on the fill that pads a smaller client to the largest one's K steps).
* ``drift``: concept drift, the labels permuted from a stated round on: `Drift` and `drifting` (a batch function
  whose labels follow it; ``data.drift_round`` in a config).
"""

from istjax.data.arrays import check_dataset as check_dataset
from istjax.data.arrays import from_arrays as from_arrays
from istjax.data.augment import augment_batches as augment_batches
from istjax.data.augment import augmented as augmented
from istjax.data.augment import with_step_keys as with_step_keys
from istjax.data.batching import SHARDINGS as SHARDINGS
from istjax.data.batching import Batch as Batch
from istjax.data.batching import BatchFn as BatchFn
from istjax.data.batching import eval_batches as eval_batches
from istjax.data.batching import make_batch_fn as make_batch_fn
from istjax.data.batching import make_index_fn as make_index_fn
from istjax.data.builtin import load_digits as load_digits
from istjax.data.builtin import load_mnist1d as load_mnist1d
from istjax.data.builtin import load_synthetic_speech as load_synthetic_speech
from istjax.data.client_batches import ClientBatchFn as ClientBatchFn
from istjax.data.client_batches import ClientSampler as ClientSampler
from istjax.data.client_batches import client_sampler as client_sampler
from istjax.data.client_batches import make_client_batch_fn as make_client_batch_fn
from istjax.data.clients import ClientSplit as ClientSplit
from istjax.data.dataset import Dataset as Dataset
from istjax.data.dataset import Rows as Rows
from istjax.data.dataset import standardize as standardize
from istjax.data.drift import Drift as Drift
from istjax.data.drift import drifting as drifting
from istjax.data.files import DataNotFoundError as DataNotFoundError
from istjax.data.images import load_fashion_mnist as load_fashion_mnist
from istjax.data.registry import DATASETS as DATASETS
from istjax.data.registry import load_dataset as load_dataset
from istjax.data.registry import load_module_dataset as load_module_dataset
from istjax.data.registry import register_dataset as register_dataset

# Private names the tests reach as `istjax.data.X` (key tags of the sampling contract, the mnist1d caches).
from istjax.core.streams import SHARD_TAG as _SHARD_TAG
from istjax.core.streams import STREAM_TAG as _STREAM_TAG
from istjax.data.builtin import _mnist1d_raw as _mnist1d_raw
from istjax.data.builtin import _mnist1d_standardised as _mnist1d_standardised

__all__ = [
    "DATASETS",
    "SHARDINGS",
    "Batch",
    "BatchFn",
    "DataNotFoundError",
    "Dataset",
    "Drift",
    "drifting",
    "augment_batches",
    "check_dataset",
    "ClientBatchFn",
    "ClientSampler",
    "ClientSplit",
    "client_sampler",
    "make_client_batch_fn",
    "from_arrays",
    "load_module_dataset",
    "register_dataset",
    "augmented",
    "with_step_keys",
    "eval_batches",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist1d",
    "load_synthetic_speech",
    "make_batch_fn",
    "make_index_fn",
    "Rows",
    "standardize",
]
