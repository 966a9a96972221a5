"""Measurement tools for the istjax benchmark suite: timing, FLOP counts, byte counts, compile counts, memory.

Everything here is a plain function of arrays and callables, so ``tests/test_benchmarks.py`` checks it on tiny
inputs. The suite itself (``experiments/benchmarks/run.py``) composes these into the seven studies of
``docs/benchmarks.md``.

Timing on a shared, noisy machine: never trust one number. `interleaved` runs every candidate once per repetition,
in a rotating order, so a burst of load from another process hits all candidates alike; the figures the suite reports
are ratios of medians taken in the same process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from experiments.tables import markdown_table

__all__ = [
    "Timing",
    "interleaved",
    "paired_ratio",
    "dense_train_flops",
    "xla_flops",
    "tree_bytes",
    "copy_fn",
    "matmul_fn",
    "CompileLog",
    "count_compiles",
    "memory_stats",
    "rss_bytes",
    "peak_rss_bytes",
    "round_overhead",
    "round_line",
    "targets",
    "heading",
]

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax._src.dispatch.BACKEND_COMPILE_EVENT


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of one candidate over ``len(samples)`` repetitions."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    def as_dict(self) -> dict[str, Any]:
        return {"median_s": self.median, "min_s": self.min, "samples_s": list(self.samples)}


def interleaved(candidates: Mapping[str, Callable[[], Any]], reps: int, warmup: int = 1) -> dict[str, Timing]:
    """Times every zero-argument callable ``reps`` times, interleaved, after ``warmup`` untimed calls each.

    Each call's result is passed to `jax.block_until_ready`, so asynchronous dispatch is waited for. Repetition ``r``
    starts at candidate ``r % len(candidates)``: no candidate always runs first (after an idle pause) or last.

    Returns:
      name -> `Timing`.
    """
    if reps < 1:
        raise ValueError(f"reps={reps}: need at least one repetition.")
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            jax.block_until_ready(candidates[name]())
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            t0 = time.perf_counter()
            jax.block_until_ready(candidates[name]())
            samples[name].append(time.perf_counter() - t0)
    return {n: Timing(tuple(s)) for n, s in samples.items()}


def paired_ratio(num: Timing, den: Timing) -> dict[str, Any]:
    """``num / den`` repetition by repetition, as `interleaved` ran them: repetition ``r`` of ``num`` against
    repetition ``r`` of ``den`` (two candidates next to each other in its dict run next to each other in time, so a
    burst of load that slows one slows the other), then the median of those ratios and their range.

    A ratio of two medians can pair a quiet repetition of one with a loaded one of the other; the paired ratios
    show how far the figure moves between repetitions (``min`` .. ``max``), which one number hides.

    Returns:
      ``{"median", "min", "max", "reps", "per_rep"}``.
    """
    if len(num.samples) != len(den.samples) or not num.samples:
        raise ValueError(f"paired_ratio: {len(num.samples)} and {len(den.samples)} repetitions; pair two timings of "
                         f"the same interleaved run (same reps, at least one).")
    per_rep = [a / b for a, b in zip(num.samples, den.samples)]
    return {"median": statistics.median(per_rep), "min": min(per_rep), "max": max(per_rep), "reps": len(per_rep),
            "per_rep": per_rep}


def round_overhead(alg, state, batch: Any, reps: int, shared: Any = None) -> dict[str, Any]:
    """An IST round of ``alg`` against its partition, extract and merge timed alone (`interleaved`): the seconds of
    each and ``overhead_share_parts``, their sum over the round's."""
    import istjax

    spec, w = alg.task.spec, alg.num_workers
    workers, plan = jax.jit(alg.distribute)(state)
    sample = jax.jit(lambda key: alg.sampler.sample(key, spec.group_sizes, w))
    ex = jax.jit(lambda p, part: istjax.extract(p, part, spec))
    mg = jax.jit(lambda p, sub, part: istjax.merge(p, sub, part, spec))
    t = interleaved({
        "round": lambda: alg.round(state, batch, shared), "partition": lambda: sample(state.key),
        "extract": lambda: ex(state.params, plan.partition),
        "merge": lambda: mg(state.params, workers.params, plan.partition)}, reps)
    parts = t["partition"].median + t["extract"].median + t["merge"].median
    return {"W": w, "K": alg.local_steps, "round_s": t["round"].median, "partition_s": t["partition"].median,
            "extract_s": t["extract"].median, "merge_s": t["merge"].median,
            "overhead_share_parts": parts / t["round"].median, "timings": {n: v.as_dict() for n, v in t.items()}}


def round_line(ro: Mapping[str, Any], name: str = "IST") -> str:
    """A `round_overhead` result in words: the round's milliseconds at its W and K, and its parts'."""
    return (f"{name} round at W = {ro['W']}, K = {ro['K']}: {ro['round_s'] * 1e3:.1f} ms; partition "
            f"{ro['partition_s'] * 1e3:.2f} ms, extract {ro['extract_s'] * 1e3:.2f} ms, merge "
            f"{ro['merge_s'] * 1e3:.2f} ms.")


def targets(rows: Sequence[tuple[str, float, str, float]]) -> list[dict[str, Any]]:
    """A family's speed goals judged: ``(goal, measured, ">=" or "<=", bound)`` rows as the ``targets`` records its
    results file holds (``met``: the measured value is on the bound's side)."""
    return [{"goal": g, "measured": v, "target": f"{op} {x}", "met": bool(v >= x if op == ">=" else v <= x)}
            for g, v, op, x in rows]


def overhead_target(ro: Mapping[str, Any], name: str = "IST") -> tuple[str, float, str, float]:
    """The goal every family's `round_overhead` is held to, as a `targets` row: partition + extract + merge at
    most 10 % of a round."""
    return (f"partition + extract + merge share of {'an' if name[0] in 'AEIOU' else 'a'} {name} round (K = {ro['K']})",
            ro["overhead_share_parts"], "<=", 0.1)


def heading(title: str, out: Mapping[str, Any], detail: str = "") -> list[str]:
    """The first line of a family's results page (``title``, quick or full, the platform, jax, the wall seconds,
    then ``detail``), a blank line, and the table of its ``targets`` when it has them."""
    m = out["machine"]
    lines = [f"{title} ({'quick' if out['quick'] else 'full'}), {m.get('platform', '')}, jax {m.get('jax', '')}, "
             f"{out['wall_s']:.0f} s" + (f"; {detail}" if detail else ""), ""]
    if "targets" in out:
        lines.append(markdown_table(["goal", "measured", "target", "met"],
                                    [[r["goal"], f"{r['measured']:.3f}", r["target"], "yes" if r["met"] else "no"]
                                     for r in out["targets"]]))
    return lines


def dense_train_flops(kernel_shapes: Sequence[tuple[int, int]], batch: int, *, first_input_grad: bool = False) -> int:
    """Matmul FLOPs of one forward + backward pass of a stack of dense layers on a batch of ``batch`` rows.

    A layer with kernel `[i, o]` costs ``2 B i o`` forward (one multiply and one add per term), ``2 B i o`` for its
    weight gradient and ``2 B i o`` for the gradient of its input. The first layer's input is data, whose gradient is
    not needed (XLA removes it), unless ``first_input_grad``. Elementwise work (BatchNorm, ReLU, softmax, the
    optimizer update) is not counted: it is memory-bound and a small share of the matmuls at these widths.

    Args:
      kernel_shapes: `[in, out]` of every dense kernel, from the input layer to the output layer.
      batch: B.
    """
    total = 0
    for j, (i, o) in enumerate(kernel_shapes):
        passes = 3 if (j > 0 or first_input_grad) else 2
        total += passes * 2 * batch * i * o
    return total


def xla_flops(jitted: Callable, *args) -> float:
    """FLOPs XLA's cost model assigns to ``jitted(*args)`` (`Compiled.cost_analysis()`), or NaN if it has none.

    XLA counts a ``while`` loop body once (it does not know the trip count), so time a ``lax.scan`` of K steps as one
    step and multiply by K (the suite does).
    """
    cost = jitted.lower(*args).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax returned one dict per device
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", float("nan")))


def tree_bytes(tree: Any) -> int:
    """Bytes of all array leaves of ``tree``."""
    return int(sum(math.prod(np.shape(x)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def copy_fn() -> Callable[[jax.Array], jax.Array]:
    """A jitted plain on-device copy, ``x -> copy of x`` (reads and writes every byte once): the bandwidth yardstick.

    `jnp.copy` under jit lowers to an XLA ``copy`` into a fresh buffer (jit does not return its input buffer).
    """
    return jax.jit(jnp.copy)


def matmul_fn() -> Callable[[jax.Array, jax.Array], jax.Array]:
    """A jitted batched matmul ``[W, M, K] @ [W, K, N] -> [W, M, N]``: the compute yardstick (2 W M K N FLOPs)."""
    return jax.jit(lambda a, b: jnp.einsum("wmk,wkn->wmn", a, b))


def phase_matmuls(kernel_shapes: Sequence[tuple[int, int]], num_workers: int, batch: int, *, seed: int = 0,
                  dtype: str = "float32"):
    """The matmuls of one training step of a dense stack, alone: ``(fn, args)`` with ``fn(*args)`` jitted.

    For every kernel `[i, o]`, batched over W workers exactly as the vmapped local phase runs them: the forward
    ``[W, B, i] @ [W, i, o]``, the weight gradient ``[W, B, i]^T @ [W, B, o] -> [W, i, o]`` (a contraction over only B
    rows, which CPU matmul libraries run far below their square-matrix rate) and, except for the first layer, the input
    gradient ``[W, B, o] @ [W, i, o]^T``. Their FLOPs are `dense_train_flops` times W; timing them bounds what the
    local phase could reach with free elementwise work. ``dtype="bfloat16"``: bfloat16 operands accumulated in
    float32, the products a model computing in bfloat16 runs (`istjax.core.precision.einsum`), one worker after
    another as its local phase runs them (`istjax.core.precision.map_in_turn`).
    """
    from istjax.core import precision

    rng = np.random.default_rng(seed)
    args = []
    for i, o in kernel_shapes:
        for shape in ((num_workers, batch, i), (num_workers, i, o), (num_workers, batch, o)):
            args.append(jax.device_put(rng.standard_normal(shape, np.float32).astype(jnp.dtype(dtype))))

    def per_worker(spec, a, b):  # as the local phase maps its workers: vmapped, or in turn for bfloat16 matmuls
        if precision.is_low(a.dtype):
            return jax.lax.map(lambda ab: precision.einsum(spec, *ab), (a, b))
        return jax.vmap(precision.einsum, in_axes=(None, 0, 0))(spec, a, b)

    def fn(*xs):
        out = []
        for j in range(len(kernel_shapes)):
            x, k, dy = xs[3 * j: 3 * j + 3]
            mm = per_worker
            out.append(mm("bi,io->bo", x, k))
            out.append(mm("bi,bo->io", x, dy))
            if j > 0:
                out.append(mm("bo,io->bi", dy, k))
        return out

    return jax.jit(fn), tuple(args)


def phase_convs(convs: Sequence[tuple[tuple[int, ...], tuple[int, ...], tuple[int, int]]], num_workers: int = 1,
                *, seed: int = 0):
    """The convolutions of one training step of a conv net, alone: ``(fn, args)`` with ``fn(*args)`` jitted.

    ``convs`` lists every conv the step's forward pass runs as ``(input shape [B, H, W, C_in], kernel shape
    [kh, kw, C_in, C_out], strides)`` (`record_convs`). For each: the forward conv, the kernel gradient and, except
    for the first conv (its input is the image), the input gradient, all from `jax.vjp` of the same
    ``lax.conv_general_dilated`` in a top-level computation (where XLA:CPU runs every one in canonical form). One
    worker's convolutions by default; ``num_workers > 1`` batches them over W with `vmap` (grouped convolutions, as
    a vmapped local phase of workers with different kernels runs them). No BatchNorm, no activation, no optimizer:
    timing them bounds what the local phase could reach with free elementwise work.
    """
    rng = np.random.default_rng(seed)
    lead = (num_workers,) if num_workers > 1 else ()
    args = []
    for x_shape, k_shape, _ in convs:
        args.append(jax.device_put(rng.standard_normal((*lead, *x_shape), np.float32)))
        args.append(jax.device_put(rng.standard_normal((*lead, *k_shape), np.float32)))

    def one(x, k, strides):
        return jax.lax.conv_general_dilated(x, k, strides, "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def fn(*xs):
        out = []
        for j, (_, _, strides) in enumerate(convs):
            x, k = xs[2 * j], xs[2 * j + 1]

            def step(x, k, strides=strides, first=j == 0):
                y, vjp = jax.vjp(lambda x, k: one(x, k, strides), x, k)
                dx, dk = vjp(y)  # the output as cotangent: same shape, no extra buffer to time
                return (y, dk) if first else (y, dk, dx)

            out.append(jax.vmap(step)(x, k) if lead else step(x, k))
        return out

    return jax.jit(fn), tuple(args)


def record_convs(module, x: jax.Array, **apply_kwargs) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, int]]]:
    """Every `flax.linen.Conv` call of ``module`` on ``x`` (``module.init`` under `flax.linen.intercept_methods`):
    ``(input shape, kernel shape, strides)`` in call order."""
    import flax.linen as nn

    calls = []

    def spy(next_fun, args, kwargs, context):
        if isinstance(context.module, nn.Conv) and context.method_name == "__call__":
            conv, inp = context.module, args[0]
            strides = conv.strides if isinstance(conv.strides, tuple) else (conv.strides or 1,) * 2
            calls.append((tuple(inp.shape), (*conv.kernel_size, inp.shape[-1], conv.features), tuple(strides)))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(spy):
        module.init(jax.random.key(0), x, **apply_kwargs)
    return calls


@dataclasses.dataclass
class CompileLog:
    """What `count_compiles` saw: one entry per XLA backend compilation, in order."""

    names: list[str] = dataclasses.field(default_factory=list)
    seconds: list[float] = dataclasses.field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.names)

    def by_name(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.names:
            out[n] = out.get(n, 0) + 1
        return out


@contextlib.contextmanager
def count_compiles() -> Iterator[CompileLog]:
    """Records every XLA compilation inside the ``with`` block (via `jax.monitoring`), with the jitted function's name.

    Example::

        with count_compiles() as log:
            f(x); f(x)
        assert log.count == 1
    """
    log = CompileLog()

    def listener(event: str, duration: float, **kwargs):
        if event == COMPILE_EVENT:
            log.names.append(str(kwargs.get("fun_name", "?")))
            log.seconds.append(float(duration))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield log
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def memory_stats(jitted: Callable, *args) -> dict[str, int]:
    """XLA's static memory plan for ``jitted(*args)`` (`Compiled.memory_analysis()`), in bytes.

    ``peak_bytes`` = arguments + outputs + temporaries - aliased: what the computation needs live at once.
    """
    m = jitted.lower(*args).compile().memory_analysis()
    if m is None:
        return {}
    out = {k: int(getattr(m, f"{k}_size_in_bytes", 0)) for k in ("argument", "output", "temp", "alias")}
    out["peak"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return {f"{k}_bytes": v for k, v in out.items()}


def rss_bytes() -> int:
    """The process's resident set size now (Linux ``/proc/self/status``), or 0 where unavailable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (``getrusage``; Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def jsonable(x: Any) -> Any:
    """``x`` with numpy scalars turned into Python numbers (for ``json.dumps``)."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


def family_main(argv: Optional[Sequence[str]], *, name: str, doc: str, run: Callable[[bool], dict],
                markdown: Callable[[dict], str]) -> dict:
    """The command line of a model family's benchmark (``python -m experiments.benchmarks.<name> [--quick]
    [--out PATH]``): runs it, writes ``results_<name>[_quick].json`` and the ``.md`` table beside it, prints the
    table; returns the results."""
    import argparse
    import json
    import pathlib

    p = argparse.ArgumentParser(prog=f"python -m experiments.benchmarks.{name}", description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    p.add_argument("--out", default=None,
                   help=f"JSON path (default experiments/benchmarks/results_{name}[_quick].json)")
    args = p.parse_args(argv)
    here = pathlib.Path(__file__).resolve().parent
    path = pathlib.Path(args.out or here / f"results_{name}{'_quick' if args.quick else ''}.json")
    out = run(args.quick)
    path.write_text(json.dumps(jsonable(out), indent=2) + "\n")
    md = markdown(out)
    path.with_suffix(".md").write_text(md)
    print(md)
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return out
