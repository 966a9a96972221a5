"""Image datasets read from their published files: Fashion-MNIST from the IDX files Debian ships.

Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017; MIT licence) is 70,000 greyscale 28 x 28 images of clothing in
10 classes, 60,000 for training and 10,000 for testing.  Debian packages the published files as
``dataset-fashion-mnist``::

    /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz   # 60000 x 28 x 28 uint8
    /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz   # 60000 uint8 in [0, 10)
    /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz    # 10000 x 28 x 28
    /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz    # 10000

``scripts/setup_env.sh`` installs it where it runs as root (``apt-get install dataset-fashion-mnist``); anywhere
else, point ``data_dir`` (or ``$ISTJAX_DATA_DIR/fashion-mnist``) at a folder holding these four files (gzipped
or not).  The files are read with :mod:`gzip` and numpy only, and checked on the way (magic number, dimensions,
byte length, label range, image and label counts); a bad file raises a ValueError naming it.  Nothing here
touches the network.
"""

from __future__ import annotations

import functools
import gzip
import os
import pathlib
import zlib
from typing import Optional, Union

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.data.dataset import Dataset, finalise_rows
from istjax.data.files import DataNotFoundError, damaged_file, data_folder

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_DEFAULT_DIR",
    "FASHION_MNIST_FILES",
    "fashion_mnist_dir",
    "load_fashion_mnist",
    "read_idx",
]

FASHION_MNIST_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
"""Where Debian's ``dataset-fashion-mnist`` package puts the IDX files."""

FASHION_MNIST_FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
"""The four published file names; each may also be present uncompressed (without ``.gz``)."""

FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
"""Label ``i`` is ``FASHION_MNIST_CLASSES[i]``."""

IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions: [N, rows, cols]
IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension: [N]

_HOW_TO_GET = (
    "Install it with `apt-get install dataset-fashion-mnist` (as root; scripts/setup_env.sh does this), or point "
    "data_dir= (a config's data.kwargs.data_dir) or $ISTJAX_DATA_DIR/fashion-mnist at a folder holding "
    f"{', '.join(FASHION_MNIST_FILES.values())} (gzipped or not)."
)


# --------------------------------------------------------------------------
# IDX files
# --------------------------------------------------------------------------


def _idx_bytes(path: pathlib.Path) -> bytes:
    """The file's content, gunzipped if it is a gzip file (by its first two bytes, not its name)."""
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise damaged_file(path, "complete gzip file", e, "Re-install it (`apt-get install --reinstall "
                            "dataset-fashion-mnist` as root) or copy it again.") from None


def read_idx(path: Union[str, os.PathLike], magic: int) -> np.ndarray:
    """Read an unsigned-byte IDX file (gzipped or not) with numpy, checking its header against its data.

    Args:
      path: the file.
      magic: the expected magic number: ``0x00000803`` for images ``[N, rows, cols]``, ``0x00000801`` for
        labels ``[N]``.  Its low byte is the number of dimensions.

    Returns:
      A read-only ``uint8`` array of the dimensions the header gives.

    Raises:
      ValueError: naming the file, what is wrong (magic number, header length, dimensions, byte length) and
        how to fix it.
    """
    path = pathlib.Path(path)
    data = _idx_bytes(path)
    fix = "Re-install it (`apt-get install --reinstall dataset-fashion-mnist` as root) or copy it again."
    if len(data) < 4:
        raise ValueError(f"{path}: {len(data)} bytes, too short for an IDX header (4-byte magic number). {fix}")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        kinds = {IDX_IMAGES_MAGIC: "an images file", IDX_LABELS_MAGIC: "a labels file"}
        hint = (f" It looks like {kinds[found]}: are the images and labels file names swapped?"
                if found in kinds else " It is not an unsigned-byte IDX file of the expected kind.")
        raise ValueError(
            f"{path}: IDX magic number 0x{found:08x}, expected 0x{magic:08x} "
            f"({kinds.get(magic, 'IDX')}).{hint} {fix}"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(
            f"{path}: {len(data)} bytes, too short for the {header}-byte IDX header of {ndim} dimension(s); "
            f"the file is truncated. {fix}"
        )
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    if any(d == 0 for d in dims[1:]):
        raise ValueError(f"{path}: IDX header gives dimensions {dims}; every item dimension must be >= 1. {fix}")
    need = int(np.prod(dims, dtype=np.int64))
    have = len(data) - header
    if have != need:
        what = "truncated" if have < need else "followed by extra bytes"
        raise ValueError(
            f"{path}: holds {have} data bytes but its IDX header ({' x '.join(map(str, dims))}) needs {need}; "
            f"the file is {what}. {fix}"
        )
    out = np.frombuffer(data, np.uint8, offset=header).reshape(dims)
    out.flags.writeable = False
    return out


def _find_file(directory: pathlib.Path, name: str) -> pathlib.Path:
    """`directory/name`, or its uncompressed twin (`name` without `.gz`); DataNotFoundError if neither exists."""
    for candidate in (directory / name, directory / name.removesuffix(".gz")):
        if candidate.is_file():
            return candidate
    present = sorted(p.name for p in directory.iterdir())[:8]
    raise DataNotFoundError(
        f"Fashion-MNIST file {name} is not in {directory} (found: {present or 'nothing'}). {_HOW_TO_GET}"
    )


def _stat_key(path: pathlib.Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=2)
def _read_split(images_key: tuple[str, int, int], labels_key: tuple[str, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Read-only `(images [N, H, W] uint8, labels [N] uint8)` of one split, checked; cached by path, size, mtime."""
    images_path, labels_path = images_key[0], labels_key[0]
    images = read_idx(images_path, IDX_IMAGES_MAGIC)
    labels = read_idx(labels_path, IDX_LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} holds {labels.shape[0]} labels; "
            f"the two files must describe the same examples (mixed copies, or one is from another dataset). "
            f"Re-install the package or copy both files again."
        )
    if images.shape[0] == 0:
        raise ValueError(f"{images_path} holds 0 images; re-install the package or copy the file again.")
    bad = np.flatnonzero(labels >= len(FASHION_MNIST_CLASSES))
    if bad.size:
        raise ValueError(
            f"{labels_path}: label {int(labels[bad[0]])} at index {int(bad[0])} ({bad.size} label(s) in all) is "
            f"outside [0, {len(FASHION_MNIST_CLASSES)}); Fashion-MNIST has {len(FASHION_MNIST_CLASSES)} classes. "
            f"The file is corrupt or from another dataset: re-install the package or copy it again."
        )
    return images, labels


# --------------------------------------------------------------------------
# Fashion-MNIST
# --------------------------------------------------------------------------


def fashion_mnist_dir(data_dir: Optional[Union[str, os.PathLike]] = None) -> pathlib.Path:
    """The folder :func:`load_fashion_mnist` reads: `data_dir` if given, else `$ISTJAX_DATA_DIR/fashion-mnist`
    if that folder exists, else :data:`FASHION_MNIST_DEFAULT_DIR` (Debian's).  The path is not checked."""
    return data_folder(data_dir, "fashion-mnist", what="Fashion-MNIST", how=_HOW_TO_GET,
                       default=FASHION_MNIST_DEFAULT_DIR)


def _check_count(field: str, value: Optional[int], available: int, path: str) -> int:
    if value is None:
        return available
    v = int(value)
    if v > available:
        raise ArgError(field, value, f"{field}={v} is more than the {available} examples in {path};",
                       f"pass {field} <= {available} (or None for all).")
    return v


def load_fashion_mnist(
    *,
    data_dir: Optional[str] = None,
    num_train: Optional[int] = None,
    num_test: Optional[int] = None,
    flatten: bool = False,
) -> Dataset:
    """Fashion-MNIST from its IDX files (60,000 train / 10,000 test, 28 x 28 greyscale, 10 classes).

    Pixels are scaled to ``[0, 1]`` and then standardised per pixel with the statistics of the training images
    loaded (the :class:`~istjax.data.dataset.Dataset` contract; pixels that are constant on the training set are
    centred and left at 0).  Arrays are read-only and cached in memory: the decoded files by path, size and
    modification time, the standardised dataset per ``(folder, num_train, num_test)``; ``flatten`` is a reshape
    of the same arrays.

    Args:
      data_dir: folder holding the four IDX files (see :data:`FASHION_MNIST_FILES`; gzipped or not).  Default:
        ``$ISTJAX_DATA_DIR/fashion-mnist`` if that folder exists, else ``/usr/share/datasets/fashion-mnist``
        (Debian's ``dataset-fashion-mnist``).
      num_train: keep the first ``num_train`` training images (default all 60,000); the standardisation
        statistics are those of this subset.
      num_test: keep the first ``num_test`` test images (default all 10,000).
      flatten: return ``[N, 784]`` features instead of images ``[N, 28, 28, 1]``.

    Returns:
      ``Dataset(name="fashion_mnist", train_x=[num_train, 28, 28, 1] float32, ...)``, labels ``int32`` in
      ``[0, 10)`` (names in :data:`FASHION_MNIST_CLASSES`).

    Raises:
      DataNotFoundError: the folder or a file is missing (says how to get the data); also a ValueError.
      ValueError: a bad argument, or a file that fails a check (naming the file).
    """
    if not isinstance(flatten, (bool, np.bool_)):
        raise ArgError("flatten", flatten, f"flatten={flatten!r} must be True or False.", "")
    num_train = None if num_train is None else check_positive("num_train", num_train)
    num_test = None if num_test is None else check_positive("num_test", num_test)
    directory = fashion_mnist_dir(data_dir)
    if not directory.is_dir():
        raise DataNotFoundError(f"Fashion-MNIST folder {directory} does not exist. {_HOW_TO_GET}")
    keys = {k: _stat_key(_find_file(directory, name)) for k, name in FASHION_MNIST_FILES.items()}
    ds = _fashion_mnist(keys["train_images"], keys["train_labels"], keys["test_images"], keys["test_labels"],
                        num_train, num_test)
    if flatten:
        ds = ds._replace(train_x=ds.train_x.reshape(len(ds.train_x), -1),
                         test_x=ds.test_x.reshape(len(ds.test_x), -1))
    return ds


@functools.lru_cache(maxsize=2)
def _fashion_mnist(train_images, train_labels, test_images, test_labels, num_train, num_test) -> Dataset:
    tx, ty = _read_split(train_images, train_labels)
    vx, vy = _read_split(test_images, test_labels)
    if tx.shape[1:] != vx.shape[1:]:
        raise ValueError(
            f"{train_images[0]} holds {tx.shape[1]} x {tx.shape[2]} images but {test_images[0]} holds "
            f"{vx.shape[1]} x {vx.shape[2]}; both splits must come from the same dataset."
        )
    n = _check_count("num_train", num_train, len(tx), train_images[0])
    m = _check_count("num_test", num_test, len(vx), test_images[0])

    # The training images stay bytes; a process converts to float32 only the rows it reads (`Rows`).
    return finalise_rows("fashion_mnist", tx[:n], ty[:n], vx[:m], vy[:m], len(FASHION_MNIST_CLASSES), _scaled)


def _scaled(images: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` bytes to ``[N, H, W, 1]`` float32 in ``[0, 1]`` (a fresh writable array)."""
    out = images[..., None].astype(np.float32)
    out *= np.float32(1.0 / 255.0)
    return out
