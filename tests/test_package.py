"""The package's shape: every subpackage reachable as ``istjax.<name>``, the registries' refusals, no import cycle
and no function in ``istjax/`` longer than a screen except the documented closure factories."""

import ast
import pathlib
import subprocess
import sys

import pytest

import istjax
from istjax.algorithms import ALGORITHMS, AlgorithmEntry
from istjax.core.partition import SAMPLERS
from istjax.core.registry import Registry, UnknownName
from istjax.models import MODELS
from istjax.runtimes import RUNTIMES

REPO = pathlib.Path(__file__).resolve().parents[1]
SUBPACKAGES = ("algorithms", "core", "data", "graph", "launch", "models", "runtimes", "theory", "xmc")


def test_every_subpackage_is_an_attribute_of_a_fresh_import():
    code = ("import istjax; mods = [getattr(istjax, n) for n in %r]; print(' '.join(m.__name__ for m in mods))"
            % (SUBPACKAGES,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [f"istjax.{n}" for n in SUBPACKAGES]


@pytest.mark.parametrize("alias", ["config", "train", "spec", "backends", "distributed", "tfds_data"])
def test_the_wave_1_aliases_are_gone(alias):
    with pytest.raises(AttributeError, match=f"no attribute '{alias}'"):
        getattr(istjax, alias)


@pytest.mark.parametrize("registry,field,typo,want", [
    (ALGORITHMS, "algorithm", "resits", "resist"),
    (SAMPLERS, "sampler", "stratifed", "stratified"),
    (RUNTIMES, "backend", "simulte", "simulate"),
])
def test_each_registry_refuses_an_unknown_name_with_the_known_ones(registry, field, typo, want):
    with pytest.raises(UnknownName) as e:
        registry.get(typo)
    msg = str(e.value)
    assert f"{field}={typo!r} is not a known" in msg and f"did you mean {want!r}" in msg
    assert str(registry.names()) in msg and "register" in msg  # every known name, and how to add one


def test_models_registry_refuses_an_unknown_name():
    from istjax.models import build_model

    with pytest.raises(ValueError, match=r"model.name='mpl' is not a known model \(did you mean 'mlp'"):
        build_model("mpl", {}, num_classes=3)
    assert "mlp" in MODELS


def test_a_registered_algorithm_is_found_by_the_driver_options():
    reg = Registry("thing", field="thing", entries={"a": 1})
    reg.register("b", 2)
    assert reg.names() == ["a", "b"] and reg["b"] == 2 and "b" in reg and 3 not in reg and len(reg) == 2
    with pytest.raises(ValueError, match="non-empty str name"):
        reg.register("", 3)
    # The driver reads an entry's declared options from the config's sections; every option an entry declares has a
    # config value, and a runtime's options are its section's fields.
    import istjax.runtimes as runtimes
    from istjax.launch import config as config_lib

    config = config_lib.default_config()
    for name, entry in ALGORITHMS.items():
        assert isinstance(entry, AlgorithmEntry)
        assert set(config_lib.option_fields(config, entry.options)) >= set(entry.options), name
    for name in runtimes.names():
        assert set(runtimes.get(name).config_options) <= set(config.runtime), name


def test_sampler_entries_build_what_their_options_say():
    opts = {"min_units": 2, "num_owners": 3, "weights": (1.0, 2.0), "fractions": (0.5, 1.0)}
    for name, entry in SAMPLERS.items():
        sampler = entry.build(opts)
        assert isinstance(sampler, istjax.Sampler), name
    assert SAMPLERS["stratified"].build(opts).owners == 3  # what the sharded MPI mode checks
    assert SAMPLERS["uniform"].build(opts).owners is None


def test_no_import_cycle_between_modules_or_folders():
    tool = REPO.parent / "shared" / "tools" / "import_cycles.py"
    if not tool.is_file():
        pytest.skip(f"{tool} is not here (it ships beside the repository in ../shared)")
    out = subprocess.run([sys.executable, str(tool), "istjax", "--folders"], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("0 import cycle(s)") and "\n0 loop(s)" in out.stdout, out.stdout


# Closure factories allowed past the limit (docs/architecture.md, "Long functions"): none today; istjax.classifier
# builds its larger closures in named helpers.
CLOSURE_FACTORIES: set[tuple[str, str]] = set()
MAX_LINES = 80


def test_no_function_is_longer_than_a_screen():
    long = []
    for path in sorted((REPO / "istjax").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES and (rel, node.name) not in CLOSURE_FACTORIES:
                    long.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split into named steps: " + "; ".join(long)


# --- The model contract (istjax.core.contract) -------------------------------------------------------------------


def _dense(**methods):
    import flax.linen as nn

    class Dense(nn.Module):
        @nn.compact
        def __call__(self, x):
            w = self.param("w", nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("in", "out")), (4, 2))
            return x @ w

    for name, fn in methods.items():
        setattr(Dense, name, fn)
    return Dense()


def test_the_stock_models_provide_the_contract():
    from istjax.core.contract import Partitionable

    for name, cls in MODELS.items():
        assert issubclass(cls, Partitionable), name


def test_a_module_missing_part_of_the_contract_is_refused_when_the_task_is_built():
    import jax.numpy as jnp
    import optax

    from istjax.core.contract import ContractError

    x, c = jnp.zeros((2, 4)), 2  # the Dense below: 2 outputs
    with pytest.raises(ContractError, match=r"Dense has no partition_rules\(\) method and no rules= were given"):
        istjax.classifier(_dense(), x, num_classes=c)
    with pytest.raises(ContractError, match=r"partition_rules\(\) returned \['in'\]; it must return a dict"):
        istjax.classifier(_dense(partition_rules=lambda self: ["in"]), x, num_classes=c)
    with pytest.raises(ContractError, match=r"tied_axes\(\) holds 'in'; it must return a sequence of tuples"):
        istjax.classifier(_dense(partition_rules=lambda self: {"in": None, "out": "h"},
                                 tied_axes=lambda self: ("in",)), x, num_classes=c)
    with pytest.raises(ContractError, match=r"eval_module\(\) returned int"):
        istjax.classifier(_dense(partition_rules=lambda self: {"in": None, "out": "h"}, eval_module=lambda self: 3), x,
                          num_classes=c)
    # Partition rules but no subnet(): the replicated baselines train it; IST is refused at build, naming the fix.
    task = istjax.classifier(_dense(partition_rules=lambda self: {"in": None, "out": "h"}), x, num_classes=c)
    istjax.local_sgd(task, optax.sgd(0.1), num_workers=2, local_steps=1)
    with pytest.raises(ContractError, match=r"no subnet\(units\) method, which IST needs"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1)


def test_every_option_a_config_sets_maps_to_its_field():
    """The collector names a library refusal by the config field behind the argument refused: every option of every
    registered algorithm, every runtime's options and the factories' common arguments map to a field the config
    has (a function for the arguments several fields set: the model's sizes, the sampler)."""
    import istjax.runtimes as runtimes
    from istjax.launch import config as config_lib

    for runtime in runtimes.names():
        config = config_lib.default_config()
        config.runtime.name = runtime
        known = set(config_lib.flat_dict(config_lib.to_dict(config))) | set(config_lib.OPEN_SECTIONS)
        for name, entry in ALGORITHMS.items():
            fields = config_lib.option_fields(config, entry.options)
            for arg in (*entry.options, *runtimes.get(runtime).config_options, "num_workers", "local_steps",
                        "backend", "task", "group_sizes", "sampler", "samplers"):
                field = fields[arg]
                assert callable(field) or field in known or any(k.startswith(field + ".") for k in known), (
                    name, arg, field)

def test_an_algorithm_declaring_an_unknown_exchange_is_refused():
    import dataclasses

    import jax.numpy as jnp
    import optax

    task = istjax.classifier(istjax.models.MLP(hidden=(4,), num_classes=3), jnp.zeros((2, 4)), num_classes=3)
    alg = istjax.local_sgd(task, optax.sgd(0.1), num_workers=2, local_steps=1)
    assert alg.exchange == "replicas" and f"{alg.exchange}" == "replicas"  # reads as its plain name
    with pytest.raises(ValueError, match=r"exchange='swapping'; choose one of \('subnetworks'"):
        dataclasses.replace(alg, exchange="swapping")
    with pytest.raises(ValueError, match=r"model_state_policy='keep'; choose one of"):
        dataclasses.replace(alg, model_state_policy="keep")


def test_build_makes_every_piece_once(monkeypatch):
    """`driver.build(config) -> Experiment`: the config is checked (every problem at once) and the task the check
    built is the one the algorithm trains; nothing is built twice."""
    import istjax.launch.config as config_lib
    import istjax.launch.driver as driver

    calls = []
    real = config_lib.make_task
    monkeypatch.setattr("istjax.launch.config.experiment.make_task", lambda *a, **k: calls.append(1) or real(*a, **k))
    c = config_lib.default_config()
    c.model.hidden, c.num_workers = (8,), 2
    experiment = driver.build(c)
    assert len(calls) == 1
    assert experiment.algorithm.task is experiment.task and experiment.dataset.name == "digits"
    assert experiment.batch_fn(0)["x"].shape[:2] == (2, c.local_steps)
    c.num_workers = 3  # 8 units do not split 3 ways: refused by the check, before anything is built
    with pytest.raises(config_lib.ConfigError, match="num_workers=3"):
        driver.build(c)
