"""A per-rank memory cap: what a rank will hold, predicted before it holds it, against ``runtime.memory_limit``.

The claim a sharded run makes ("no single process holds the model") is about resident memory. Before the first round
the driver predicts what this process will hold at the peak of a round and refuses, with both numbers and the fix,
when that exceeds the cap (`check_memory`). The prediction (`predict`) has three parts, none of which allocates:

* ``baseline``: what the process holds already, measured (`resident_bytes`, the current RSS) after the run is
  built and its step compiled, before any state exists: the interpreter, JAX and its runtime, the data (the
  training set the round reads on device, which on CPU is host memory, and the evaluation chunks), what XLA keeps of
  the compilation. Measuring it beats a constant: the data is most of it for a large set, the compiler ~120 MiB,
  and both differ by machine and version. `BARE_JAX_BYTES` is the floor, and the stand-in where ``/proc`` cannot be
  read. Not counted: the evaluation's own compilation and chunks of activations (tiny digits MLP: 11 MiB), and
  the arrays live on the accelerator rather than in host memory where there is one (the cap is then conservative).
* ``state``: this rank's share of the `TrainState` (parameters, model state, optimizer state, key, round) as
  `jax.eval_shape` gives it (`tree_bytes`); under the sharded MPI mode only the rank's slice.
* ``step``: the compiled round's `memory_analysis()`: ``output_size_in_bytes - alias_size_in_bytes +
  temp_size_in_bytes`` (the new state and metrics, less what is written in place of a donated argument, plus XLA's
  scratch). ``argument_size_in_bytes`` is *not* added: the step's arguments are the state (counted as ``state``) and
  the data (resident already, in ``baseline``). A runtime whose round is several device steps around MPI calls has
  no single compiled step before its first round; it may estimate its round itself (`RuntimeHandle.round_memory`:
  the MPI runtime's sharded mode and the replicas' exchange (data parallel, local SGD, DiLoCo) compile their local
  phase ahead and add the round's exchange buffers, tensor parallel compiles its round), else ``step`` is 0 and the
  prediction a lower bound (IST on the MPI parameter server). Either way the study's OS limit
  (`experiments.extreme.limits`) backs it with an observed failure.

Sizes are bytes; `parse_bytes` reads the config's ``"1.5GiB"`` spelling.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple, Optional, Union

import jax
import numpy as np

from istjax.core.errors import ArgError

__all__ = ["BARE_JAX_BYTES", "MemoryPrediction", "parse_bytes", "format_size", "tree_bytes", "step_bytes",
           "resident_bytes", "predict", "check_memory"]

MiB, GiB = 1 << 20, 1 << 30

# Resident memory of a bare JAX process, `python -c "import jax; jax.numpy.zeros(1).block_until_ready()"`, read
# from /proc/self/statm: 186 MiB (two runs: 185.7, 185.6) with jax 0.10.2 on CPU, Linux x86-64, Python 3.
BARE_JAX_BYTES = 186 * MiB

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 1 << 10, "mib": MiB, "gib": GiB, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_FIX = "bytes as an integer, or a size such as '800MiB', '1.5GiB' or '2GB'; 0: no cap"


def parse_bytes(value: Union[int, float, str], arg: str = "memory_limit") -> int:
    """Bytes of ``value``: an integer of bytes, or a string with a unit (``"800MiB"``, ``"1.5GiB"``, ``"2GB"``; KiB,
    MiB, GiB, TiB are powers of 2, kB, MB, GB, TB powers of 10). 0 means no cap. Raises `ArgError` naming ``arg``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _bad(arg, value, "is not a size")
    if isinstance(value, str):
        m = _SIZE.match(value)
        if not m or m.group(2).lower() not in _UNITS:
            raise _bad(arg, value, "is not a size (a number and one of the units B, kB, MB, GB, TB, KiB, MiB, GiB, "
                                   "TiB)")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 0:
        raise _bad(arg, value, "must be a size >= 0")
    return int(value)


def _bad(arg: str, value: Any, problem: str) -> ArgError:
    return ArgError(arg, value, f"{arg}={value!r} {problem}.", ("Set", {arg: "1.5GiB"}, f"({_FIX})."))


def format_size(n: float) -> str:
    """``n`` bytes in the unit that reads best: ``"512.0 MiB"``, ``"1.50 GiB"``, ``"12.0 KiB"``."""
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def tree_bytes(tree: Any) -> int:
    """Bytes of every leaf of ``tree`` (arrays or `jax.ShapeDtypeStruct`): the sum of ``size * itemsize``. A PRNG key
    counts its key data (a threefry key: 8 bytes)."""
    return sum(int(np.prod(x.shape, dtype=np.int64)) * int(x.dtype.itemsize) for x in jax.tree.leaves(tree))


def step_bytes(memory: Any) -> int:
    """What a compiled step allocates beyond its arguments (``jax.jit(f).lower(...).compile().memory_analysis()``):
    its outputs less those written over donated arguments, plus its temporaries (module docstring)."""
    if memory is None:
        return 0
    return int(memory.output_size_in_bytes) - int(memory.alias_size_in_bytes) + int(memory.temp_size_in_bytes)


def resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``), or `BARE_JAX_BYTES` where that cannot be read."""
    import os

    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return BARE_JAX_BYTES


class MemoryPrediction(NamedTuple):
    """What one rank will hold at the peak of a round, in bytes (module docstring): ``total`` is their sum;
    ``exact`` is False when the step was not analysed (``step`` 0, the total a lower bound)."""

    baseline: int
    state: int
    step: int
    exact: bool
    step_what: str = "the compiled round's outputs and temporaries"

    @property
    def total(self) -> int:
        return self.baseline + self.state + self.step

    def describe(self) -> str:
        step = f"{self.step_what} {format_size(self.step)}" if self.exact else \
            "the round's buffers not counted (compiled in its first round)"
        return (f"{'' if self.exact else 'at least '}{format_size(self.total)}: the process before any state "
                f"{format_size(self.baseline)}, this rank's state {format_size(self.state)}, {step}")


def predict(held: Any, memory: Any = None, *, baseline: Optional[int] = None,
            round_bytes: Optional[int] = None) -> MemoryPrediction:
    """The prediction for a rank that will hold ``held`` (its `TrainState` share, arrays or shapes) and run a step
    with ``memory`` (its ``memory_analysis()``, None when not compiled yet), or a round the runtime estimates itself
    (``round_bytes``: its compiled device steps and exchange buffers beyond the state, `istjax.runtimes.RuntimeHandle.
    round_memory`). ``baseline``: `resident_bytes` now, at least `BARE_JAX_BYTES`, when not given."""
    base = max(resident_bytes(), BARE_JAX_BYTES) if baseline is None else int(baseline)
    if round_bytes is not None:
        return MemoryPrediction(base, tree_bytes(held), int(round_bytes), True,
                                "the round's compiled device steps and exchange buffers")
    return MemoryPrediction(base, tree_bytes(held), step_bytes(memory), memory is not None)


def check_memory(predicted: MemoryPrediction, limit: int, *, what: str = "this process") -> None:
    """Raises `ArgError` (argument ``memory_limit``) when ``predicted`` exceeds ``limit`` bytes (0: no cap), naming
    both and the fix: more ranks, a smaller hidden width, or a larger cap."""
    if not limit or predicted.total <= limit:
        return
    problem = (f"{what} would hold {predicted.describe()}; that is more than the memory_limit of "
               f"{format_size(limit)} ({predicted.total:,} > {limit:,} bytes).")
    raise ArgError("memory_limit", limit, problem,
                   ("Use more ranks (mpiexec -n ... with", {"mode": "sharded"}, "), a smaller hidden width (",
                    {"hidden": ...}, "), or a larger", {"memory_limit": ...}, "."))
