"""Real datasets a user has prepared with tensorflow-datasets, loaded into memory as an `istjax.data.Dataset`.

tensorflow-datasets (TFDS) is the catalogue: a dataset prepared once (on a machine with network access) into a
``data_dir`` in the ``array_record`` file format is read here with ``tfds.data_source``, which needs neither
TensorFlow nor the network. Each split is read once, decoded, turned into features and standardised with the
*train* statistics, exactly like the shipped sources in `istjax.data`; training batches then come from memory
(`istjax.data.make_batch_fn`), never from disk again.

Supported names (`TFDS_DATASETS`):

========================  ===========================================  =====================================
name                      features                                     classes
========================  ===========================================  =====================================
``mnist``                 `[28, 28, 1] float32` pixels                 10
``fashion_mnist``         `[28, 28, 1] float32` pixels                 10
``cifar10``               `[32, 32, 3] float32` pixels                 10
``cifar100``              `[32, 32, 3] float32` pixels                 100 (the fine labels)
``speech_commands``       `[4096] float32`, the IST paper's log-mel    12 (TFDS's v0.02: 10 words, silence,
                          features (`istjax.data.audio.speech_features`:    unknown); the paper's 35-word set is
                          128 mels x 32 frames of a 1 s, 16 kHz clip)  not in TFDS
========================  ===========================================  =====================================

Preparing a dataset (once, on a machine with network access and TensorFlow)::

    pip install tensorflow tensorflow-datasets array_record
    python -c "import tensorflow_datasets as tfds; \\
        tfds.builder('mnist', data_dir='DATA_DIR', file_format='array_record').download_and_prepare()"

then copy ``DATA_DIR`` to this machine and pass ``data_dir=DATA_DIR`` (or set ``$TFDS_DATA_DIR``). A dataset
already prepared in the default ``tfrecord`` format converts in place with
``tfds convert_format --dataset_dir=DATA_DIR/mnist --out_file_format=array_record``.

TFDS's ``speech_commands`` builder needs TensorFlow even to *describe* its audio feature, so without TensorFlow
the prepared ``array_record`` shards are read directly (`read_example_shards`): every record is a serialised
``tf.train.Example`` (parsed with TFDS's bundled protobuf classes) holding the PCM samples under ``audio`` and the
class under ``label``.

Example::

    >>> ds = load_tfds("mnist", data_dir="~/tensorflow_datasets")  # doctest: +SKIP
    >>> ds.train_x.shape, ds.num_classes  # doctest: +SKIP
    ((60000, 28, 28, 1), 10)
"""

from __future__ import annotations

import functools
import glob
import json
import os
import pathlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

import istjax.data.audio as audio_lib
from istjax.core.errors import ArgError
from istjax.data.dataset import Dataset, standardize
from istjax.data.files import damaged_file

__all__ = [
    "TFDS_DATASETS",
    "DatasetNotPreparedError",
    "TfdsSpec",
    "default_data_dir",
    "load_tfds",
    "prepare_command",
    "read_example_shards",
]


class TfdsSpec(NamedTuple):
    """How one TFDS dataset becomes features.

    Fields:
      feature: the example field holding the input (``"image"``, ``"audio"``).
      label: the example field holding the integer class.
      train_split, test_split: TFDS split names used as train and test.
      kind: ``"image"`` (uint8 pixels kept in their `[H, W, C]` shape) or ``"speech"`` (PCM samples -> 4096
        log-mel features).
    """

    feature: str
    label: str
    train_split: str
    test_split: str
    kind: str


TFDS_DATASETS: dict[str, TfdsSpec] = {
    "mnist": TfdsSpec("image", "label", "train", "test", "image"),
    "fashion_mnist": TfdsSpec("image", "label", "train", "test", "image"),
    "cifar10": TfdsSpec("image", "label", "train", "test", "image"),
    "cifar100": TfdsSpec("image", "label", "train", "test", "image"),
    "speech_commands": TfdsSpec("audio", "label", "train", "test", "speech"),
}


class DatasetNotPreparedError(FileNotFoundError, ValueError):
    """The requested TFDS dataset is not prepared (in ``array_record`` format) in the data directory.

    Both a `FileNotFoundError` and a `ValueError`, so config validation that reports bad dataset arguments
    (``except ValueError``) reports this one too, with its preparation command.
    """


def default_data_dir() -> str:
    """``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets`` (TFDS's own default)."""
    return os.path.expanduser(os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets"))


def prepare_command(name: str, data_dir: str) -> str:
    """The one-liner that prepares ``name`` into ``data_dir`` in the format `load_tfds` reads."""
    return (f"python -c \"import tensorflow_datasets as tfds; tfds.builder({name!r}, data_dir={data_dir!r}, "
            f"file_format='array_record').download_and_prepare()\"")


def _prepared_versions(name: str, data_dir: str) -> list[tuple[pathlib.Path, str]]:
    """Every prepared `(version_dir, file_format)` of ``name`` under ``data_dir`` (any config), newest last."""
    root = pathlib.Path(data_dir) / name
    found = []
    for info in sorted(root.glob("**/dataset_info.json")):
        try:
            fmt = json.loads(info.read_text()).get("fileFormat", "tfrecord")
        except (OSError, ValueError):
            fmt = "unreadable"
        found.append((info.parent, fmt))
    return found


def _not_prepared(name: str, data_dir: str, cause: Optional[BaseException] = None) -> DatasetNotPreparedError:
    versions = _prepared_versions(name, data_dir)
    fix = (f"Prepare it once on a machine with network access and TensorFlow:\n    {prepare_command(name, data_dir)}"
           f"\nthen copy {data_dir!r} here (or pass data_dir=/ set $TFDS_DATA_DIR to where it is).")
    if versions:
        formats = ", ".join(f"{d} ({f})" for d, f in versions)
        what = (f"TFDS dataset {name!r} is prepared under data_dir={data_dir!r} but not in the array_record format "
                f"tfds.data_source reads: {formats}. Convert it in place with\n    tfds convert_format "
                f"--dataset_dir={os.path.join(data_dir, name)} --out_file_format=array_record\nor re-prepare it. ")
    else:
        what = f"TFDS dataset {name!r} is not prepared in data_dir={data_dir!r} (no {name}/.../dataset_info.json). "
    # Only a dataset that exists makes tfds's own words useful (for a missing one it talks about tfrecord files).
    detail = f"\n(tensorflow_datasets said: {type(cause).__name__}: {cause})" if versions and cause else ""
    return DatasetNotPreparedError(what + fix + detail)


def _damaged(name: str, data_dir: str, error: BaseException) -> ValueError:
    """A prepared dataset whose shards do not read whole (array_record's reader raises a RuntimeError, often with
    no message, for a shard cut short or not in its format)."""
    return damaged_file(f"TFDS dataset {name!r} in data_dir={data_dir!r}", "set of complete array_record shards",
                         error, f"Copy {data_dir!r} again, or re-prepare it:\n    {prepare_command(name, data_dir)}")


def _check_args(name: str, max_examples: Any, chunk_size: Any) -> None:
    if name not in TFDS_DATASETS:
        raise ArgError("name", name, f"name={name!r} is not a supported TFDS dataset;",
                       f"choose one of {sorted(TFDS_DATASETS)} (or add a TfdsSpec to istjax.data.tfds.TFDS_DATASETS).")
    if max_examples is not None and (not isinstance(max_examples, int) or isinstance(max_examples, bool)
                                     or max_examples < 1):
        raise ArgError("max_examples", max_examples,
                       f"max_examples={max_examples!r} must be a positive integer (examples per split) or None.", "")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ArgError("chunk_size", chunk_size, f"chunk_size={chunk_size!r} must be a positive integer.", "")


# ----------------------------------------------------------------------------------------------------------------
# Reading records
# ----------------------------------------------------------------------------------------------------------------


class _Split(NamedTuple):
    """A random-access split: ``get(indices) -> list of example dicts``, its length and class count."""

    get: Callable[[Sequence[int]], list[dict[str, Any]]]
    length: int
    num_classes: Optional[int]


def _tfds_split(name: str, split: str, data_dir: str) -> _Split:
    """``tfds.data_source`` of one split (never downloads)."""
    import tensorflow_datasets as tfds

    source = tfds.data_source(name, split=split, data_dir=data_dir, download=False, try_gcs=False)
    num_classes = None
    try:
        num_classes = int(source.dataset_info.features[TFDS_DATASETS[name].label].num_classes)
    except (AttributeError, KeyError, TypeError):
        pass

    def get(indices: Sequence[int]) -> list[dict[str, Any]]:
        try:
            return list(source.__getitems__(list(indices)))  # one batched read of the shards
        except TypeError:  # data sources without batched reads (e.g. tfds.testing.mock_data's)
            return [source[i] for i in indices]
        except RuntimeError as e:
            raise _damaged(name, data_dir, e) from None

    return _Split(get, len(source), num_classes)


def read_example_shards(paths: Sequence[str | os.PathLike]) -> Iterator[dict[str, np.ndarray]]:
    """Yields the records of ``array_record`` shards of serialised ``tf.train.Example``s as dicts of flat arrays.

    No TensorFlow: the protos are parsed with TFDS's bundled ``tf_example_pb2``. Integer features come back as
    `int64` arrays, floats as `float32`, bytes as lists of ``bytes``.
    """
    from array_record.python.array_record_data_source import ArrayRecordDataSource
    from tensorflow_datasets.proto import tf_example_pb2

    with ArrayRecordDataSource([str(p) for p in paths]) as source:
        for i in range(len(source)):
            example = tf_example_pb2.Example.FromString(source[i])
            out = {}
            for key, feature in example.features.feature.items():
                kind = feature.WhichOneof("kind")
                if kind == "int64_list":
                    out[key] = np.asarray(feature.int64_list.value, np.int64)
                elif kind == "float_list":
                    out[key] = np.asarray(feature.float_list.value, np.float32)
                elif kind == "bytes_list":
                    out[key] = list(feature.bytes_list.value)
            yield out


def _num_classes_from_features_json(version_dir: pathlib.Path, label: str) -> Optional[int]:
    """``numClasses`` of the ``label`` ClassLabel in a prepared dataset's ``features.json``, if recorded."""
    path = version_dir / "features.json"
    if not path.exists():
        return None
    try:
        tree = json.loads(path.read_text())
        features = tree["featuresDict"]["features"]
        return int(features[label]["classLabel"]["numClasses"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _shard_split(name: str, split: str, data_dir: str) -> _Split:
    """One split read straight from the newest array_record-prepared version (the no-TensorFlow path)."""
    versions = [(d, f) for d, f in _prepared_versions(name, data_dir) if f == "array_record"]
    if not versions:
        raise _not_prepared(name, data_dir)
    version_dir = max(versions, key=lambda v: _version_key(v[0].name))[0]
    paths = sorted(glob.glob(str(version_dir / f"{name}-{split}.array_record-*")))
    if not paths:
        raise DatasetNotPreparedError(f"TFDS dataset {name!r} at {version_dir} has no shards of split {split!r} "
                                      f"({name}-{split}.array_record-*); re-prepare it:\n    "
                                      f"{prepare_command(name, data_dir)}")
    try:
        records = list(read_example_shards(paths))  # parsed once; the caller keeps only features
    except RuntimeError as e:
        raise _damaged(name, data_dir, e) from None
    num_classes = _num_classes_from_features_json(version_dir, TFDS_DATASETS[name].label)
    return _Split(lambda idx: [records[i] for i in idx], len(records), num_classes)


def _version_key(v: str) -> tuple:
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        return (-1,)


def _open_split(name: str, split: str, data_dir: str) -> _Split:
    """``tfds.data_source``, with the missing-dataset and missing-TensorFlow cases turned into clear outcomes."""
    try:
        return _tfds_split(name, split, data_dir)
    except DatasetNotPreparedError:
        raise
    except Exception as e:  # noqa: BLE001 - tfds raises many types here; classify, then re-raise
        versions = _prepared_versions(name, data_dir)
        if not versions:
            raise _not_prepared(name, data_dir, e) from e
        if isinstance(e, ImportError) and "tensorflow" in str(e).lower():
            return _shard_split(name, split, data_dir)  # e.g. speech_commands' Audio feature needs TF
        if not any(f == "array_record" for _, f in versions):
            raise _not_prepared(name, data_dir, e) from e
        if isinstance(e, RuntimeError):
            raise _damaged(name, data_dir, e) from None
        raise


# ----------------------------------------------------------------------------------------------------------------
# Records -> features
# ----------------------------------------------------------------------------------------------------------------


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def _read_split(name: str, split: _Split, n: int, chunk_size: int,
                mel_config: audio_lib.MelConfig) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` examples of ``split`` as `(x: [n, ...] float32 raw features, y: [n] int64)`."""
    spec = TFDS_DATASETS[name]
    xs, ys = [], []
    featurize = _speech_featurizer(mel_config, rows=min(n, chunk_size)) if spec.kind == "speech" else None
    for idx in _chunks(n, chunk_size):
        records = split.get(idx)
        ys.append(np.asarray([np.asarray(r[spec.label]).reshape(()) for r in records], np.int64))
        if spec.kind == "image":
            xs.append(np.stack([np.asarray(r[spec.feature]) for r in records]).astype(np.float32))
        else:
            xs.append(featurize([np.asarray(r[spec.feature]).reshape(-1) for r in records]))
    if not xs:
        raise ValueError(f"TFDS dataset {name!r}: the split holds no examples.")
    return np.concatenate(xs), np.concatenate(ys)


def _speech_featurizer(config: audio_lib.MelConfig, rows: int) -> Callable[[list[np.ndarray]], np.ndarray]:
    """``[n <= rows clips of int PCM samples] -> [n, n_mels * num_frames] float32`` log-mel features.

    Every chunk is zero-padded to ``rows`` clips so the jitted pipeline compiles once per split.
    """
    import jax

    features = jax.jit(lambda pcm: audio_lib.speech_features(audio_lib.int16_to_float(pcm), config))

    def run(clips: list[np.ndarray]) -> np.ndarray:
        pcm = np.zeros((rows, config.num_samples), np.int16)  # pad short clips, crop long ones
        for i, c in enumerate(clips):
            c = c[: config.num_samples]
            pcm[i, : len(c)] = c
        return np.asarray(features(pcm), np.float32)[: len(clips)]

    return run


def load_tfds(name: str, *, data_dir: Optional[str] = None, max_examples: Optional[int] = None,
              mel_config: audio_lib.MelConfig = audio_lib.PAPER, chunk_size: int = 1024) -> Dataset:
    """Loads a prepared TFDS dataset into memory as a standardised `istjax.data.Dataset`.

    Args:
      name: one of `TFDS_DATASETS` (``"mnist"``, ``"fashion_mnist"``, ``"cifar10"``, ``"cifar100"``,
        ``"speech_commands"``).
      data_dir: where the dataset was prepared (default `default_data_dir()`: ``$TFDS_DATA_DIR`` or
        ``~/tensorflow_datasets``).
      max_examples: keep only the first this-many examples of each split (quick runs); None keeps all.
      mel_config: speech_commands only: the log-mel settings (default: the paper's 128 x 32 = 4096 features).
      chunk_size: records read (and, for speech, featurised) per batch.

    Returns:
      ``Dataset(name, train_x, train_y, test_x, test_y, num_classes)``: ``train_x: [N, ...] float32``
      standardised per feature with train statistics (test uses the same statistics), ``train_y: [N] int32``;
      arrays read-only. Results are cached in memory per argument set (`load_tfds.cache_clear()` empties it).

    Raises:
      ValueError: an unsupported ``name`` or bad argument.
      DatasetNotPreparedError: the dataset is not in ``data_dir`` as array_record; the message holds the command
        that prepares it.
    """
    _check_args(name, max_examples, chunk_size)
    if not isinstance(mel_config, audio_lib.MelConfig):
        raise ArgError("mel_config", mel_config, f"mel_config={mel_config!r} must be an istjax.data.audio.MelConfig.",
                       "")
    audio_lib._validate(mel_config)  # bad settings fail here, before any reading
    data_dir = os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))
    return _load_cached(name, data_dir, max_examples, mel_config, chunk_size)


@functools.lru_cache(maxsize=4)
def _load_cached(name: str, data_dir: str, max_examples: Optional[int], mel_config: audio_lib.MelConfig,
                 chunk_size: int) -> Dataset:
    spec = TFDS_DATASETS[name]
    splits = {}
    num_classes = None
    for role, split_name in (("train", spec.train_split), ("test", spec.test_split)):
        split = _open_split(name, split_name, data_dir)
        n = split.length if max_examples is None else min(split.length, max_examples)
        if n < 1:
            raise ValueError(f"TFDS dataset {name!r} split {split_name!r} in {data_dir!r} has no examples.")
        splits[role] = _read_split(name, split, n, chunk_size, mel_config)
        num_classes = num_classes or split.num_classes
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    if num_classes is None:
        num_classes = int(max(train_y.max(), test_y.max())) + 1
    for role, y in (("train", train_y), ("test", test_y)):
        if y.min() < 0 or y.max() >= num_classes:
            raise ValueError(f"TFDS dataset {name!r}: {role} labels span [{y.min()}, {y.max()}], outside "
                             f"[0, num_classes={num_classes}).")
    train_x, test_x = standardize(train_x, test_x)
    arrays = [train_x, train_y.astype(np.int32), test_x, test_y.astype(np.int32)]
    for a in arrays:
        a.flags.writeable = False
    return Dataset(f"tfds:{name}", *arrays, num_classes=int(num_classes))


load_tfds.cache_clear = _load_cached.cache_clear  # type: ignore[attr-defined]
