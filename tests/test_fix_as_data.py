"""A refusal's fix is data (issue 56): an `istjax.ArgError` carries the values that fix it, named by their Python
names; ``str(error)`` renders them in the Python API's words and the config collector in the command line's, through
the field map it keeps (`istjax.launch.config.fix_words`). No module below ``istjax/launch/`` spells ``--config.``.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.core.errors import ArgError, Code
from istjax.launch.config.collect import Collector
from istjax.launch.config.fix_words import FIX_FIELDS, config_terms, field_of

LIBRARY = pathlib.Path(istjax.__file__).resolve().parent


def _library_sources():
    """``(path relative to the library, source)`` of every module outside ``istjax/launch/``."""
    return [(p.relative_to(LIBRARY), p.read_text()) for p in sorted(LIBRARY.rglob("*.py"))
            if p.relative_to(LIBRARY).parts[0] != "launch"]


def test_no_module_below_launch_spells_a_command_line_flag():
    sources = _library_sources()
    assert len(sources) > 50  # the walk reads the library, not an empty folder
    found = [f"istjax/{path}:{n}: {line.strip()}" for path, text in sources
             for n, line in enumerate(text.splitlines(), 1) if "--config." in line]
    assert found == [], "\n".join(found)


def test_the_walk_would_find_one(tmp_path):
    """The walk's test can fail: a line spelling the flag is found."""
    text = 'raise ArgError("mode", m, "bad.", "Use --config.runtime.mode=parameter_server.")\n'
    assert [n for n, line in enumerate(text.splitlines(), 1) if "--config." in line] == [1]


def _raise(error):
    def call():
        raise error
    return call


def _collected(error, fields, **config) -> str:
    """The problem the collector reports for ``error`` raised by a step with the field map ``fields``."""
    c = Collector(config_lib.default_config())
    assert c.step(_raise(error), fields, "") is not None
    (problem,) = c.problems
    return problem


def test_one_value_reads_in_python_words_and_in_the_config_field_the_step_maps():
    e = ArgError("mode", "sharded", "mode='sharded' would change nothing.", use={"mode": "parameter_server"})
    assert str(e) == "mode='sharded' would change nothing. Use mode='parameter_server'."
    assert e.fix == "Use mode='parameter_server'." and e.names() == ["mode"]
    assert _collected(e, {"mode": "runtime.mode"}).endswith("Use --config.runtime.mode=parameter_server.")


def test_a_renamed_field_is_renamed_in_the_map_only():
    """The path one config field takes: the library names ``mode``; the step's map says which field set it."""
    e = ArgError("mode", "sharded", "mode='sharded' would change nothing.", use={"mode": "parameter_server"})
    assert "--config.runtime.exchange_mode=parameter_server" in _collected(e, {"mode": "runtime.exchange_mode"})
    assert "--config.runtime.mode=parameter_server" in config_terms(e)  # no map: the config's own fields


def test_alternatives_join_with_or_and_share_a_name():
    e = ArgError("num_workers", 3, "num_workers=3 does not fit 2 MPI processes.",
                 use=[{"num_workers": 2}, {"num_workers": 4}, "launch with mpiexec -n N for an N that divides 3"])
    assert e.fix == "Use num_workers=2 or 4, or launch with mpiexec -n N for an N that divides 3."
    assert config_terms(e).endswith("Use --config.num_workers=2 or 4, or launch with mpiexec -n N for an N that "
                                    "divides 3.")


def test_settings_made_together_and_code_the_python_api_spells_as_a_call():
    e = ArgError("sampler", "uniform", "mode='sharded' needs a stratified sampler.", (
        Code("Build it with istjax.ist(..., sampler=istjax.stratified(num_owners=2))",
             ("Add", {"sampler": "stratified", "num_owners": 2})), ", or use", {"mode": "parameter_server"}, "."))
    assert e.fix == ("Build it with istjax.ist(..., sampler=istjax.stratified(num_owners=2)), or use "
                     "mode='parameter_server'.")
    assert "--config" not in str(e)
    assert config_terms(e, {"sampler": lambda c: "sampler.name='uniform'"}).endswith(
        "Add --config.sampler.name=stratified --config.sampler.num_owners=2, or use "
        "--config.runtime.mode=parameter_server.")


def test_words_and_a_name_alone_read_the_same_in_both():
    e = ArgError("memory_limit", 1, "too small.", ("Use more ranks, or a larger", {"memory_limit": ...}, "."))
    assert e.fix == "Use more ranks, or a larger memory_limit."
    assert config_terms(e).endswith("Use more ranks, or a larger --config.runtime.memory_limit.")
    plain = ArgError("n", 0, "n=0: need a positive integer;", "e.g. 1.")
    assert str(plain) == "n=0: need a positive integer; e.g. 1." == config_terms(plain)


def test_a_library_refusal_reads_in_both_spellings():
    """A real refusal (a bfloat16 exchange under float32 values): Python words from Python, flags from a config."""
    with pytest.raises(ArgError) as e:
        istjax.core.precision.wire("float32", "params")
    assert str(e.value).endswith("Drop it, or set exchange_dtype='bfloat16'.")
    config = config_lib.default_config()
    config.exchange_values = "params"
    with pytest.raises(config_lib.ConfigError) as problems:
        config_lib.build(config)
    assert "Drop it, or set --config.exchange_dtype=bfloat16." in str(problems.value)


def _fix_names() -> set[str]:
    """Every constant name a fix in the library sets (dict keys inside an ArgError's or a Code's arguments)."""
    first_fix = {"ArgError": 3, "GroupSizeError": 4, "Code": 1}  # the arguments before are not the fix
    names = set()
    for _, text in _library_sources():
        for call in ast.walk(ast.parse(text)):
            name = getattr(getattr(call, "func", None), "id", "")
            if isinstance(call, ast.Call) and name in first_fix:
                for arg in [*call.args[first_fix[name]:], *(k.value for k in call.keywords)]:
                    names |= {k.value for d in ast.walk(arg) if isinstance(d, ast.Dict)
                              for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return names


def test_every_name_a_fix_sets_has_a_config_field():
    names = _fix_names()
    assert {"mode", "num_owners", "model_state"} <= names, names  # the walk finds the library's fixes
    top = set(config_lib.flat_dict(config_lib.to_dict(config_lib.default_config())))
    unmapped = {n for n in names if field_of(n) == n and n not in top}
    assert unmapped == set(), unmapped
    open_sections = ("sampler.groups", "data.kwargs")  # keys of their own: a group's sampler, a loader's keywords
    assert {f for f in FIX_FIELDS.values() if not f.startswith(open_sections)} <= top
