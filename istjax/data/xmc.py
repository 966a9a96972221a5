"""Extreme multi-label classification (XMC) data: the repository text format, its cache, sparse batches and a
generator.

The format is the Extreme Classification Repository's (Bhatia et al., http://manikvarma.org/downloads/XC/
XMLRepository.html), plain or gzipped (recognised by its magic bytes, not its name)::

    num_points num_features num_labels          # the header: three non-negative integers
    l1,l2,... f:v f:v ...                        # one line per point: label ids, then feature id:value pairs

Ids are 0-based. A point with no labels starts its line with whitespace (or with its first ``f:v``); a point with
neither labels nor features is an empty line. :func:`read_xmc` refuses, naming the file and the 1-based line (the
header is line 1, point ``i`` is line ``i + 2``) and the fix: a malformed header or line, a label or feature id
outside ``[0, count)`` of the header (negative included), a value that is not a finite float32, an id given twice
on one line, and fewer or more point lines than the header declares (a truncated file).

Every reader returns an :class:`XMCData`: two CSR matrices (:class:`SparseRows`) over the same points, the features
(with values) and the label sets (without), ids ascending within each row. Parsed arrays are cached as ``.npz`` in
``$ISTJAX_CACHE_DIR`` (or ``~/.cache/istjax``), keyed by the file's resolved path, size and modification time, so the
second read of a file skips the parse; a damaged cache file is refused, naming it (delete it to rebuild).

Also here:

* :func:`load_xmc_debian_deps`: the ``xmc-debian-deps`` set (Debian packages' dependencies from their descriptions;
  ``$ISTJAX_DATA_DIR/xmc-debian-deps``), train and test plus the label names; :func:`load_xmc` by name.
* :func:`pack_rows` / :func:`pack_labels`: rows of an :class:`XMCData` as fixed-shape padded arrays for ``jit``.
* :func:`synthetic_xmc`: a seeded generator of XMC data with power-law label frequencies and label-dependent features.

The ranking metrics (P@k, nDCG@k, PSP@k) and the blockwise top-k over labels are in :mod:`istjax.xmc.metrics`.
Nothing here touches the network.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import re
import zlib
from typing import Any, NamedTuple, Optional, Union

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive as _check_positive
from istjax.core.streams import check_seed
from istjax.data.dataset import Dataset, _cache_dir, _damaged_file, _read_cache, _write_cache
from istjax.data.images import DataNotFoundError
from istjax.xmc.metrics import propensities

__all__ = [
    "XMC_DATASETS",
    "XMC_DEBIAN_DEPS_FILES",
    "SparseBatch",
    "SparseRows",
    "XMCData",
    "XMCDataset",
    "as_dataset",
    "bucket",
    "feature_pairs",
    "load_debian_deps_dataset",
    "load_synthetic_dataset",
    "load_xmc",
    "load_xmc_debian_deps",
    "pack_labels",
    "pack_rows",
    "parse_xmc",
    "read_xmc",
    "synthetic_xmc",
    "synthetic_xmc_dataset",
    "take_rows",
    "write_xmc",
    "xmc_debian_deps_dir",
]

PathLike = Union[str, os.PathLike]

_FORMAT_FIX = ("The file must be in the Extreme Classification Repository format (header `points features labels`, "
               "then one line `l1,l2,... f:v f:v ...` per point, 0-based ids); fix the line or regenerate the file.")
_TRUNCATED_FIX = "The file is truncated or was cut short by a copy; copy or download it again."


# --------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------


class SparseRows(NamedTuple):
    """A CSR matrix of ``N`` rows: row ``i`` holds ``ids[indptr[i]:indptr[i + 1]]`` (ascending, distinct).

    Fields:
      indptr: ``[N + 1] int64``, ``indptr[0] == 0``, non-decreasing, ``indptr[N] == nnz``.
      ids: ``[nnz] int32`` column ids (feature or label ids) in ``[0, num_columns)``.
      values: ``[nnz] float32`` finite values (features), or None (label sets: every entry is 1).
    """

    indptr: np.ndarray
    ids: np.ndarray
    values: Optional[np.ndarray] = None

    @property
    def num_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def row_lengths(self) -> np.ndarray:
        """``[N] int64``: entries per row."""
        return np.diff(self.indptr)

    def __repr__(self) -> str:
        kind = "values" if self.values is not None else "sets"
        return f"SparseRows({self.num_rows} rows, {len(self.ids)} entries, {kind})"


class XMCData(NamedTuple):
    """``N`` points of an extreme multi-label classification problem, as two CSR matrices.

    Fields:
      features: ``[N, num_features]`` :class:`SparseRows` with values (tf-idf and the like).
      labels: ``[N, num_labels]`` :class:`SparseRows` without values: the label set of each point (may be empty).
      num_features: the feature space's size (the header's, not the largest id present).
      num_labels: the label space's size.
      name: what messages and summaries call it (the file's name for :func:`read_xmc`).
    """

    features: SparseRows
    labels: SparseRows
    num_features: int
    num_labels: int
    name: str = ""

    @property
    def num_points(self) -> int:
        return self.features.num_rows

    def label_counts(self) -> np.ndarray:
        """``[num_labels] int64``: points carrying each label (``N_l`` of the propensity model)."""
        return np.bincount(self.labels.ids, minlength=self.num_labels).astype(np.int64)

    def __repr__(self) -> str:
        n = max(self.num_points, 1)
        return (f"XMCData({self.name + ', ' if self.name else ''}{self.num_points} points, "
                f"{self.num_features} features, {self.num_labels} labels; "
                f"{len(self.features.ids) / n:.2f} nonzero features and {len(self.labels.ids) / n:.3f} labels "
                f"per point)")


class XMCDataset(NamedTuple):
    """A train / test pair over the same feature and label spaces.

    Fields:
      name: the data set's name (:data:`XMC_DATASETS`).
      train, test: :class:`XMCData` with equal ``num_features`` and ``num_labels``.
      label_names: ``num_labels`` strings (label id -> name), or None when the data set has none.
    """

    name: str
    train: XMCData
    test: XMCData
    label_names: Optional[tuple[str, ...]] = None

    def __repr__(self) -> str:
        return (f"XMCDataset({self.name!r}, train={self.train.num_points}, test={self.test.num_points}, "
                f"features={self.train.num_features}, labels={self.train.num_labels})")


def _freeze(*arrays: Optional[np.ndarray]) -> None:
    for a in arrays:
        if a is not None:
            a.flags.writeable = False


def _record(name: str, f_ptr, f_ids, f_vals, l_ptr, l_ids, num_features: int, num_labels: int) -> XMCData:
    """An XMCData of the given arrays, cast to the record's dtypes and made read-only."""
    arrays = (np.asarray(f_ptr, np.int64), np.asarray(f_ids, np.int32), np.asarray(f_vals, np.float32),
              np.asarray(l_ptr, np.int64), np.asarray(l_ids, np.int32))
    _freeze(*arrays)
    return XMCData(SparseRows(*arrays[:3]), SparseRows(*arrays[3:]), int(num_features), int(num_labels), name)


# --------------------------------------------------------------------------
# Parsing the text format
# --------------------------------------------------------------------------


def _at(path: pathlib.Path, line: int, problem: str, fix: str = _FORMAT_FIX) -> ValueError:
    """The reader's error: ``{path}: line {line}: {problem}. {fix}``."""
    return ValueError(f"{path}: line {line}: {problem}. {fix}")


def _read_text(path: pathlib.Path) -> str:
    """The file's text, gunzipped when it starts with gzip's magic bytes; ASCII only (else the line is named)."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if not gzipped:
        raw = path.read_bytes()
    else:
        try:
            with gzip.open(path, "rb") as f:
                raw = f.read()
        except (EOFError, OSError, zlib.error) as e:
            raise _damaged_file(path, "complete gzip file", e, "Copy or download it again.") from None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise _at(path, line, f"byte {raw[e.start]:#04x} is not ASCII; the format holds only digits, ',', ':', "
                              f"'.', signs and spaces") from None


def _header(path: pathlib.Path, line: str) -> tuple[int, int, int]:
    """``(num_points, num_features, num_labels)`` from line 1."""
    tokens = line.split()
    if len(tokens) != 3 or not all(t.isdigit() for t in tokens):
        raise _at(path, 1, f"the header is {line[:60]!r}, not three non-negative integers "
                           f"`num_points num_features num_labels`")
    points, features, labels = map(int, tokens)
    if features < 1 or labels < 1:
        raise _at(path, 1, f"the header declares {features} features and {labels} labels; both must be at least 1")
    return points, features, labels


def _point_lines(path: pathlib.Path, text: str) -> tuple[tuple[int, int, int], list[str]]:
    """The header and exactly ``num_points`` point lines (a missing or extra line refused)."""
    if not text.strip():
        raise _at(path, 1, "the file is empty, without the header `num_points num_features num_labels`",
                  _TRUNCATED_FIX)
    lines = text.split("\n")
    if lines[-1] == "":  # the final newline
        lines.pop()
    header = _header(path, lines[0])
    points = lines[1:]
    if len(points) < header[0]:
        raise _at(path, len(points) + 2, f"the file ends after {len(points)} of the {header[0]} points its header "
                                         f"declares", _TRUNCATED_FIX)
    if len(points) > header[0]:
        raise _at(path, header[0] + 2, f"the header declares {header[0]} points but the file has more lines "
                                       f"({len(points)}; a blank line counts as a point)",
                  "Fix the header's point count, or remove the extra lines.")
    _prescan(path, text, points)
    return header, points


_NOT_IN_NUMBERS = re.compile(r"_|:[^\s:]*:")  # Python's int() and float() take '1_000'; a token has one ':'


def _prescan(path: pathlib.Path, text: str, points: list[str]) -> None:
    """Refuse what the per-line counts of `_numbers` cannot see: a token with two colons, a '_' in a number."""
    match = _NOT_IN_NUMBERS.search(text)
    if match:
        line = text.count("\n", 0, match.start()) + 1
        problem = "'_' is not part of a number in this format" if match.group() == "_" else None
        raise _at(path, line, problem or _token_problem(points[line - 2]) or "a token has two ':'")


def _split_line(line: str) -> tuple[str, str]:
    """``(labels, features)`` text of one point line."""
    if not line or line[0].isspace():
        return "", line
    head, *rest = line.split(None, 1)
    if ":" in head:  # no labels, and no leading space either
        return "", line
    return head, rest[0] if rest else ""


class _Tokens(NamedTuple):
    labels: list[str]        # the label text of each line ('' for none)
    parts: list[str]         # every line's features split at ':' and whitespace: id, value, id, value, ...
    num_parts: np.ndarray    # [N] parts per line
    num_colons: np.ndarray   # [N] ':' per line
    num_tokens: np.ndarray   # [N] whitespace-separated feature tokens per line


def _tokenise(points: list[str]) -> _Tokens:
    labels, parts, num_parts, num_colons, num_tokens = [], [], [], [], []
    for line in points:
        head, feats = _split_line(line)
        labels.append(head)
        p = feats.replace(":", " ").split()
        parts.extend(p)
        num_parts.append(len(p))
        num_colons.append(feats.count(":"))
        num_tokens.append(len(feats.split()))
    return _Tokens(labels, parts, *(np.asarray(a, np.int64) for a in (num_parts, num_colons, num_tokens)))


def _id_problem(tok: str) -> Optional[str]:
    """Why ``tok`` is not a decimal integer id that fits int64 (a negative one passes: the range check names it)."""
    digits = tok[1:] if tok[:1] == "-" else tok
    if not digits.isdigit():
        return "is not an integer id"
    return "is too large for an id" if len(digits) > 18 else None


def _token_problem(line: str) -> Optional[str]:
    """What is malformed in one point line's tokens (ids, colons, numbers), or None."""
    head, feats = _split_line(line)
    for tok in head.split(",") if head else ():
        problem = _id_problem(tok)
        if problem:
            return f"label {tok[:24]!r} (in {head[:40]!r}) {problem}"
    for tok in feats.split():
        fid, sep, value = tok.partition(":")
        problem = _id_problem(fid) if sep and ":" not in value else "is not `id:value`"
        if problem:
            return f"feature {tok[:40]!r} {problem}"
        try:
            float(value)
        except ValueError:
            return f"feature {tok[:40]!r} has the value {value[:20]!r}, not a number"
    return None


def _refuse_tokens(path: pathlib.Path, points: list[str], rows: Any) -> None:
    """Raise for the first of ``rows`` (or of all lines) whose tokens are malformed."""
    for row in rows:
        problem = _token_problem(points[row])
        if problem:
            raise _at(path, row + 2, problem)
    raise _at(path, 1, "the file could not be parsed, though no line is malformed on its own")  # not reached


def _numbers(path: pathlib.Path, points: list[str], tokens: _Tokens):
    """``(label_ptr, label_ids, feature_ptr, feature_ids, values)`` as int64 / float64, unchecked ranges."""
    bad = np.flatnonzero((tokens.num_parts != 2 * tokens.num_colons) | (tokens.num_colons != tokens.num_tokens))
    if bad.size:
        _refuse_tokens(path, points, bad)
    label_counts = np.asarray([h.count(",") + 1 if h else 0 for h in tokens.labels], np.int64)
    try:
        label_ids = np.fromiter(map(int, ",".join(h for h in tokens.labels if h).split(",")) if label_counts.any()
                                else (), np.int64, int(label_counts.sum()))
        feature_ids = np.fromiter(map(int, tokens.parts[0::2]), np.int64, len(tokens.parts) // 2)
        values = np.fromiter(map(float, tokens.parts[1::2]), np.float64, len(tokens.parts) // 2)
    except (ValueError, OverflowError):
        _refuse_tokens(path, points, range(len(points)))
    return _indptr(label_counts), label_ids, _indptr(tokens.num_parts // 2), feature_ids, values


def _indptr(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _row_of(indptr: np.ndarray, position: int) -> int:
    """The row holding entry ``position`` of a CSR matrix."""
    return int(np.searchsorted(indptr, position, side="right")) - 1


def _check_ids(path: pathlib.Path, indptr: np.ndarray, ids: np.ndarray, limit: int, what: str) -> None:
    """Refuse the first id outside ``[0, limit)``, naming its line."""
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        i = int(bad[0])
        problem = "is negative" if ids[i] < 0 else f"is past the header's {limit} {what}s (ids 0..{limit - 1})"
        raise _at(path, _row_of(indptr, i) + 2, f"{what} id {int(ids[i])} {problem}",
                  "Fix the line, or the header's count if the file has more " + what + "s.")


def _check_values(path: pathlib.Path, indptr: np.ndarray, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The values as float32, refusing the first that is not finite there (NaN, infinite, or past float32)."""
    with np.errstate(over="ignore"):
        out = values.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        i = int(bad[0])
        raise _at(path, _row_of(indptr, i) + 2, f"feature {int(ids[i])} has the value {float(values[i])!r}, not a "
                                                f"finite float32", "Fix the value; features must be finite numbers.")
    return out


def _sorted_rows(path: pathlib.Path, indptr: np.ndarray, ids: np.ndarray, limit: int, what: str) -> np.ndarray:
    """The order that sorts ids ascending within each row; an id twice on one line is refused."""
    rows = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    keys = rows * limit + ids
    order = np.argsort(keys, kind="stable")
    twice = np.flatnonzero(np.diff(keys[order]) == 0)
    if twice.size:
        row = int(rows[order[twice[0]]])
        raise _at(path, row + 2, f"{what} id {int(ids[order[twice[0]]])} appears twice on the line",
                  f"Give each {what} once per point.")
    return order


def parse_xmc(path: PathLike) -> XMCData:
    """Parse an XMC repository text file (plain or gzipped), without the cache (see :func:`read_xmc`).

    Raises:
      DataNotFoundError: no such file.
      ValueError: ``{path}: line {n}: {problem}. {fix}`` for every malformed input the module docstring lists.
    """
    path = _existing_file(path)
    (_, num_features, num_labels), points = _point_lines(path, _read_text(path))
    label_ptr, label_ids, feature_ptr, feature_ids, values = _numbers(path, points, _tokenise(points))
    _check_ids(path, label_ptr, label_ids, num_labels, "label")
    _check_ids(path, feature_ptr, feature_ids, num_features, "feature")
    values = _check_values(path, feature_ptr, feature_ids, values)
    f_order = _sorted_rows(path, feature_ptr, feature_ids, num_features, "feature")
    l_order = _sorted_rows(path, label_ptr, label_ids, num_labels, "label")
    return _record(path.name, feature_ptr, feature_ids[f_order], values[f_order], label_ptr, label_ids[l_order],
                   num_features, num_labels)


def write_xmc(path: PathLike, data: XMCData) -> pathlib.Path:
    """Write ``data`` in the repository text format, gzipped when ``path`` ends in ``.gz`` (with mtime 0, so the same
    data gives the same bytes). Values are written with 9 significant digits: :func:`read_xmc` gives back the same
    float32 arrays. A point without labels starts with a space."""
    path = pathlib.Path(path).expanduser()
    feats, sets = data.features, data.labels
    lines = [f"{data.num_points} {data.num_features} {data.num_labels}"]
    for i in range(data.num_points):
        labels = ",".join(map(str, sets.ids[sets.indptr[i]:sets.indptr[i + 1]].tolist()))
        lo, hi = feats.indptr[i], feats.indptr[i + 1]
        pairs = zip(feats.ids[lo:hi].tolist(), feats.values[lo:hi].tolist())
        lines.append(labels + " " + " ".join(f"{j}:{v:.9g}" for j, v in pairs))
    raw = ("\n".join(lines) + "\n").encode("ascii")
    if path.suffix == ".gz":
        raw = gzip.compress(raw, mtime=0)
    path.write_bytes(raw)
    return path


def _existing_file(path: PathLike) -> pathlib.Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ArgError("path", path, f"path={path!r} must be a file path (a non-empty str or os.PathLike).", "")
    path = pathlib.Path(path).expanduser()
    if not path.is_file():
        raise DataNotFoundError(f"XMC file {path} does not exist; pass the path of a file in the Extreme "
                                f"Classification Repository text format (plain or .gz).")
    return path


# --------------------------------------------------------------------------
# The cache
# --------------------------------------------------------------------------

_CACHE_FIELDS = ("feature_indptr", "feature_ids", "feature_values", "label_indptr", "label_ids", "sizes")
_CACHE_VERSION = "xmc-v1"  # change it when the parse changes: old cache files are then never read


def _cache_file(path: pathlib.Path) -> pathlib.Path:
    """``$ISTJAX_CACHE_DIR/xmc-<file name>-<key>.npz``, the key hashing the resolved path, size and mtime."""
    st = path.stat()
    key = hashlib.sha256(f"{_CACHE_VERSION}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in path.name)[:60]
    return _cache_dir() / f"xmc-{stem}-{key[:16]}.npz"


def _csr_problem(indptr: np.ndarray, ids: np.ndarray, limit: int, what: str) -> Optional[str]:
    """What breaks the CSR invariants of :class:`SparseRows` (ascending distinct ids within rows), or None."""
    if indptr.ndim != 1 or ids.ndim != 1 or indptr.size < 1 or indptr.dtype.kind not in "iu" \
            or ids.dtype.kind not in "iu":
        return f"{what}: indptr {indptr.dtype} {indptr.shape} and ids {ids.dtype} {ids.shape} are not 1-D integers"
    if indptr[0] != 0 or indptr[-1] != ids.size or np.any(np.diff(indptr) < 0):
        return f"{what}: indptr does not run from 0 to {ids.size} without decreasing"
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        return f"{what}: an id outside [0, {limit})"
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    if ids.size > 1 and np.any((np.diff(ids.astype(np.int64)) <= 0) & (np.diff(rows) == 0)):
        return f"{what}: ids not ascending within a row"
    return None


def _from_cache(where: pathlib.Path, name: str, arrays: tuple[np.ndarray, ...]) -> XMCData:
    """The cached record, its invariants checked (a cache file of another shape is refused as damaged)."""
    f_ptr, f_ids, f_vals, l_ptr, l_ids, sizes = arrays
    problem = None if sizes.shape == (2,) and sizes.dtype.kind in "iu" else f"sizes {sizes.dtype} {sizes.shape}"
    if problem is None:
        problem = (_csr_problem(f_ptr, f_ids, int(sizes[0]), "features")
                   or _csr_problem(l_ptr, l_ids, int(sizes[1]), "labels"))
    if problem is None and (f_vals.shape != f_ids.shape or f_ptr.shape != l_ptr.shape):
        problem = f"{f_vals.size} values for {f_ids.size} feature ids, or rows that differ"
    if problem is not None:
        raise _damaged_file(where, "complete istjax cache file", ValueError(problem),
                            "Delete it; the next load rebuilds it.")
    return _record(name, f_ptr, f_ids, f_vals, l_ptr, l_ids, int(sizes[0]), int(sizes[1]))


def read_xmc(path: PathLike, *, cache: bool = True) -> XMCData:
    """An XMC repository text file (plain or gzipped) as an :class:`XMCData`, parsed once and then cached.

    Args:
      path: the file.
      cache: read and write the parsed arrays in ``$ISTJAX_CACHE_DIR`` (default ``~/.cache/istjax``) as
        ``xmc-<name>-<key>.npz``, the key hashing the file's resolved path, size and modification time (so an
        edited or replaced file is parsed again); False parses every time and writes nothing.

    Raises:
      DataNotFoundError: no such file.
      ValueError: a malformed file, naming it and the line (:func:`parse_xmc`); a cache file that does not read
        whole or breaks the record's invariants, naming it (delete it to rebuild).
    """
    path = _existing_file(path)
    where = _cache_file(path)
    cached = _read_cache(where, _CACHE_FIELDS) if cache else None
    if cached is not None:
        return _from_cache(where, path.name, cached)
    data = parse_xmc(path)
    if cache:
        _write_cache(where, feature_indptr=data.features.indptr, feature_ids=data.features.ids,
                     feature_values=data.features.values, label_indptr=data.labels.indptr,
                     label_ids=data.labels.ids, sizes=np.asarray([data.num_features, data.num_labels], np.int64))
    return data


# --------------------------------------------------------------------------
# Data sets by name
# --------------------------------------------------------------------------

XMC_DEBIAN_DEPS_FILES = ("train.txt.gz", "test.txt.gz", "labels.txt")
"""The files :func:`load_xmc_debian_deps` reads (the data files may also be uncompressed, without ``.gz``)."""

_DEBIAN_HOW = ("The set is the folder xmc-debian-deps/ (train.txt.gz, test.txt.gz, labels.txt, built by its "
               "build.py from Debian's package index); set ISTJAX_DATA_DIR to the folder that holds "
               "xmc-debian-deps/, or pass data_dir=<the xmc-debian-deps folder>.")


def xmc_debian_deps_dir(data_dir: Optional[PathLike] = None) -> pathlib.Path:
    """The folder :func:`load_xmc_debian_deps` reads: ``data_dir`` if given, else ``$ISTJAX_DATA_DIR/xmc-debian-deps``;
    with neither, a DataNotFoundError saying to set ISTJAX_DATA_DIR."""
    if data_dir is not None:
        if not isinstance(data_dir, (str, os.PathLike)) or not str(data_dir):
            raise ArgError("data_dir", data_dir, f"data_dir={data_dir!r} must be a folder path or None;",
                           "pass the xmc-debian-deps folder.")
        return pathlib.Path(data_dir).expanduser()
    env = os.environ.get("ISTJAX_DATA_DIR")
    if not env:
        raise DataNotFoundError(f"xmc-debian-deps: ISTJAX_DATA_DIR is not set and no data_dir was given. {_DEBIAN_HOW}")
    return pathlib.Path(env).expanduser() / "xmc-debian-deps"


def _data_file(folder: pathlib.Path, name: str) -> pathlib.Path:
    """``folder/name``, or its uncompressed twin; DataNotFoundError naming what the folder holds otherwise."""
    for candidate in (folder / name, folder / name.removesuffix(".gz")):
        if candidate.is_file():
            return candidate
    present = sorted(p.name for p in folder.iterdir())[:8]
    raise DataNotFoundError(f"xmc-debian-deps: {folder} has no {name} (found: {present or 'nothing'}). {_DEBIAN_HOW}")


def _label_names(path: pathlib.Path, num_labels: int) -> tuple[str, ...]:
    """One name per label id, line ``i + 1`` naming label ``i``; the count must match the data files'."""
    names = path.read_text(encoding="utf-8").split("\n")
    if names and names[-1] == "":
        names.pop()
    if len(names) != num_labels:
        raise ValueError(f"{path}: {len(names)} label names, but the data files declare {num_labels} labels; the "
                         f"names belong to another version of the set. Copy the folder again, whole.")
    empty = [i for i, n in enumerate(names) if not n.strip()]
    if empty:
        raise ValueError(f"{path}: line {empty[0] + 1}: an empty label name. Copy the folder again, whole.")
    return tuple(names)


def load_xmc_debian_deps(data_dir: Optional[PathLike] = None, *, cache: bool = True) -> XMCDataset:
    """``xmc-debian-deps``: 43,333 train / 10,345 test Debian packages, 31,435 tf-idf features of their
    descriptions, 15,186 labels (their dependencies); see the set's README for the construction and a baseline.

    Args:
      data_dir: the ``xmc-debian-deps`` folder; default ``$ISTJAX_DATA_DIR/xmc-debian-deps``.
      cache: as in :func:`read_xmc`.

    Raises:
      DataNotFoundError: the folder or a file is missing (says to set ISTJAX_DATA_DIR); also a ValueError.
      ValueError: a malformed file (naming it and the line), or files that disagree on the feature or label count.
    """
    folder = xmc_debian_deps_dir(data_dir)
    if not folder.is_dir():
        raise DataNotFoundError(f"xmc-debian-deps: the folder {folder} does not exist. {_DEBIAN_HOW}")
    files = [_data_file(folder, name) for name in XMC_DEBIAN_DEPS_FILES]
    train, test = (read_xmc(f, cache=cache) for f in files[:2])
    if (train.num_features, train.num_labels) != (test.num_features, test.num_labels):
        raise ValueError(f"{files[1]} declares {test.num_features} features and {test.num_labels} labels, but "
                         f"{files[0]} declares {train.num_features} and {train.num_labels}; both splits must share "
                         f"one feature and label space. Copy the folder again, whole.")
    names = _label_names(files[2], train.num_labels)
    return XMCDataset("xmc-debian-deps", train._replace(name="xmc-debian-deps/train"),
                      test._replace(name="xmc-debian-deps/test"), names)


def synthetic_xmc_dataset(num_train: int = 8000, num_test: int = 2000, **kwargs: Any) -> XMCDataset:
    """A train / test pair from one :func:`synthetic_xmc` problem (same labels' features, same label frequencies):
    its first ``num_train`` points and the ``num_test`` after them. ``kwargs``: :func:`synthetic_xmc`'s arguments
    other than ``num_points``."""
    num_train = _check_positive("num_train", num_train)
    num_test = _check_positive("num_test", num_test)
    if "num_points" in kwargs:
        raise ArgError("num_points", kwargs["num_points"], "xmc-synthetic takes num_train and num_test,",
                       "not num_points.")
    data = synthetic_xmc(num_train + num_test, **kwargs)
    train = take_rows(data, np.arange(num_train))._replace(name="xmc-synthetic/train")
    test = take_rows(data, np.arange(num_train, num_train + num_test))._replace(name="xmc-synthetic/test")
    return XMCDataset("xmc-synthetic", train, test)


_XMC_LOADERS = {"xmc-debian-deps": load_xmc_debian_deps, "xmc-synthetic": synthetic_xmc_dataset}
XMC_DATASETS: tuple[str, ...] = tuple(_XMC_LOADERS)
"""The names :func:`load_xmc` knows."""


def load_xmc(name: str, **kwargs: Any) -> XMCDataset:
    """An XMC data set by name: ``"xmc-debian-deps"`` (:func:`load_xmc_debian_deps`: ``data_dir``, ``cache``) or
    ``"xmc-synthetic"`` (:func:`synthetic_xmc_dataset`: ``num_train``, ``num_test`` and the generator's arguments).

    These return the sparse record (:class:`XMCDataset`); :data:`istjax.data.DATASETS` holds their training views
    (:func:`as_dataset`) as ``xmc_debian_deps`` and ``xmc_synthetic``.
    """
    if name not in _XMC_LOADERS:
        raise ArgError("name", name, f"name={name!r} is not a known XMC data set;",
                       f"choose one of {list(XMC_DATASETS)}.")
    return _XMC_LOADERS[name](**kwargs)


# --------------------------------------------------------------------------
# Rows, and fixed-shape batches of them
# --------------------------------------------------------------------------


class SparseBatch(NamedTuple):
    """Rows of an :class:`XMCData` as fixed-shape padded arrays (:func:`pack_rows`); ``S`` is the shape of ``rows``.

    Fields:
      ids: ``[*S, nnz] int32`` feature ids of each row, ascending, then padding id 0.
      values: ``[*S, nnz] float32`` their values, then padding value 0, so a padded slot adds nothing to an
        embedding bag ``sum_j values[j] * E[ids[j]]`` and needs no mask.
      labels: ``[*S, max_labels] int32`` label ids of each row, ascending, then padding -1 (never a label id): a
        hit test ``any(labels == predicted)`` needs no mask; a loss that gathers logits at ``labels`` masks with
        ``labels >= 0`` and gathers at ``max(labels, 0)`` (a -1 index would wrap to the last label).
    """

    ids: np.ndarray
    values: np.ndarray
    labels: np.ndarray


def bucket(n: int, minimum: int = 8) -> int:
    """The padded width for ``n`` entries: the next power of two ``>= max(n, minimum)``, so that ``jit`` sees a few
    shapes (8, 16, 32, ...) rather than one per batch."""
    n = max(int(n), int(minimum), 1)
    return 1 << (n - 1).bit_length()


def _row_index(rows: Any, num_rows: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """``rows`` as flat int64 row numbers, checked, and its shape."""
    arr = np.asarray(rows)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise ArgError("rows", rows if arr.size < 8 else f"{arr.dtype} {arr.shape}",
                       f"rows must be integer row numbers, got {arr.dtype};", "pass an int array (any shape).")
    flat = arr.reshape(-1).astype(np.int64)
    bad = flat[(flat < 0) | (flat >= num_rows)]
    if bad.size:
        raise ArgError("rows", int(bad[0]), f"row {int(bad[0])} is outside [0, {num_rows}) ({bad.size} in all);",
                       f"pick rows of the {num_rows} points.")
    return flat, arr.shape


def _gather(sparse: SparseRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lengths [R], row_of [T], source [T])``: the entries of ``rows`` in order, ``source`` indexing ``sparse``."""
    starts = sparse.indptr[rows]
    lengths = sparse.indptr[rows + 1] - starts
    offsets = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    row_of = np.repeat(np.arange(len(rows)), lengths)
    source = np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, lengths)
    return lengths, row_of, source


def take_rows(data: XMCData, rows: Any) -> XMCData:
    """The points ``rows`` (1-D, in that order, repeats allowed) of ``data`` as a new :class:`XMCData`."""
    flat, _ = _row_index(rows, data.num_points)
    parts = []
    for sparse in (data.features, data.labels):
        lengths, _, source = _gather(sparse, flat)
        parts.append((_indptr(lengths), sparse.ids[source],
                      None if sparse.values is None else sparse.values[source]))
    (f_ptr, f_ids, f_vals), (l_ptr, l_ids, _) = parts
    return _record(data.name, f_ptr, f_ids, f_vals, l_ptr, l_ids, data.num_features, data.num_labels)


def _padded(sparse: SparseRows, rows: np.ndarray, width: Optional[int], arg: str, fill: int):
    """``(ids [R, width], values [R, width] or None)``: the rows left-aligned, padded with ``fill`` / 0."""
    lengths, row_of, source = _gather(sparse, rows)
    longest = int(lengths.max()) if lengths.size else 0
    if width is None:
        width = bucket(longest)
    else:
        width = _check_positive(arg, width)
        if longest > width:
            r = int(np.argmax(lengths))
            raise ArgError(arg, width, f"point {int(rows[r])} has {longest} entries, more than {arg}={width};",
                           f"pass {arg}>={longest}, or {arg}=None for the batch's bucket ({bucket(longest)}).")
    col = np.arange(len(source)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    ids = np.full((len(rows), width), fill, np.int32)
    ids[row_of, col] = sparse.ids[source]
    if sparse.values is None:
        return ids, None
    values = np.zeros((len(rows), width), np.float32)
    values[row_of, col] = sparse.values[source]
    return ids, values


def pack_labels(data: XMCData, rows: Any, *, max_labels: Optional[int] = None) -> np.ndarray:
    """``[*S, max_labels] int32``: the label sets of ``rows`` (shape ``S``), ascending, padded with -1.

    ``max_labels=None``: :func:`bucket` of the longest set among ``rows``; an int: that width (a longer set is
    refused, naming the point)."""
    flat, shape = _row_index(rows, data.num_points)
    ids, _ = _padded(data.labels, flat, max_labels, "max_labels", -1)
    return ids.reshape(*shape, ids.shape[-1])


def pack_rows(data: XMCData, rows: Any, *, nnz: Optional[int] = None,
              max_labels: Optional[int] = None) -> SparseBatch:
    """Rows of ``data`` as a :class:`SparseBatch` of fixed-shape arrays (a pure function of its arguments).

    Args:
      data: the points.
      rows: row numbers of any shape ``S`` (``[B]``, or a round's ``[W, K, B]``).
      nnz: the feature width; None: :func:`bucket` of the most nonzero features among ``rows`` (a power of two,
        at least 8). Pass a fixed width (e.g. ``bucket`` of the split's maximum) for one shape across batches.
      max_labels: the label width, the same way.

    Returns:
      ``SparseBatch(ids [*S, nnz], values [*S, nnz], labels [*S, max_labels])``: features padded with id 0 and
      value 0, labels padded with -1 (see :class:`SparseBatch` for why).

    Raises:
      ArgError: a row outside ``[0, N)``, or a row longer than a given ``nnz`` / ``max_labels``.
    """
    flat, shape = _row_index(rows, data.num_points)
    ids, values = _padded(data.features, flat, nnz, "nnz", 0)
    labels, _ = _padded(data.labels, flat, max_labels, "max_labels", -1)
    return SparseBatch(*(a.reshape(*shape, a.shape[-1]) for a in (ids, values, labels)))


# --------------------------------------------------------------------------
# A generator
# --------------------------------------------------------------------------


def _check_real(arg: str, value: Any, low: float, high: float = np.inf) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or not low <= float(value) <= high:
        bounds = f"in [{low}, {high}]" if np.isfinite(high) else f">= {low}"
        raise ArgError(arg, value, f"{arg}={value!r} must be a number {bounds};", f"pass {arg} {bounds}.")
    return float(value)


def _label_sets(rng: np.random.Generator, n: int, num_labels: int, mean: float, exponent: float) -> np.ndarray:
    """``[n, width] int64`` distinct labels per point, -1 padded: ``1 + Poisson(mean - 1)`` of them (at most
    ``num_labels``), drawn one at a time with probability ``∝ (l + 1) ** -exponent`` among those not yet drawn."""
    counts = np.minimum(1 + rng.poisson(mean - 1.0, n), num_labels)
    cdf = np.cumsum((np.arange(num_labels) + 1.0) ** -exponent)
    cdf /= cdf[-1]
    chosen = np.full((n, int(counts.max())), -1, np.int64)
    have = np.zeros(n, np.int64)
    while True:
        short = np.flatnonzero(have < counts)
        if not short.size:
            return chosen
        draw = np.minimum(np.searchsorted(cdf, rng.random(short.size), side="right"), num_labels - 1)
        new = ~(chosen[short] == draw[:, None]).any(1)
        rows = short[new]
        chosen[rows, have[rows]] = draw[new]
        have[rows] += 1


def _feature_draws(rng: np.random.Generator, sets: np.ndarray, indicative: np.ndarray, num_features: int,
                   mean: float, signal: float) -> tuple[np.ndarray, np.ndarray]:
    """``(row [T], feature [T])``: ``1 + Poisson(mean - 1)`` draws per point, each from the indicative features of
    one of its labels (uniform label, uniform feature) with probability ``signal``, else uniform over all."""
    n = len(sets)
    draws = 1 + rng.poisson(mean - 1.0, n)
    from_labels = rng.binomial(draws, signal)
    row_s = np.repeat(np.arange(n), from_labels)
    num_set = (sets >= 0).sum(1)
    slot = (rng.random(row_s.size) * num_set[row_s]).astype(np.int64)
    label = sets[row_s, slot]
    feature_s = indicative[label, rng.integers(0, indicative.shape[1], row_s.size)]
    row_n = np.repeat(np.arange(n), draws - from_labels)
    feature_n = rng.integers(0, num_features, row_n.size)
    return np.concatenate([row_s, row_n]), np.concatenate([feature_s, feature_n])


def _tf_rows(n: int, row: np.ndarray, feature: np.ndarray, num_features: int):
    """CSR ``(indptr, ids, values)`` of the draws: value ``ln(1 + count)``, each row scaled to unit L2 norm."""
    keys, counts = np.unique(row.astype(np.int64) * num_features + feature, return_counts=True)
    rows, ids = keys // num_features, keys % num_features
    values = np.log1p(counts.astype(np.float64))
    norms = np.sqrt(np.bincount(rows, values ** 2, minlength=n))
    return _indptr(np.bincount(rows, minlength=n)), ids, values / norms[rows]


def synthetic_xmc(num_points: int = 10_000, num_features: int = 5_000, num_labels: int = 1_000, *,
                  labels_per_point: float = 4.0, features_per_point: float = 30.0, label_exponent: float = 1.0,
                  features_per_label: int = 8, signal: float = 0.5, seed: int = 0) -> XMCData:
    """A seeded synthetic XMC problem (numpy only): power-law label frequencies, features that tell the labels.

    The problem (fixed by ``seed``): label ``l`` has ``features_per_label`` *indicative* features, drawn uniformly
    (with replacement) from all ``num_features``, so labels overlap in features only by chance, and a popularity
    ``∝ (l + 1) ** -label_exponent`` (Zipf; label 0 is the most frequent, as in ``xmc-debian-deps``). Each point:

    1. ``1 + Poisson(labels_per_point - 1)`` distinct labels (capped at ``num_labels``), drawn by popularity
       without replacement (mean about ``labels_per_point``);
    2. ``1 + Poisson(features_per_point - 1)`` feature draws; each, with probability ``signal``, one of the
       indicative features of one of the point's labels (both uniform), else a noise feature uniform over all;
    3. value of a feature ``ln(1 + times drawn)``, the row scaled to unit L2 norm (like tf-idf rows). Repeated draws
       merge, so the mean nonzero count is below ``features_per_point`` (about 26 for 30 with the other defaults).

    Predicting the labels needs a separate direction per label (their indicative sets are unrelated), so the best
    rank-``H`` predictor, and a model with ``H`` hidden units, improves with ``H`` up to about ``num_labels``.

    Args:
      num_points, num_features, num_labels: the sizes (>= 1).
      labels_per_point: mean labels per point (>= 1).
      features_per_point: mean feature draws per point (>= 1).
      label_exponent: the Zipf exponent of label popularity (>= 0; 0: uniform).
      features_per_label: indicative features per label (>= 1).
      signal: the fraction of feature draws that come from the labels' indicative features (in [0, 1]).
      seed: fixes both the problem (the labels' indicative features) and the points drawn from it.

    Returns:
      An :class:`XMCData` named ``"synthetic"``, as :func:`read_xmc` returns. The same arguments give the same
      arrays; to split one problem into train and test, generate once and :func:`take_rows` (as
      :func:`synthetic_xmc_dataset` does).
    """
    n, num_features, num_labels, per_label = (_check_positive(a, v) for a, v in (
        ("num_points", num_points), ("num_features", num_features), ("num_labels", num_labels),
        ("features_per_label", features_per_label)))
    per_point, exponent, draws, signal = (_check_real(a, v, low, high) for a, v, low, high in (
        ("labels_per_point", labels_per_point, 1.0, np.inf), ("label_exponent", label_exponent, 0.0, np.inf),
        ("features_per_point", features_per_point, 1.0, np.inf), ("signal", signal, 0.0, 1.0)))
    world, points = (np.random.default_rng([check_seed(seed), stream]) for stream in (0, 1))
    indicative = world.integers(0, num_features, (num_labels, per_label))
    sets = _label_sets(points, n, num_labels, per_point, exponent)
    row, feature = _feature_draws(points, sets, indicative, num_features, draws, signal)
    ascending = np.sort(np.where(sets >= 0, sets, num_labels), axis=1)  # -1 padding last
    return _record("synthetic", *_tf_rows(n, row, feature, num_features), _indptr((sets >= 0).sum(1)),
                   ascending[ascending < num_labels], num_features, num_labels)  # label ids row by row


# --------------------------------------------------------------------------
# The training view: a Dataset of (feature id, value) pairs and padded label sets
# --------------------------------------------------------------------------

MAX_EXACT_ID = 1 << 24
"""Feature ids are carried in float32 (:func:`feature_pairs`), exact below ``2**24`` (16,777,216; Amazon-670k has
135,909 features)."""


def feature_pairs(data: XMCData, rows: Any = None, *, nnz: int = 256) -> tuple[np.ndarray, int]:
    """``(pairs [R, nnz, 2] float32, truncated)``: each row's nonzero features as ``(id, value)`` pairs, padded with
    ``(0, 0)`` (a padded slot adds nothing to an embedding bag); ``truncated`` counts the rows that had more than
    ``nnz`` and kept their ``nnz`` largest values (``|value|``; ties by lower id).

    One float32 array rather than two so that every batch path of the library (slicing, ``jnp.take`` over
    examples, device puts, evaluation chunks) carries sparse rows unchanged; ids are exact in float32 below
    :data:`MAX_EXACT_ID` (refused above). ``istjax.models.EmbeddingBag`` reads the layout back.
    """
    nnz = _check_positive("nnz", nnz)
    if data.num_features > MAX_EXACT_ID:
        raise ArgError("num_features", data.num_features,
                       f"{data.name}: {data.num_features} features; ids above 2**24 are not exact in float32 pairs,",
                       "hash the features into fewer ids first.")
    flat = np.arange(data.num_points) if rows is None else _row_index(rows, data.num_points)[0]
    lengths, row_of, source = _gather(data.features, flat)
    ids, values = data.features.ids[source], data.features.values[source]
    # Within each row, entries ordered by |value| descending (ties: lower id), then the first nnz kept, then ids
    # restored to ascending order.
    order = np.lexsort((ids, -np.abs(values), row_of))
    rank = np.arange(len(order)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep = order[rank < nnz]
    keep = keep[np.lexsort((ids[keep], row_of[keep]))]
    kept_rows, kept_ids, kept_values = row_of[keep], ids[keep], values[keep]
    col = np.arange(len(keep)) - np.repeat(np.cumsum(np.minimum(lengths, nnz)) - np.minimum(lengths, nnz),
                                           np.minimum(lengths, nnz))
    pairs = np.zeros((len(flat), nnz, 2), np.float32)
    pairs[kept_rows, col, 0] = kept_ids
    pairs[kept_rows, col, 1] = kept_values
    return pairs, int((lengths > nnz).sum())


def as_dataset(data: XMCDataset, *, nnz: int = 256, max_labels: Optional[int] = None,
               log: Optional[Any] = None) -> Dataset:
    """``data`` as an :class:`istjax.data.Dataset` the whole library trains on (``istjax train``, every algorithm
    and runtime): ``x [N, nnz, 2]`` (:func:`feature_pairs`), ``y [N, max_labels] int32`` label sets padded with
    -1 (:func:`pack_labels`; default: :func:`bucket` of the longest set of either split, so both share one width),
    ``num_classes`` the number of labels, ``num_feature_ids`` the number of features (the embedding bag's rows) and
    ``label_weights`` the training labels' inverse propensities (:func:`istjax.xmc.metrics.propensities` with its
    default A = 0.55, B = 1.5; PSP@k's weights).

    Rows with more than ``nnz`` features keep their ``nnz`` largest (``log`` is told how many, per split). The
    features are not standardised (tf-idf rows are already scaled); the labels are sets, so the model's scores
    must be multi-label ones (``istjax.models.SparseMLP``).
    """
    width = max_labels or bucket(max(int(s.labels.row_lengths.max(initial=1)) for s in (data.train, data.test)))
    splits = {}
    for split in ("train", "test"):
        part = getattr(data, split)
        pairs, cut = feature_pairs(part, nnz=nnz)
        if cut and log is not None:
            log(f"{data.name}: {cut} of {part.num_points} {split} points have more than nnz={nnz} features and keep "
                f"their {nnz} largest (data.kwargs.nnz raises it)")
        splits[split] = (pairs, pack_labels(part, np.arange(part.num_points), max_labels=width))
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    _freeze(train_x, train_y, test_x, test_y)
    weights = 1.0 / propensities(data.train.label_counts(), max(2, data.train.num_points))
    return Dataset(data.name.replace("-", "_"), train_x, train_y, test_x, test_y, int(data.train.num_labels),
                   num_feature_ids=int(data.train.num_features), label_weights=weights.astype(np.float32))


def load_debian_deps_dataset(data_dir: Optional[PathLike] = None, nnz: int = 256,
                             cache: bool = True) -> Dataset:
    """``xmc-debian-deps`` as a training :class:`istjax.data.Dataset` (:func:`as_dataset`): ``DATASETS`` name
    ``xmc_debian_deps``. 43,333 / 10,345 points, 31,435 features, 15,186 labels; at the default ``nnz=256`` 21
    training and 2 test points keep their 256 largest features (the longest description has 2,123 nonzero)."""
    return as_dataset(load_xmc_debian_deps(data_dir, cache=cache), nnz=nnz)


def load_synthetic_dataset(num_train: int = 8000, num_test: int = 2000, num_features: int = 5000,
                           num_labels: int = 1000, labels_per_point: float = 4.0, features_per_point: float = 30.0,
                           label_exponent: float = 1.0, features_per_label: int = 8, signal: float = 0.5,
                           seed: int = 0, nnz: int = 64) -> Dataset:
    """:func:`synthetic_xmc_dataset` as a training :class:`istjax.data.Dataset` (:func:`as_dataset`):
    ``DATASETS`` name ``xmc_synthetic``. The defaults train in minutes on two cores; Amazon-670k's shape is
    ``num_features=135909, num_labels=670091`` (its memory, not its accuracy, is what this machine can show)."""
    data = synthetic_xmc_dataset(num_train, num_test, num_features=num_features, num_labels=num_labels,
                                 labels_per_point=labels_per_point, features_per_point=features_per_point,
                                 label_exponent=label_exponent, features_per_label=features_per_label,
                                 signal=signal, seed=seed)
    return as_dataset(data, nnz=nnz)
