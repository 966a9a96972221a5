"""The collector `istjax.launch.config.build` runs each library call under: an argument error the call raises
(`istjax.ArgError`) becomes a problem named by the config field that set that argument, in the command line's words;
every problem of every step is reported together (`ConfigError`) before anything compiles.

A step says which config field stands behind each argument of the call it makes (``{"num_workers": "num_workers",
"mode": "runtime.mode"}``); a field may also be a function of the config that renders several fields (the model's
sizes). An error naming an argument the step does not map, or one that is not an `ArgError`, is reported under the
step's own description. The same map writes the refusal's fix, values named by their Python names, as ``--config.``
flags (`istjax.launch.config.fix_words`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Union

import ml_collections

from istjax.core.errors import ArgError
from istjax.launch.config.fields import ConfigError, get_field
from istjax.launch.config.fix_words import config_terms

__all__ = ["Collector", "FAILED", "Field"]

# A config field's dotted name, or a function rendering the fields behind an argument (``model.hidden=(512,)``).
Field = Union[str, Callable[[ml_collections.ConfigDict], str]]


class _Failed:
    """What a step that raised returns: the steps that need its result are skipped (their problem is reported)."""

    def __repr__(self) -> str:
        return "FAILED"


FAILED = _Failed()


class Collector:
    """Runs build steps and gathers their refusals as config problems (`step`), raised together by `raise_any`."""

    def __init__(self, config: ml_collections.ConfigDict, problems: list[str] = (), bad: set[str] = frozenset()):
        self.config, self.problems, self.bad = config, list(problems), set(bad)

    def step(self, call: Callable[[], Any], fields: Mapping[str, Field], context: str,
             inputs: tuple[Any, ...] = ()) -> Any:
        """``call()``, or `FAILED` after recording its refusal: an `ArgError` under the fields behind its arguments,
        any other ValueError or TypeError under ``context`` (what the step builds from which fields).

        A step one of whose ``inputs`` (results of earlier steps) is `FAILED`, or one of whose fields the schema
        check refused (``bad``), is skipped: its problem is reported already."""
        reads = {f for f in fields.values() if isinstance(f, str)}
        if any(i is FAILED for i in inputs) or any(b == f or b.startswith(f + ".") for b in self.bad for f in reads):
            return FAILED
        try:
            return call()
        except ArgError as e:
            self.add(self.arg_problem(e, fields, context))
        except (ValueError, TypeError, ImportError) as e:  # ImportError: an optional package a choice needs
            self.add(f"{context}: {e}" if context else str(e))
        return FAILED

    def add(self, problem: str) -> None:
        """Records ``problem`` once (two steps may call the library function that refuses it)."""
        if problem not in self.problems:
            self.problems.append(problem)

    def arg_problem(self, error: ArgError, fields: Mapping[str, Field], context: str) -> str:
        """``error`` as a config problem: ``field=value [with field=value [and ...]]: problem config-fix``, the fix's
        settings named by the fields behind them (`istjax.launch.config.fix_words`)."""
        shown = [self.render(arg, fields) for arg in error.args_named]
        shown = [s for s in shown if s]
        text = config_terms(error, fields, self.config)
        if len(error.args_named) == 1 and _names_itself(error):
            # "num_workers=3 ..." and a model's "Transformer.scaling='tset': ..." say the value: each gets its
            # field's name, the one the command line sets (model.scaling).
            arg, field = error.args_named[0], fields.get(error.args_named[0])
            named = re.match(rf"(\w+\.)?{re.escape(arg)}(?=[\[=])", text)
            return f"{field}{text[named.end():]}" if isinstance(field, str) and named else text
        if not shown:
            return f"{context}: {text}" if context else text
        where = shown[0] + (f" with {' and '.join(shown[1:])}" if len(shown) > 1 else "")
        return f"{where}: {text}"

    def render(self, arg: str, fields: Mapping[str, Field]) -> str:
        """``field=value`` for argument ``arg`` (``"samplers.hidden_0"`` under ``{"samplers": "sampler.groups"}``
        is ``sampler.groups.hidden_0``), or "" when the step does not map it."""
        head, _, rest = arg.partition(".")
        field = fields.get(arg, fields.get(head))
        if field is None:
            return ""
        if callable(field):
            return field(self.config)
        name = f"{field}.{rest}" if rest and arg not in fields else field
        try:
            return f"{name}={_shown(get_field(self.config, name))}"
        except (KeyError, AttributeError):
            return name

    def raise_any(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def _names_itself(error: ArgError) -> bool:
    """Whether the problem starts by naming its argument and value (``MLP.hidden=(0,): ...``)."""
    name = error.args_named[0].rsplit(".", 1)[-1]
    return f"{name}={error.value!r}" in error.problem[:100]


def _shown(value: Any) -> str:
    """A config value as the problems show it (tuples, not the lists JSON gives)."""
    if isinstance(value, ml_collections.ConfigDict):
        value = value.to_dict()
    return repr(tuple(value) if isinstance(value, list) else value)
