"""Where loaders find their files and keep their caches: the helpers every loader of :mod:`istjax.data` shares.

* :class:`DataNotFoundError`: a data set's files are not where the loader looked (a ``FileNotFoundError`` and a
  ``ValueError``, the message saying how to get them).
* :func:`data_folder`: the folder a named data set is read from: ``data_dir`` when given, else
  ``$ISTJAX_DATA_DIR/<its folder>``, else a default or a DataNotFoundError saying to set ISTJAX_DATA_DIR.
* :func:`damaged_file`: the one error for a file that does not read whole (an archive or cache cut short).
* :func:`cache_dir`, :func:`read_cache`, :func:`write_cache`: the on-disk cache of generated and parsed data
  (``$ISTJAX_CACHE_DIR`` or ``~/.cache/istjax``; ``.npz`` files read without pickles, written atomically).
"""

from __future__ import annotations

import os
import pathlib
import zipfile
from typing import Any, Optional, Union

import numpy as np

from istjax.core.errors import ArgError

__all__ = ["DataNotFoundError", "cache_dir", "damaged_file", "data_folder", "read_cache", "write_cache"]

DATA_DIR_ENV = "ISTJAX_DATA_DIR"
"""The environment variable naming the folder that holds the data sets' folders."""


class DataNotFoundError(FileNotFoundError, ValueError):
    """A dataset's files are not where the loader looked.

    Both a `FileNotFoundError` and a `ValueError`, so config validation that reports bad dataset arguments
    (``except ValueError``) reports this one too, with how to get the data.
    """


def data_folder(data_dir: Optional[Union[str, os.PathLike]], folder: str, *, what: str, how: str,
                default: Optional[Union[str, os.PathLike]] = None) -> pathlib.Path:
    """The folder a loader reads: ``data_dir`` if given; else ``$ISTJAX_DATA_DIR/folder`` (``folder=""``: the
    variable's folder itself), when ``default`` is None or that folder exists; else ``default``. The path is not
    checked further.

    Args:
      data_dir: the caller's folder, or None.
      folder: the data set's folder under ``$ISTJAX_DATA_DIR`` (``"fashion-mnist"``, ``"planetoid"``).
      what: the data set as a refusal names it (``"xmc-debian-deps"``).
      how: how to get the files, ending the refusal.
      default: where to look when ``$ISTJAX_DATA_DIR`` is unset or lacks ``folder`` (Debian's package folder).

    Raises:
      ArgError: ``data_dir`` is not a non-empty path.
      DataNotFoundError: no ``data_dir``, no ``$ISTJAX_DATA_DIR`` and no ``default``.
    """
    if data_dir is not None:
        if not isinstance(data_dir, (str, os.PathLike)) or not str(data_dir):
            raise ArgError("data_dir", data_dir, f"data_dir={data_dir!r} must be a folder path (a non-empty str) or "
                                                 f"None;", f"pass the folder holding {what}'s files.")
        return pathlib.Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        candidate = pathlib.Path(env).expanduser() / folder
        if default is None or candidate.is_dir():
            return candidate
    if default is not None:
        return pathlib.Path(default)
    raise DataNotFoundError(f"{what}: {DATA_DIR_ENV} is not set and no data_dir was given. {how}")


def damaged_file(path: Any, what: str, error: BaseException, fix: str) -> ValueError:
    """The error for a file that does not read whole: ``{path}: not a {what} ({error}); the file is truncated or
    corrupt. {fix}``. A ValueError, so config validation reports it as bad input (exit 2), in one line."""
    first = str(error).splitlines()[0].rstrip(":") if str(error).strip() else ""
    cause = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return ValueError(f"{path}: not a {what} ({cause}); the file is truncated or corrupt. {fix}")


def cache_dir() -> pathlib.Path:
    """On-disk cache root: ``$ISTJAX_CACHE_DIR`` or ``~/.cache/istjax``."""
    return pathlib.Path(os.environ.get("ISTJAX_CACHE_DIR", pathlib.Path.home() / ".cache" / "istjax"))


def read_cache(path: pathlib.Path, names: tuple[str, ...]) -> Optional[tuple[np.ndarray, ...]]:
    """The arrays ``names`` of a cache file :func:`write_cache` wrote (read without pickles), or None when there is
    none; a cache file that does not read whole (cut short by a copy, a full disk) is refused, naming it."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return tuple(z[n] for n in names)
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise damaged_file(path, "complete istjax cache file", e, "Delete it; the next load rebuilds it.") from None


def write_cache(path: pathlib.Path, **arrays: np.ndarray) -> None:
    """Writes ``arrays`` to the cache file ``path`` atomically (a temporary file renamed over it), so concurrent
    loaders (MPI ranks) never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
