"""The example scripts the docs point at run as documented."""

import os
import pathlib
import subprocess
import sys

import pytest
from conftest import FAST_COMPILE

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["sharded", "parameter_server"])
@pytest.mark.slow
def test_mpi_example_script(mode):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "XLA_FLAGS": FAST_COMPILE, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable,
                          str(ROOT / "experiments/distributed/ist_mpi_example.py"), mode],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    line = [l for l in out.stdout.splitlines() if l.startswith(mode)]
    assert len(line) == 1, out.stdout  # only rank 0 prints
    acc = float(line[0].split("test accuracy ")[1].split(";")[0].split(" ")[0])
    assert acc > 0.9
    assert ("evaluated in place, nothing gathered" in line[0]) == (mode == "sharded"), line[0]
    measured = line[0].split("round ")[1].split(" bytes")[0]
    analytic = line[0].split("analytic ")[1].rstrip(")")
    assert measured == analytic


def test_lazy_driver_exports():
    import istjax

    assert callable(istjax.train_and_evaluate) and istjax.default_config().algorithm.name == "ist"


def test_submodules_reachable_as_attributes():
    import istjax

    assert istjax.runtimes.get("simulate").name == "simulate"
    assert "digits" in istjax.data.DATASETS
    with __import__("pytest").raises(AttributeError):
        istjax.not_a_module
