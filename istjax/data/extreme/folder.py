"""An XMC data set from a folder of your own: two files in the repository text format and, optionally, label names.

The folder holds (docs/extreme.md, "Your own XMC files")::

    train.txt    or train.txt.gz   the training points   (the repository's format: header, then `l1,l2 f:v ...`)
    test.txt     or test.txt.gz    the test points, over the same feature and label spaces (the same header counts)
    labels.txt   optional          line i names label i (UTF-8), one line per label of the header

Anything else in it is left alone (``features.txt``, a README, the Debian set's ``build.py``). :func:`read_xmc_folder`
reads it defensively, each refusal one line naming the path: a missing folder or data file (with what the folder must
hold), both a file and its gzipped twin (which one is meant?), a malformed data file (naming its line, as
:func:`istjax.data.extreme.read_xmc` does), splits whose headers disagree on the feature or label count, an empty
split, and a ``labels.txt`` that is not UTF-8, names another number of labels than the headers, or has an empty line.
Without ``labels.txt`` label ``i`` is named ``"i"``. The data set is named after the folder (``my-xmc/`` gives
``my-xmc``, and its training view ``my_xmc``).

``istjax train`` with the config fields ``data.name=xmc`` and ``data.kwargs.path=my-xmc`` trains on it (its
training view is :func:`istjax.data.extreme.load_folder_dataset`); ``xmc-debian-deps`` is such a folder, read with its
own name and instructions (:func:`istjax.data.extreme.load_xmc_debian_deps`).
"""

from __future__ import annotations

import os
import pathlib
from typing import Optional

from istjax.core.errors import ArgError, Code
from istjax.data.files import DataNotFoundError
from istjax.data.extreme.text_format import PathLike, XMCData, XMCDataset, read_xmc

__all__ = ["FOLDER_HOLDS", "XMC_FOLDER_FILES", "read_xmc_folder"]

XMC_FOLDER_FILES = ("train.txt", "test.txt", "labels.txt")
"""What an XMC folder holds: the two splits (each may be gzipped, ``train.txt.gz``) and the optional label names."""

FOLDER_HOLDS = ("An XMC folder holds train.txt and test.txt (either may be gzipped: train.txt.gz) in the Extreme "
                "Classification Repository text format, and optionally labels.txt (line i names label i); see "
                "docs/extreme.md, 'Your own XMC files'.")
"""What a refusal of :func:`read_xmc_folder` says the folder must hold."""


def _folder(path: PathLike, name: Optional[str], how: str) -> tuple[pathlib.Path, str]:
    """``(folder, name)``: ``path`` as an existing folder, and the data set's name (``name``, else the folder's)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ArgError("path", path, f"path={path!r} must be the path of a folder (a non-empty str).",
                       ("Pass", Code("the folder that holds train.txt and test.txt",
                                     {"path": "<the folder that holds train.txt and test.txt>"}), "."))
    folder = pathlib.Path(path).expanduser().absolute()
    said = name or "xmc"  # what a refusal leads with
    if not folder.exists():
        raise DataNotFoundError(f"{said}: the folder {folder} does not exist. {how}")
    if not folder.is_dir():
        raise DataNotFoundError(f"{said}: {folder} is a file, not a folder. {how}")
    return folder, name or folder.resolve().name or "xmc"


def _data_file(folder: pathlib.Path, stem: str, name: str, how: str) -> pathlib.Path:
    """``folder/stem`` or ``folder/stem.gz`` (exactly one of them); DataNotFoundError naming what the folder holds."""
    found = [p for p in (folder / stem, folder / f"{stem}.gz") if p.is_file()]
    if len(found) == 2:
        raise ValueError(f"{name}: {folder} holds both {stem} and {stem}.gz, so which one to read is not clear; keep "
                         f"one of them. {how}")
    if not found:
        present = sorted(p.name for p in folder.iterdir())[:8]
        raise DataNotFoundError(f"{name}: {folder} has no {stem} or {stem}.gz (found: {present or 'nothing'}). {how}")
    return found[0]


def _label_names(path: pathlib.Path, num_labels: int) -> tuple[str, ...]:
    """One name per label id, line ``i + 1`` naming label ``i``; the count must match the data files'."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}: line {line}: not UTF-8 text (byte {raw[e.start]:#04x}); write the label names "
                         f"as UTF-8, one a line.") from None
    names = [n.removesuffix("\r") for n in text.split("\n")]
    if names and names[-1] == "":
        names.pop()
    if len(names) != num_labels:
        raise ValueError(f"{path}: {len(names)} label names, but the data files declare {num_labels} labels; give "
                         f"one name a line, line i naming label i (or delete labels.txt: labels are then named by "
                         f"their index).")
    empty = [i for i, n in enumerate(names) if not n.strip()]
    if empty:
        raise ValueError(f"{path}: line {empty[0] + 1}: an empty label name; name every label (line i names label i).")
    return tuple(names)


def _check_splits(train: XMCData, test: XMCData, files: list[pathlib.Path]) -> None:
    """Refuse splits over different feature or label spaces, and an empty split."""
    if (train.num_features, train.num_labels) != (test.num_features, test.num_labels):
        raise ValueError(f"{files[1]} declares {test.num_features} features and {test.num_labels} labels, but "
                         f"{files[0]} declares {train.num_features} and {train.num_labels}; both splits must share "
                         f"one feature and label space (the same header counts).")
    for split, data, file in (("train", train, files[0]), ("test", test, files[1])):
        if data.num_points == 0:
            raise ValueError(f"{file}: the {split} split holds no points (its header declares 0); give it at least "
                             f"one point line.")


def read_xmc_folder(path: PathLike, *, cache: bool = True, name: Optional[str] = None,
                    labels_required: bool = False, how: str = FOLDER_HOLDS) -> XMCDataset:
    """The XMC data set in folder ``path`` (module docstring): its train and test splits and label names.

    Args:
      path: the folder.
      cache: as in :func:`istjax.data.extreme.read_xmc` (parsed arrays cached per file).
      name: the data set's name; default the folder's name.
      labels_required: refuse a folder without ``labels.txt`` (a published set whose names are part of it).
      how: what the folder must hold and where to get it, said after every missing-file refusal.

    Returns:
      ``XMCDataset(name, train, test, label_names)``, the splits named ``<name>/train`` and ``<name>/test``.

    Raises:
      ArgError: ``path`` is not a path.
      DataNotFoundError: no such folder, or a data file (or a required ``labels.txt``) missing, naming the folder,
        what it holds, and ``how``.
      ValueError: a malformed file, naming it (and its line), or splits that disagree (module docstring).
    """
    folder, name = _folder(path, name, how)
    files = [_data_file(folder, stem, name, how) for stem in XMC_FOLDER_FILES[:2]]
    train, test = (read_xmc(f, cache=cache) for f in files)
    _check_splits(train, test, files)
    labels = folder / XMC_FOLDER_FILES[2]
    if labels.is_file():
        names = _label_names(labels, train.num_labels)
    elif labels_required:
        raise DataNotFoundError(f"{name}: {folder} has no {labels.name}. {how}")
    else:
        names = tuple(str(i) for i in range(train.num_labels))
    return XMCDataset(name, train._replace(name=f"{name}/train"), test._replace(name=f"{name}/test"), names)
