"""Fashion-MNIST from Debian's IDX files (istjax.data.images) and on-device image augmentation (istjax.data.augment)."""

from __future__ import annotations

import gzip
import os
import pathlib
import shutil

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from conftest import persistent_compilation_cache

from istjax import data as D
from istjax.data import augment as A
from istjax.data import images as I
from istjax.data.dataset import Rows

FILES = I.FASHION_MNIST_FILES


# --------------------------------------------------------------------------
# The real files (Debian's dataset-fashion-mnist)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def debian_dir() -> pathlib.Path:
    """Debian's folder; skipped only where the files are absent and apt cannot install them here."""
    d = pathlib.Path(I.FASHION_MNIST_DEFAULT_DIR)
    if all((d / f).is_file() for f in FILES.values()):
        return d
    can_apt = shutil.which("apt-get") is not None and hasattr(os, "geteuid") and os.geteuid() == 0
    if can_apt:
        pytest.fail(f"{d} lacks the Fashion-MNIST IDX files although apt-get is available as root: run "
                    f"scripts/setup_env.sh (it installs dataset-fashion-mnist) or "
                    f"`apt-get install dataset-fashion-mnist`.")
    pytest.skip(f"Fashion-MNIST IDX files absent from {d} and apt-get unavailable (not root or no apt-get); "
                f"install dataset-fashion-mnist as root to run these tests.")


def _moments(x: np.ndarray, chunk: int = 10000) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std of `x: [N, ...]` in float64, chunk by chunk (two passes)."""
    flat = x.reshape(len(x), -1)
    mean = sum(flat[i:i + chunk].sum(0, dtype=np.float64) for i in range(0, len(flat), chunk)) / len(flat)
    var = sum(((flat[i:i + chunk] - mean) ** 2).sum(0) for i in range(0, len(flat), chunk)) / len(flat)
    return mean, np.sqrt(var)


def test_real_files_full_load(debian_dir):
    ds = I.load_fashion_mnist(data_dir=debian_dir)
    assert ds.name == "fashion_mnist" and ds.num_classes == 10
    assert ds.train_x.shape == (60000, 28, 28, 1) and ds.test_x.shape == (10000, 28, 28, 1)
    assert ds.train_y.shape == (60000,) and ds.test_y.shape == (10000,)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int32 and ds.test_y.dtype == np.int32
    assert isinstance(ds.train_x, Rows)  # bytes until indexed: a process converts only the rows it reads
    assert not ds.train_x[:2].flags.writeable and not ds.train_y.flags.writeable
    # 10 balanced classes, labels in [0, 10)
    np.testing.assert_array_equal(np.bincount(ds.train_y, minlength=10), np.full(10, 6000))
    np.testing.assert_array_equal(np.bincount(ds.test_y, minlength=10), np.full(10, 1000))
    # the published order: the first training images are an ankle boot and three T-shirts/tops
    np.testing.assert_array_equal(ds.train_y[:10], [9, 0, 0, 3, 0, 2, 7, 2, 5, 5])
    # standardised per pixel with train statistics
    x = np.asarray(ds.train_x)
    mean, std = _moments(x)
    np.testing.assert_allclose(mean, 0.0, atol=1e-4)
    assert np.all((np.abs(std - 1.0) < 1e-3) | (std < 1e-6))
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std()) - 1.0) < 1e-3
    rows = [59999, 3, 17, 3]  # any rows, in any order, repeated: equal to the whole split's
    np.testing.assert_array_equal(ds.train_x[rows], x[rows])
    np.testing.assert_array_equal(ds.train_x[7], x[7])
    np.testing.assert_array_equal(ds.train_x[10:20, 3], x[10:20, 3])
    assert abs(float(ds.test_x.mean())) < 0.05  # the same statistics fit the test split closely
    assert np.isfinite(ds.test_x).all()
    flat = I.load_fashion_mnist(data_dir=debian_dir, flatten=True)
    assert flat.train_x.shape == (60000, 784) and flat.test_x.shape == (10000, 784)
    np.testing.assert_array_equal(flat.train_x, x.reshape(60000, 784))
    assert not flat.train_x[:1].flags.writeable


def test_real_files_match_an_independent_reading(debian_dir):
    """Pixel 0..783 of image 0 (raw bytes after the 16-byte header) against the loader, undoing standardisation."""
    with gzip.open(debian_dir / FILES["train_images"]) as f:
        head = f.read(16 + 784 * 3)
    assert int.from_bytes(head[:4], "big") == 0x803 and int.from_bytes(head[4:8], "big") == 60000
    raw = np.frombuffer(head[16:], np.uint8).reshape(3, 28, 28).astype(np.float64) / 255
    ds = I.load_fashion_mnist(data_dir=debian_dir, num_train=3, num_test=1)
    mean = raw.mean(0)
    std = raw.std(0)
    expected = np.where(std > 1e-8, (raw - mean) / np.where(std > 1e-8, std, 1.0), raw - mean)
    np.testing.assert_allclose(ds.train_x[..., 0], expected, atol=1e-5)


def test_real_files_subsets(debian_dir):
    full = I.load_fashion_mnist(data_dir=debian_dir)
    sub = I.load_fashion_mnist(data_dir=debian_dir, num_train=1000, num_test=200)
    assert sub.train_x.shape == (1000, 28, 28, 1) and sub.test_x.shape == (200, 28, 28, 1)
    np.testing.assert_array_equal(sub.train_y, full.train_y[:1000])  # the first N, in file order
    np.testing.assert_array_equal(sub.test_y, full.test_y[:200])
    mean, std = _moments(np.asarray(sub.train_x))  # standardised with the subset's own statistics
    np.testing.assert_allclose(mean, 0.0, atol=1e-4)
    assert np.all((np.abs(std - 1.0) < 1e-3) | (std < 1e-6))
    assert set(np.unique(sub.train_y)) == set(range(10))
    with pytest.raises(ValueError, match=r"num_train=60001 is more than the 60000 .*train-images"):
        I.load_fashion_mnist(data_dir=debian_dir, num_train=60001)


def test_load_dataset_fashion_mnist(debian_dir, monkeypatch):
    monkeypatch.delenv("ISTJAX_DATA_DIR", raising=False)  # the default folder, Debian's
    assert "fashion_mnist" in D.DATASETS
    ds = D.load_dataset("fashion_mnist", num_train=500, num_test=100)
    assert ds.train_x.shape == (500, 28, 28, 1) and ds.test_x.shape == (100, 28, 28, 1)
    assert ds.train_y.min() >= 0 and ds.train_y.max() < 10
    assert D.load_dataset("fashion_mnist", num_train=500, num_test=100, flatten=True).train_x.shape == (500, 784)
    with pytest.raises(ValueError, match="bogus") as info:
        D.load_dataset("fashion_mnist", bogus=1)
    assert "data_dir" in str(info.value) and "num_train" in str(info.value)


# --------------------------------------------------------------------------
# Synthetic IDX files: the loader's checks
# --------------------------------------------------------------------------


def _idx_bytes(magic: int, array: np.ndarray, dims: tuple[int, ...] | None = None) -> bytes:
    dims = array.shape if dims is None else dims
    return (magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in dims)
            + np.ascontiguousarray(array, np.uint8).tobytes())


def _write(path: pathlib.Path, content: bytes, gz: bool = True) -> pathlib.Path:
    path.write_bytes(gzip.compress(content) if gz else content)
    return path


def _make_set(root: pathlib.Path, n_train: int = 30, n_test: int = 10, gz: bool = True, seed: int = 0):
    """Valid little IDX files; returns `(root, train_images, train_labels, test_images, test_labels)` arrays."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(n_test) % 10).astype(np.uint8),
    }
    for key, arr in arrays.items():
        magic = I.IDX_IMAGES_MAGIC if key.endswith("images") else I.IDX_LABELS_MAGIC
        name = FILES[key] if gz else FILES[key].removesuffix(".gz")
        _write(root / name, _idx_bytes(magic, arr), gz=gz)
    return root, arrays


@pytest.mark.parametrize("gz", [True, False], ids=["gzipped", "plain"])
def test_synthetic_set_loads_and_standardises(tmp_path, gz):
    root, arrays = _make_set(tmp_path / "fm", gz=gz)
    ds = I.load_fashion_mnist(data_dir=str(root))
    assert ds.train_x.shape == (30, 28, 28, 1) and ds.test_x.shape == (10, 28, 28, 1)
    np.testing.assert_array_equal(ds.train_y, arrays["train_labels"])
    tx, vx = D.standardize(arrays["train_images"][..., None] / 255.0, arrays["test_images"][..., None] / 255.0)
    np.testing.assert_allclose(ds.train_x, tx, atol=1e-5)
    np.testing.assert_allclose(ds.test_x, vx, atol=1e-5)


def test_data_dir_then_env_then_debian(tmp_path, monkeypatch):
    env_root = tmp_path / "env"
    _make_set(env_root / "fashion-mnist", n_train=20)
    arg_root, _ = _make_set(tmp_path / "arg", n_train=12)
    monkeypatch.setenv("ISTJAX_DATA_DIR", str(env_root))
    assert I.fashion_mnist_dir() == env_root / "fashion-mnist"
    assert len(I.load_fashion_mnist().train_y) == 20  # $ISTJAX_DATA_DIR/fashion-mnist
    assert len(I.load_fashion_mnist(data_dir=arg_root).train_y) == 12  # data_dir wins
    assert len(D.load_dataset("fashion_mnist", data_dir=str(arg_root)).train_y) == 12
    monkeypatch.setenv("ISTJAX_DATA_DIR", str(tmp_path / "nothing-here"))
    assert I.fashion_mnist_dir() == pathlib.Path(I.FASHION_MNIST_DEFAULT_DIR)  # no such folder: Debian's
    monkeypatch.delenv("ISTJAX_DATA_DIR")
    assert I.fashion_mnist_dir() == pathlib.Path("/usr/share/datasets/fashion-mnist")


def test_missing_folder_and_file_say_how_to_get_the_data(tmp_path):
    missing = tmp_path / "no-such-folder"
    with pytest.raises(D.DataNotFoundError) as info:
        I.load_fashion_mnist(data_dir=missing)
    msg = str(info.value)
    assert str(missing) in msg and "apt-get install dataset-fashion-mnist" in msg and "ISTJAX_DATA_DIR" in msg
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ValueError)
    root, _ = _make_set(tmp_path / "fm")
    (root / FILES["test_labels"]).unlink()
    with pytest.raises(D.DataNotFoundError, match="t10k-labels-idx1-ubyte.gz is not in") as info:
        I.load_fashion_mnist(data_dir=root)
    assert "apt-get install dataset-fashion-mnist" in str(info.value)


def _corrupt(tmp_path: pathlib.Path, key: str, content: bytes, gz: bool = True) -> pathlib.Path:
    root, _ = _make_set(tmp_path / "fm")
    return _write(root / FILES[key], content, gz=gz)


def _raises_naming(path: pathlib.Path, *fragments: str) -> str:
    with pytest.raises(ValueError) as info:
        I.load_fashion_mnist(data_dir=path.parent)
    msg = str(info.value)
    assert str(path) in msg, msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


def test_bad_magic_names_the_file(tmp_path):
    images = np.zeros((30, 28, 28), np.uint8)
    path = _corrupt(tmp_path, "train_images", _idx_bytes(I.IDX_LABELS_MAGIC, images.reshape(-1)[:30]))
    _raises_naming(path, "magic number 0x00000801", "expected 0x00000803", "swapped")
    path = _corrupt(tmp_path / "b", "test_labels", _idx_bytes(0x00000D01, np.zeros(10, np.uint8)))
    _raises_naming(path, "magic number 0x00000d01", "expected 0x00000801")


def test_truncated_data_names_the_file(tmp_path):
    images = np.zeros((29, 28, 28), np.uint8)  # header says 30
    path = _corrupt(tmp_path, "train_images", _idx_bytes(I.IDX_IMAGES_MAGIC, images, dims=(30, 28, 28)))
    _raises_naming(path, "holds 22736 data bytes", "needs 23520", "truncated")
    extra = _idx_bytes(I.IDX_LABELS_MAGIC, np.zeros(10, np.uint8)) + b"\x00"
    path = _corrupt(tmp_path / "b", "test_labels", extra)
    _raises_naming(path, "extra bytes")
    short = _corrupt(tmp_path / "c", "test_images", I.IDX_IMAGES_MAGIC.to_bytes(4, "big") + b"\x00\x00")
    _raises_naming(short, "too short", "header")


def test_truncated_gzip_names_the_file(tmp_path):
    good = gzip.compress(_idx_bytes(I.IDX_IMAGES_MAGIC, np.zeros((30, 28, 28), np.uint8)))
    path = _corrupt(tmp_path, "train_images", good[: len(good) // 2], gz=False)
    _raises_naming(path, "not a complete gzip file")


def test_label_out_of_range_names_the_file(tmp_path):
    labels = (np.arange(30) % 10).astype(np.uint8)
    labels[7] = 12
    path = _corrupt(tmp_path, "train_labels", _idx_bytes(I.IDX_LABELS_MAGIC, labels))
    _raises_naming(path, "label 12 at index 7", "[0, 10)")


def test_count_mismatch_names_both_files(tmp_path):
    path = _corrupt(tmp_path, "test_labels", _idx_bytes(I.IDX_LABELS_MAGIC, np.zeros(9, np.uint8)))
    msg = _raises_naming(path, "10 images", "9 labels")
    assert str(path.parent / FILES["test_images"]) in msg


def test_bad_arguments(tmp_path):
    root, _ = _make_set(tmp_path / "fm")
    for kwargs, fragment in [
        (dict(num_train=0), "num_train=0 must be >= 1"),
        (dict(num_test="5"), "num_test='5' must be an integer"),
        (dict(num_train=31), "num_train=31 is more than the 30 examples"),
        (dict(num_test=11), "num_test=11 is more than the 10 examples"),
        (dict(flatten="yes"), "flatten='yes' must be True or False"),
    ]:
        with pytest.raises(ValueError, match=fragment.replace("[", r"\[")):
            I.load_fashion_mnist(data_dir=root, **kwargs)
    with pytest.raises(ValueError, match="data_dir"):
        I.load_fashion_mnist(data_dir=3)


def test_config_validator_accepts_fashion_mnist(tmp_path):
    from istjax.launch import config as C

    root, _ = _make_set(tmp_path / "fm", n_train=300, n_test=260)
    c = C.default_config()
    c.data.name = "fashion_mnist"
    c.model.hidden = (16,)
    c.num_workers, c.batch_size = 2, 8
    with c.data.kwargs.unlocked():
        c.data.kwargs.data_dir = str(root)
        c.data.kwargs.flatten = True
    ds = C.validate(c)
    assert ds.train_x.shape == (300, 784)
    with c.data.kwargs.unlocked():
        c.data.kwargs.data_dir = str(tmp_path / "absent")
    with pytest.raises(C.ConfigError, match="apt-get install dataset-fashion-mnist"):
        C.validate(c)


# --------------------------------------------------------------------------
# Augmentation
# --------------------------------------------------------------------------


def _images(b: int = 8, h: int = 6, w: int = 5, c: int = 2, dtype=jnp.float32) -> jax.Array:
    """Distinct, left-right asymmetric values (1-based so zero padding is recognisable)."""
    return (jnp.arange(b * h * w * c).reshape(b, h, w, c) + 1).astype(dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.uint8])
def test_augment_keeps_shape_and_dtype(dtype):
    x = _images(dtype=dtype)
    for pad, flip in [(4, True), (1, False), (0, True)]:
        out = A.augment(jax.random.PRNGKey(0), x, pad=pad, flip=flip)
        assert out.shape == x.shape and out.dtype == x.dtype
    out = A.augment(jax.random.key(1), x)  # new-style typed keys work too
    assert out.shape == x.shape


def test_augment_without_crop_or_flip_is_identity():
    x = _images()
    np.testing.assert_array_equal(A.augment(jax.random.PRNGKey(3), x, pad=0, flip=False), x)


def test_flip_twice_with_the_same_key_is_identity():
    x, key = _images(b=64), jax.random.PRNGKey(7)
    once = A.augment(key, x, pad=0, flip=True)
    np.testing.assert_array_equal(A.augment(key, once, pad=0, flip=True), x)
    _, flips = A.augment_params(key, 64, pad=0)
    assert 0 < int(flips.sum()) < 64
    np.testing.assert_array_equal(once[flips], x[flips][:, :, ::-1])  # flipped ones are mirrored along the width
    np.testing.assert_array_equal(once[~flips], x[~flips])


def test_crop_is_a_window_of_the_zero_padded_image():
    x = _images(b=16, h=5, w=5, c=1)
    key, pad = jax.random.PRNGKey(11), 2
    out = np.asarray(A.augment(key, x, pad=pad, flip=True))
    offsets, flips = (np.asarray(a) for a in A.augment_params(key, 16, pad=pad, flip=True))
    assert offsets.shape == (16, 2) and offsets.min() >= 0 and offsets.max() <= 2 * pad
    # hand check of image 0: pad by hand, cut the window, mirror if drawn
    img = np.asarray(x[0, :, :, 0])
    padded = np.zeros((5 + 2 * pad, 5 + 2 * pad), img.dtype)
    padded[pad:pad + 5, pad:pad + 5] = img
    dy, dx = offsets[0]
    window = padded[dy:dy + 5, dx:dx + 5]
    if flips[0]:
        window = window[:, ::-1]
    np.testing.assert_array_equal(out[0, :, :, 0], window)
    # and every image against numpy's padding
    padded_all = np.pad(np.asarray(x), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    for b in range(16):
        dy, dx = offsets[b]
        expected = padded_all[b, dy:dy + 5, dx:dx + 5]
        np.testing.assert_array_equal(out[b], expected[:, ::-1] if flips[b] else expected)
    # the draws cover every offset and flip about half the images
    offsets, flips = (np.asarray(a) for a in A.augment_params(jax.random.PRNGKey(0), 4000, pad=2))
    assert set(np.unique(offsets)) == set(range(5))
    assert 0.45 < flips.mean() < 0.55


def test_augment_bad_arguments():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"\[B, H, W, C\].*flatten=False"):
        A.augment(key, jnp.zeros((4, 784)))
    with pytest.raises(ValueError, match="pad=-1 must be >= 0"):
        A.augment(key, _images(), pad=-1)
    with pytest.raises(ValueError, match="flip='no'"):
        A.augment(key, _images(), flip="no")
    with pytest.raises(ValueError, match=r"\[W, K, B, H, W, C\]"):
        A.augment_batches(0, 0, {"x": _images()})
    with pytest.raises(ValueError, match="seed=-1"):
        A.augment_batches(-1, 0, {"x": jnp.zeros((1, 1, 2, 4, 4, 1))})


def _round_batch(w: int = 3, k: int = 2, b: int = 4) -> dict:
    """The same images for every (worker, step), so different keys show as different outputs."""
    x = jnp.broadcast_to(_images(b=b, h=6, w=6, c=1), (w, k, b, 6, 6, 1))
    return {"x": x, "y": jnp.zeros((w, k, b), jnp.int32)}


def test_augment_batches_is_a_function_of_seed_and_round():
    batch = _round_batch()
    a = A.augment_batches(5, 3, batch)
    np.testing.assert_array_equal(a["x"], A.augment_batches(5, 3, batch)["x"])
    np.testing.assert_array_equal(a["x"], A.augment_batches(5, jnp.int32(3), batch)["x"])  # resumed: same data
    assert a["y"] is batch["y"] and a["x"].shape == batch["x"].shape and a["x"].dtype == jnp.float32
    assert not np.array_equal(a["x"], A.augment_batches(5, 4, batch)["x"])  # another round
    assert not np.array_equal(a["x"], A.augment_batches(6, 3, batch)["x"])  # another seed
    # every (worker, step) has its own key: the same input images come out differently
    flat = np.asarray(a["x"]).reshape(6, -1)
    assert len({row.tobytes() for row in flat}) == 6
    # and the key is the documented fold_in chain
    base = jax.random.fold_in(jax.random.PRNGKey(5), A._AUGMENT_TAG)
    for w in range(3):
        for k in range(2):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(base, 3), w), k)
            np.testing.assert_array_equal(a["x"][w, k], A.augment(key, batch["x"][w, k]))


def test_augment_batches_does_not_recompile_across_rounds():
    batch = _round_batch()
    A.augment_batches(0, 0, batch)
    compiled = A._augment_round_jit._cache_size()
    for r in [1, 2, jnp.int32(3), np.int32(4)]:
        A.augment_batches(0, r, batch)
    A.augment_batches(9, 5, batch)  # another seed too
    assert A._augment_round_jit._cache_size() == compiled

    traces = []

    @jax.jit
    def step(r, x):
        traces.append(1)
        return A.augment_batches(1, r, {"x": x})["x"]

    outs = [step(jnp.int32(r), batch["x"]) for r in range(4)]
    assert len(traces) == 1
    np.testing.assert_array_equal(outs[2], A.augment_batches(1, 2, batch)["x"])


def test_augment_batches_on_make_batch_fn_output(tmp_path):
    root, _ = _make_set(tmp_path / "fm", n_train=40, n_test=10)
    ds = I.load_fashion_mnist(data_dir=root)
    batch_fn = D.make_batch_fn(ds, num_workers=2, local_steps=3, batch_size=5, seed=0)
    batch = batch_fn(0)
    out = D.augment_batches(0, 0, batch)
    assert out["x"].shape == (2, 3, 5, 28, 28, 1) and out["y"].shape == (2, 3, 5)
    np.testing.assert_array_equal(out["y"], batch["y"])
    np.testing.assert_array_equal(D.augment_batches(0, 0, batch, pad=0, flip=False)["x"], batch["x"])


@pytest.mark.slow
def test_augmented_batch_fn_through_the_driver_resumes_exactly(tmp_path):
    """`--config.data.augment=True` on Fashion-MNIST with a CNN: batches differ from the plain ones, are a pure function
    of (seed, round) (an interrupted and resumed run equals an uninterrupted one), and the fused round uses them."""
    import ml_collections

    import istjax.data as D
    import istjax.launch.config as config_lib
    import istjax.launch.driver as driver

    if not all((pathlib.Path("/usr/share/datasets/fashion-mnist") / f).exists() for f in
               ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz")):
        pytest.skip("Debian's dataset-fashion-mnist is not installed (scripts/setup_env.sh installs it as root)")
    data = D.load_dataset("fashion_mnist", num_train=512, num_test=256)
    plain = D.make_batch_fn(data, num_workers=2, local_steps=2, batch_size=8, seed=3)
    aug = D.augmented(plain, pad=2)
    assert not np.array_equal(np.asarray(plain(1)["x"]), np.asarray(aug(1)["x"]))
    np.testing.assert_array_equal(np.asarray(aug(1)["x"]), np.asarray(jax.jit(aug.apply)(aug.data, 1)["x"]))
    np.testing.assert_array_equal(np.asarray(plain(1)["y"]), np.asarray(aug(1)["y"]))

    def config(rounds):
        c = config_lib.default_config()
        c.data.name, c.data.augment, c.data.augment_pad = "fashion_mnist", True, 2
        c.data.kwargs = ml_collections.ConfigDict({"num_train": 512, "num_test": 256})
        c.model = ml_collections.ConfigDict({"name": "cnn", "widths": (4, 8), "batch_norm": "running"})
        c.num_workers, c.local_steps, c.batch_size, c.num_rounds = 2, 2, 8, rounds
        c.eval_every, c.checkpoint_every, c.eval_train_examples, c.progress = 2, 1, 256, False
        c.target_accuracy = None
        return c

    with persistent_compilation_cache(tmp_path / "jax_cache"):  # the split run and the resume load full's compiles
        driver.train_and_evaluate(config(4), tmp_path / "full")
        driver.train_and_evaluate(config(2), tmp_path / "split")
        driver.train_and_evaluate(config(4), tmp_path / "split", resume=True)
        a = driver.evaluate_run(tmp_path / "full")
        b = driver.evaluate_run(tmp_path / "split")
    assert a["round"] == b["round"] == 4 and a["test_loss"] == b["test_loss"]
