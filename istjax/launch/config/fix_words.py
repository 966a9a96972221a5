"""A library refusal's fix in the command line's words: ``use={"mode": "parameter_server"}`` of an `istjax.ArgError`
reads "Use --config.runtime.mode=parameter_server." here, and "Use mode='parameter_server'." from Python.

The library names a fix by its Python names (`istjax.core.errors`); this module alone knows the config field behind
each: first the field map of the build step that made the call (`istjax.launch.config.collect.Collector.step`:
``{"num_workers": "num_workers", "mode": "runtime.mode"}``), then `FIX_FIELDS` (the names a fix may give that no
argument of that call carries: the model, the algorithm, the sampler), then the config's own fields: one at the top,
then one of the sections (runtime, algorithm, sampler, clients, data, data.kwargs) or a field of a built-in model. A
renamed config field is renamed in these maps; the library's refusals do not change.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Optional

from istjax.core.errors import ArgError

__all__ = ["FIX_FIELDS", "config_terms", "config_words", "field_of", "flag_text"]

# Names a fix gives for a choice the Python API makes by object (a model class, a factory, a sampler) or that no
# call's field map carries.
FIX_FIELDS = {"model": "model.name", "algorithm": "algorithm.name", "backend": "runtime.name",
              "sampler": "sampler.name", "samplers": "sampler.groups", "data": "data.name", "dataset": "data.name",
              "graph_batches": "data.graph_batches", "vocabulary": "data.kwargs.vocabulary",
              "data_dir": "data.kwargs.data_dir", "path": "data.kwargs.path", "num_owners": "sampler.num_owners",
              # A federated run draws num_workers clients a round unless clients.fraction sets it, in as many
              # slots (more on MPI: a multiple of the process count); a split's kind is clients.split.
              "clients_per_round": "num_workers", "slots": "num_workers", "kind": "clients.split",
              # A data set's classes and held-out share: a loader's arguments where it takes them (synthetic_speech
              # and csbm; spoken_keywords and the natural clients' per-client split).
              "num_classes": "data.kwargs.num_classes", "test_fraction": "data.kwargs.test_fraction"}

_SECTIONS = ("runtime", "algorithm", "sampler", "clients", "data", "data.kwargs")


def config_terms(error: BaseException, fields: Optional[Mapping[str, Any]] = None, config=None) -> str:
    """``error``'s message in the command line's words: an `ArgError`'s fix with each setting as the ``--config.``
    flag of the field behind its name (``fields``: a build step's map; ``config``: the run's, `field_of`); any
    other error as it reads."""
    if not isinstance(error, ArgError):
        return str(error)
    return error.in_words(config_words(fields or {}, config), code=False)


def config_words(fields: Mapping[str, Any], config=None) -> Callable[[Mapping[str, Any]], str]:
    """How the command line writes a setting: ``--config.runtime.mode=parameter_server --config.num_workers=4``
    (a value ``...``: the flag's name alone)."""
    def words(setting: Mapping[str, Any]) -> str:
        flags = [f"--config.{field_of(k, fields, config)}" for k in setting]
        return " ".join(f if v is ... else f"{f}={flag_text(v)}" for f, v in zip(flags, setting.values()))
    return words


def field_of(name: str, fields: Mapping[str, Any] = {}, config=None) -> str:  # noqa: B006 (read only)
    """The config field behind Python name ``name`` (``"samplers.hidden_0"``: ``sampler.groups.hidden_0``): the
    step's map (``fields``), then `FIX_FIELDS`, then the fields of ``config`` (the run's: its model's and data's
    too) and of the default config and the built-in models (module docstring); the name itself when none has it."""
    head, dot, rest = name.partition(".")
    for table in (fields, FIX_FIELDS):
        field = table.get(name, table.get(head) if dot else None)
        if isinstance(field, str):
            return field if name in table else f"{field}.{rest}"
    found = _named(config) if config is not None else {}
    return found.get(name) or _default_fields().get(name, name)


def _named(config) -> dict[str, str]:
    """Python name -> config field for ``config``'s fields (first one wins: the top-level fields, then the sections
    in `_SECTIONS`' order, then the model's)."""
    from istjax.launch.config.fields import flat_dict, to_dict

    flat = flat_dict(to_dict(config))
    found: dict[str, str] = {k: k for k in flat if "." not in k}
    for section in (*_SECTIONS, "model"):
        for k in flat:
            if k.startswith(section + ".") and "." not in k[len(section) + 1:]:
                found.setdefault(k[len(section) + 1:], k)
    return found


@functools.lru_cache(maxsize=1)
def _default_fields() -> dict[str, str]:
    """`_named` of the default config, then every built-in model's fields."""
    import istjax.models as models
    from istjax.launch.config.fields import MODEL_KEYS, default_config

    found = _named(default_config())
    for name in sorted(models.BUILTIN):
        for k in models.model_fields(name):
            if k not in MODEL_KEYS:
                found.setdefault(k, f"model.{k}")
    return found


def flag_text(value: Any) -> str:
    """``value`` as written after ``--config.FIELD=``: a str bare, a sequence as a tuple, anything else as its
    literal (``(512,)``, ``False``, ``0.9``)."""
    if isinstance(value, str):
        return value
    return repr(tuple(value) if isinstance(value, list) else value)
