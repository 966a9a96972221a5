"""The Extreme Classification Repository's text format: the record of an XMC data set, its parser, writer and cache.

The format is the repository's (Bhatia et al., http://manikvarma.org/downloads/XC/XMLRepository.html), plain or
gzipped (recognised by its magic bytes, not its name)::

    num_points num_features num_labels          # the header: three non-negative integers
    l1,l2,... f:v f:v ...                        # one line per point: label ids, then feature id:value pairs

Ids are 0-based. A point with no labels starts its line with whitespace (or with its first ``f:v``); a point with
neither labels nor features is an empty line. :func:`read_xmc` refuses, naming the file and the 1-based line (the
header is line 1, point ``i`` is line ``i + 2``) and the fix: a malformed header or line, a header whose counts do
not fit the int32 ids, a label or feature id outside ``[0, count)`` of the header (negative included), a value that
is not a finite float32, an id given twice on one line, and fewer or more point lines than the header declares (a
truncated file).

Every reader returns an :class:`XMCData`: two CSR matrices (:class:`SparseRows`) over the same points, the features
(with values) and the label sets (without), ids ascending within each row. Parsed arrays are cached as ``.npz`` in
``$ISTJAX_CACHE_DIR`` (or ``~/.cache/istjax``), keyed by the file's resolved path, size and modification time, so the
second read of a file skips the parse; a damaged cache file is refused, naming it (delete it to rebuild).

A folder of such files (train, test, label names) is read by :mod:`istjax.data.extreme.folder`; the named sets and
the training view are in :mod:`istjax.data.extreme`, which re-exports the public names here.
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
from istjax.data.files import DataNotFoundError, cache_dir, damaged_file, read_cache, write_cache

__all__ = [
    "SparseRows",
    "XMCData",
    "XMCDataset",
    "freeze",
    "indptr_from_counts",
    "make_record",
    "parse_xmc",
    "read_xmc",
    "write_xmc",
]

PathLike = Union[str, os.PathLike]

_FORMAT_FIX = ("The file must be in the Extreme Classification Repository format (header `points features labels`, "
               "then one line `l1,l2,... f:v f:v ...` per point, 0-based ids); fix the line or regenerate the file.")
_TRUNCATED_FIX = "The file is truncated or was cut short by a copy; copy or download it again."
_MAX_COUNT = 2**31 - 1  # ids are stored as int32: a larger header count would wrap them


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


def freeze(*arrays: Optional[np.ndarray]) -> None:
    """Makes every array given read-only (None is skipped): a record's arrays are shared by every later load."""
    for a in arrays:
        if a is not None:
            a.flags.writeable = False


def make_record(name: str, f_ptr, f_ids, f_vals, l_ptr, l_ids, num_features: int, num_labels: int) -> XMCData:
    """An XMCData of the given arrays, cast to the record's dtypes and made read-only."""
    arrays = (np.asarray(f_ptr, np.int64), np.asarray(f_ids, np.int32), np.asarray(f_vals, np.float32),
              np.asarray(l_ptr, np.int64), np.asarray(l_ids, np.int32))
    freeze(*arrays)
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
            raise damaged_file(path, "complete gzip file", e, "Copy or download it again.") from None
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
    if max(features, labels) > _MAX_COUNT:
        raise _at(path, 1, f"the header declares {features} features and {labels} labels; ids are int32, so each "
                           f"count must be at most {_MAX_COUNT:,}")
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
    return indptr_from_counts(label_counts), label_ids, indptr_from_counts(tokens.num_parts // 2), feature_ids, values


def indptr_from_counts(counts: np.ndarray) -> np.ndarray:
    """A CSR ``indptr [N + 1] int64`` from the ``[N]`` entry counts of the rows."""
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
    return make_record(path.name, feature_ptr, feature_ids[f_order], values[f_order], label_ptr, label_ids[l_order],
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
    return cache_dir() / f"xmc-{stem}-{key[:16]}.npz"


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
        raise damaged_file(where, "complete istjax cache file", ValueError(problem),
                            "Delete it; the next load rebuilds it.")
    return make_record(name, f_ptr, f_ids, f_vals, l_ptr, l_ids, int(sizes[0]), int(sizes[1]))


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
    cached = read_cache(where, _CACHE_FIELDS) if cache else None
    if cached is not None:
        return _from_cache(where, path.name, cached)
    data = parse_xmc(path)
    if cache:
        write_cache(where, feature_indptr=data.features.indptr, feature_ids=data.features.ids,
                     feature_values=data.features.values, label_indptr=data.labels.indptr,
                     label_ids=data.labels.ids, sizes=np.asarray([data.num_features, data.num_labels], np.int64))
    return data
