"""Policies compared through their enums, runtimes and algorithms asked what they declare (issue 56, item 4).

A policy value (what an exchange moves, the model and optimizer state at a round's end, what a bfloat16 worker
sends back) is a `istjax.core.choice.Choice`; the library compares by member, never by a string, and never compares
a runtime's, algorithm's or sampler's name: it asks the registry entry or the algorithm's declaration instead.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import jax.numpy as jnp
import optax
import pytest

import istjax
from istjax.algorithms import ALGORITHMS
from istjax.core.comm import Exchange
from istjax.core.partition import SAMPLERS
from istjax.core.precision import ExchangeValues
from istjax.core.state import ModelStatePolicy, OptimizerStatePolicy
from istjax.runtimes import RUNTIMES
from istjax.runtimes.base import RuntimeHandle

LIBRARY = pathlib.Path(istjax.__file__).resolve().parent
POLICIES = (Exchange, ModelStatePolicy, OptimizerStatePolicy, ExchangeValues)
# what a compared expression is called when it holds a policy value, or a runtime's, algorithm's or sampler's name
POLICY_NAMES = {"exchange", "model_state_policy", "model_state", "optimizer_state", "values", "policy"}
NAMED = {"name", "backend", "runtime", "algorithm", "sampler"}


def _terminal(node: ast.AST) -> str:
    """The last name of ``a.b.c``, ``c``, ``getattr(x, "c", ...)`` or ``x["c"]``; '' otherwise."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and len(node.args) > 1:
        return getattr(node.args[1], "value", "")
    if isinstance(node, ast.Subscript):
        return getattr(node.slice, "value", "")
    return ""


def _strings(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def string_compares(source: str) -> list[tuple[int, str, str]]:
    """``(line, compared name, string)`` for every comparison of a policy or a registry name with a string."""
    values = {v for policy in POLICIES for v in policy.values()}
    names = set(RUNTIMES.names()) | set(ALGORITHMS.names()) | set(SAMPLERS.names())
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for side in sides:
            name = _terminal(side)
            wanted = values if name in POLICY_NAMES else names if name in NAMED else set()
            found += [(node.lineno, name, s) for other in sides if other is not side for s in _strings(other)
                      if s in wanted]
    return found


def test_the_library_compares_no_policy_or_registry_name_as_a_string():
    found = [f"{path.relative_to(LIBRARY.parent)}:{line} {name} against {text!r}"
             for path in sorted(LIBRARY.rglob("*.py")) for line, name, text in string_compares(path.read_text())]
    assert not found, ("compare through the policy's enum (istjax.core.choice.Choice) or ask what the registry entry "
                       "or the algorithm declares:\n" + "\n".join(found))


@pytest.mark.parametrize("source", [
    'if alg.exchange == "gradients": pass',
    'ok = algorithm.model_state_policy in ("recompute",)',
    'x = getattr(backend, "name", backend) != "mpi"',
    'x = config.sampler.name == "stratified"',
    'x = "carry" == optimizer_state',
])
def test_the_walk_finds_a_string_compare(source):
    assert string_compares(source), source


def test_the_walk_leaves_other_strings_alone():
    assert string_compares('x = k != "params"; y = alg.exchange == Exchange.GRADIENTS; z = name == "mnist1d"') == []


def _local_sgd(**kwargs):
    task = istjax.classifier(istjax.models.MLP(hidden=(4,), num_classes=3), jnp.zeros((2, 4)), num_classes=3)
    return istjax.local_sgd(task, optax.sgd(0.1), num_workers=4, local_steps=1, **kwargs)


def test_an_algorithm_holds_its_policies_as_their_enums():
    alg = _local_sgd(model_state="carry")
    assert alg.exchange is Exchange.REPLICAS and alg.model_state_policy is ModelStatePolicy.CARRY
    assert alg.exchange == "replicas" and str(alg.exchange) == "replicas" and f"{alg.model_state_policy}" == "carry"
    assert repr(Exchange.GRADIENTS) == "'gradients'"  # messages show the value, as a config spells it
    assert dataclasses.replace(alg, exchange="gradients").exchange is Exchange.GRADIENTS
    assert alg.wire.values is ExchangeValues.DELTA
    assert Exchange.values() == ("subnetworks", "replicas", "gradients", "activations", "subsets", "groups")


def test_own_rows_follows_what_the_algorithm_declares():
    """Rank 1 of 2 runs workers 2 and 3 and reads only their rows, unless the algorithm declares that every process
    reads every worker's rows (`Algorithm.reads_every_worker`: tensor parallel)."""
    from istjax.launch.config.experiment import own_rows

    handle = RuntimeHandle(name="two processes", fusable=False, gather=lambda s: s, agree=lambda v: v, rank=1,
                           size=2)
    alg = dataclasses.replace(_local_sgd(), runtime=handle)
    assert own_rows(alg) == (2, 4)
    assert own_rows(dataclasses.replace(alg, reads_every_worker=True)) is None
    assert own_rows(dataclasses.replace(alg, runtime=handle._replace(fusable=True))) is None
