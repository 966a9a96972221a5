"""The tensorflow-datasets path: mock data end to end, a prepared speech_commands on disk, clear errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

tfds = pytest.importorskip("tensorflow_datasets")
pytest.importorskip("array_record")

import istjax  # noqa: E402
from istjax.data import audio
from istjax.data import tfds as tfds_data  # noqa: E402
from istjax.data import Dataset, make_batch_fn, standardize  # noqa: E402
from istjax.models.mlp import MLP  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_cache():
    tfds_data.load_tfds.cache_clear()
    yield
    tfds_data.load_tfds.cache_clear()


def test_mock_mnist_is_a_standardised_dataset(tmp_path):
    with tfds.testing.mock_data(num_examples=64):
        ds = tfds_data.load_tfds("mnist", data_dir=str(tmp_path))
        raw = tfds.data_source("mnist", split="train", data_dir=str(tmp_path))
        raw_x = np.stack([raw[i]["image"] for i in range(len(raw))]).astype(np.float32)
        raw_y = np.array([raw[i]["label"] for i in range(len(raw))])
        raw_test = tfds.data_source("mnist", split="test", data_dir=str(tmp_path))
        raw_tx = np.stack([raw_test[i]["image"] for i in range(len(raw_test))]).astype(np.float32)
    assert isinstance(ds, Dataset) and ds.name == "tfds:mnist" and ds.num_classes == 10
    assert ds.train_x.shape == (64, 28, 28, 1) and ds.train_x.dtype == np.float32
    assert ds.train_y.dtype == np.int32 and not ds.train_x.flags.writeable
    np.testing.assert_array_equal(ds.train_y, raw_y)
    want_train, want_test = standardize(raw_x, raw_tx)  # train statistics for both splits
    np.testing.assert_allclose(ds.train_x, want_train, atol=1e-5)
    np.testing.assert_allclose(ds.test_x, want_test, atol=1e-5)


@pytest.mark.parametrize("name,shape,classes", [("fashion_mnist", (28, 28, 1), 10), ("cifar10", (32, 32, 3), 10),
                                                 ("cifar100", (32, 32, 3), 100)])
def test_mock_other_images_and_max_examples(tmp_path, name, shape, classes):
    with tfds.testing.mock_data(num_examples=30):
        ds = tfds_data.load_tfds(name, data_dir=str(tmp_path), max_examples=12, chunk_size=5)
    assert ds.train_x.shape == (12, *shape) and ds.test_x.shape == (12, *shape) and ds.num_classes == classes
    assert ds.train_y.min() >= 0 and ds.train_y.max() < classes


@pytest.mark.slow
def test_mock_cifar10_trains_a_resnet_with_channel_ist_from_a_config(tmp_path):
    """The CIFAR path a user with prepared data takes: ``dataset='tfds:cifar10'``, a ResNet with channels
    partitioned, augmentation on; runs through the driver and evaluates with running BatchNorm statistics."""
    import ml_collections

    from istjax.launch import config as config_lib
    from istjax.launch.driver import train_and_evaluate

    c = config_lib.default_config()
    c.data.name, c.data.kwargs = "tfds:cifar10", ml_collections.ConfigDict({"data_dir": str(tmp_path / "data")})
    c.model = ml_collections.ConfigDict({"name": "resnet", "stage_sizes": (1, 1), "widths": (8, 16)})
    c.num_workers, c.local_steps, c.batch_size, c.num_rounds, c.eval_every = 2, 2, 8, 3, 3
    c.optimizer, c.learning_rate, c.data.augment, c.checkpoint_every = "momentum", 0.05, True, 3
    with tfds.testing.mock_data(num_examples=300):
        summary = train_and_evaluate(c, tmp_path / "run")
    assert summary["rounds"] == 3 and summary["algorithm"] == "ist"
    assert 0.0 <= summary["test_accuracy"] <= 1.0 and np.isfinite(summary["test_loss"])


def test_mock_mnist_trains_with_ist(tmp_path):
    """One short IST run on the tfds path through the core API: the full model's training loss goes down."""
    with tfds.testing.mock_data(num_examples=64):
        ds = tfds_data.load_tfds("mnist", data_dir=str(tmp_path))
    model = MLP(hidden=(16,), num_classes=ds.num_classes)
    task = istjax.classifier(model, ds, MLP.rules(1))
    algo = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=4)
    batches = make_batch_fn(ds, num_workers=2, local_steps=4, batch_size=8, seed=0)
    loss_fn = jax.jit(task.loss_fn(None))
    full = {"x": jnp.asarray(ds.train_x), "y": jnp.asarray(ds.train_y)}
    state = algo.init(jax.random.key(0))
    before = float(loss_fn(state.params, full)[0])
    step = jax.jit(lambda s: algo.round(s, batches.apply(batches.data, s.round)))
    for _ in range(10):
        state, metrics = step(state)
    assert int(state.round) == 10 and np.isfinite(float(metrics["train_loss"]))
    assert float(loss_fn(state.params, full)[0]) < before


def test_missing_dataset_says_how_to_prepare(tmp_path):
    with pytest.raises(tfds_data.DatasetNotPreparedError) as err:
        tfds_data.load_tfds("mnist", data_dir=str(tmp_path))
    msg = str(err.value)
    assert "'mnist' is not prepared" in msg and "download_and_prepare()" in msg and str(tmp_path) in msg
    assert "file_format='array_record'" in msg


def test_tfrecord_prepared_dataset_says_how_to_convert(tmp_path):
    version = tmp_path / "mnist" / "3.0.1"
    version.mkdir(parents=True)
    (version / "dataset_info.json").write_text(json.dumps({"name": "mnist", "fileFormat": "tfrecord"}))
    with pytest.raises(tfds_data.DatasetNotPreparedError, match="tfds convert_format"):
        tfds_data.load_tfds("mnist", data_dir=str(tmp_path))


def test_bad_arguments():
    with pytest.raises(ValueError, match="name='imagenet'.*choose one of"):
        tfds_data.load_tfds("imagenet")
    with pytest.raises(ValueError, match="max_examples=0"):
        tfds_data.load_tfds("mnist", max_examples=0)


# ------------------------------------------------------------------------------------------------------------------
# speech_commands: TFDS's builder needs TensorFlow, so its prepared shards are read directly. Write a tiny prepared
# dataset the way TFDS lays it out (array_record shards of tf.train.Example with int PCM `audio` and `label`).
# ------------------------------------------------------------------------------------------------------------------


def _write_shard(path, clips, labels):
    from array_record.python.array_record_module import ArrayRecordWriter
    from tensorflow_datasets.proto import tf_example_pb2

    writer = ArrayRecordWriter(str(path), "group_size:1")
    for clip, label in zip(clips, labels):
        ex = tf_example_pb2.Example()
        ex.features.feature["audio"].int64_list.value.extend(clip.astype(np.int64).tolist())
        ex.features.feature["label"].int64_list.value.append(int(label))
        writer.write(ex.SerializeToString())
    writer.close()


def _clip(freq, n):
    t = np.arange(n) / 16000
    return np.round(8000 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def test_prepared_speech_commands_gives_paper_features(tmp_path):
    version = tmp_path / "speech_commands" / "0.0.3"
    version.mkdir(parents=True)
    (version / "dataset_info.json").write_text(json.dumps({"name": "speech_commands", "fileFormat": "array_record"}))
    (version / "features.json").write_text(json.dumps({"featuresDict": {"features": {
        "audio": {"pythonClassName": "tensorflow_datasets.core.features.audio_feature.Audio"},
        "label": {"classLabel": {"numClasses": "12"}}}}}))
    train = [_clip(300 + 100 * i, 16000 if i % 2 else 12000) for i in range(6)]  # short clips are padded
    test = [_clip(500, 16000), _clip(900, 17000)]  # a long one is cropped
    _write_shard(version / "speech_commands-train.array_record-00000-of-00002", train[:4], [0, 1, 2, 3])
    _write_shard(version / "speech_commands-train.array_record-00001-of-00002", train[4:], [4, 11])
    _write_shard(version / "speech_commands-test.array_record-00000-of-00001", test, [2, 5])

    ds = tfds_data.load_tfds("speech_commands", data_dir=str(tmp_path), chunk_size=4)
    assert ds.train_x.shape == (6, 4096) and ds.test_x.shape == (2, 4096) and ds.num_classes == 12
    np.testing.assert_array_equal(ds.train_y, [0, 1, 2, 3, 4, 11])
    np.testing.assert_array_equal(ds.test_y, [2, 5])

    def feats(clips):
        padded = np.stack([np.pad(c[:16000], (0, max(0, 16000 - len(c)))) for c in clips]) / 32768.0
        return np.asarray(audio.speech_features(padded.astype(np.float32)))

    want_train, want_test = standardize(feats(train), feats(test))
    np.testing.assert_allclose(ds.train_x, want_train, atol=2e-3)
    np.testing.assert_allclose(ds.test_x, want_test, atol=2e-3)
