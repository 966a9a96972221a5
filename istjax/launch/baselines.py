"""A study's trivial baselines and its regime: what a table's models must beat before a comparison between them says
anything.

Each kind of data has the baseline that says whether a model learned beyond counting, computed here by the library
on the same split the study reports:

* character-level text: the unigram, bigram and trigram count tables (`istjax.data.ngram`: add-one smoothing, fit
  on the training windows, nats per character on the evaluated windows);
* multi-label (extreme) data: the most-frequent-labels predictor (`istjax.xmc.baselines`: every metric the task
  computes, P@1/3/5, nDCG@5, PSP@1/3/5);
* any other classification (images, speech, tables, graphs: a node's features): `linear_baseline`, a softmax
  regression trained full batch to convergence (deterministic for a seed).

`baseline_sections` computes them for a config and names the study's *regime* baseline (for text, the trigram
table: a model above it is in the regime where it has not learned what counts give); `record_sections` adds both to
a results file, as ``baselines`` (name -> ``{"what", "test_loss", "test_accuracy", ...}``, the run's metric names)
and ``regime`` (``{"baseline", "metric", "direction"}``), which ``experiments.report --check`` reads
(``experiments.claims``: a claimed comparison's arms must beat the regime baseline). A study that runs through
`istjax.launch.tuning.tune_then_run` passes them as ``sections``.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Mapping, Optional

import numpy as np

from istjax.core.errors import ArgError

__all__ = ["REGIME", "linear_baseline", "dataset_baselines", "data_sections", "baseline_sections",
           "record_sections"]

#: The regime baseline of each kind of data: (baseline, metric, direction).
REGIME = {"text": ("trigram", "test_loss", "min"), "multilabel": ("most_frequent_labels", "test_accuracy", "max"),
          "classification": ("linear", "test_accuracy", "max")}


def _features(data: Any, split: str) -> np.ndarray:
    """``[n, F] float32`` features of a split: the examples flattened, or, for a graph's node indices, the nodes'
    features (``data.shared["graph"].nodes``)."""
    x = np.asarray(getattr(data, f"{split}_x"))
    graph = data.shared.get("graph") if isinstance(data.shared, Mapping) else None
    if graph is not None:
        return np.asarray(graph.nodes, np.float32)[x.astype(np.int64).reshape(-1)]
    return x.reshape(len(x), -1).astype(np.float32)


def linear_baseline(data: Any, *, seed: int = 0, weight_decay: float = 1e-4, max_steps: int = 6000, chunk: int = 50,
                    tol: float = 1e-4) -> dict[str, Any]:
    """A softmax regression on ``data``'s features, trained full batch with L-BFGS (`optax.lbfgs`, its zoom line
    search) to convergence: until the gradient's norm is below ``tol`` times its norm at the start (checked every
    ``chunk`` iterations), or ``max_steps`` iterations; its scores on the evaluated split.

    ``weight_decay`` is an L2 penalty on the weights, so the loss is strictly convex: one minimum, which L-BFGS
    reaches whatever the start (``N(0, 0.01^2)`` drawn from ``seed``); every step reads the whole training split, so
    the result is a function of the data and the seed.

    Returns:
      ``{"what", "test_accuracy", "test_loss", "train_accuracy", "train_loss", "steps", "converged",
      "gradient_norm", "seed"}``.
    """
    import jax
    import jax.numpy as jnp
    import optax

    if getattr(data, "vocabulary", None) or getattr(data, "num_feature_ids", None) is not None:
        raise ArgError("data", data.name, "the linear baseline is a single-label classifier's;",
                       "text has n-gram tables (istjax.data.ngram), multi-label data the constant predictor "
                       "(istjax.xmc.baselines).")
    x, xt = jnp.asarray(_features(data, "train")), jnp.asarray(_features(data, "test"))
    y, yt = jnp.asarray(np.asarray(data.train_y), jnp.int32), jnp.asarray(np.asarray(data.test_y), jnp.int32)
    c = int(data.num_classes)
    params = {"w": 0.01 * jax.random.normal(jax.random.PRNGKey(seed), (x.shape[1], c)), "b": jnp.zeros(c)}

    def scores(p, x, y):
        logits = x @ p["w"] + p["b"][None, :]
        return (optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(),
                jnp.mean(jnp.argmax(logits, -1) == y))

    def objective(p):
        return scores(p, x, y)[0] + weight_decay * 0.5 * jnp.sum(p["w"] ** 2)

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    @jax.jit
    def steps(p, state):
        def step(carry, _):
            p, state = carry
            value, grad = value_and_grad(p, state=state)
            updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=objective)
            return (optax.apply_updates(p, updates), state), None
        (p, state), _ = jax.lax.scan(step, (p, state), None, length=chunk)
        return p, state, optax.tree_utils.tree_norm(jax.grad(objective)(p))

    start = float(optax.tree_utils.tree_norm(jax.grad(objective)(params)))
    state, done, norm = opt.init(params), 0, start
    while done < max_steps and not norm <= tol * start:
        params, state, norm = steps(params, state)
        done, norm = done + chunk, float(norm)
    (train_ce, train_acc), (test_ce, test_acc) = scores(params, x, y), scores(params, xt, yt)
    return {"what": f"softmax regression, L2 {weight_decay:g}, full batch L-BFGS until the gradient's norm fell below "
                    f"{tol:g} of its start",
            "test_accuracy": float(test_acc), "test_loss": float(test_ce), "train_accuracy": float(train_acc),
            "train_loss": float(train_ce), "steps": done, "converged": norm <= tol * start,
            "gradient_norm": norm, "gradient_norm_start": start,
            "seed": seed}


def _kind(data: Any) -> str:
    if getattr(data, "vocabulary", None):
        return "text"
    return "multilabel" if getattr(data, "num_feature_ids", None) is not None else "classification"


def dataset_baselines(data: Any, *, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The trivial baselines of ``data`` by its kind (module docstring), name -> scores."""
    kind = _kind(data)
    if kind == "text":
        from istjax.data.ngram import ngram_baselines

        return ngram_baselines(data)
    if kind == "multilabel":
        from istjax.xmc.baselines import constant_baseline

        return {"most_frequent_labels": constant_baseline(data)}
    return {"linear": linear_baseline(data, seed=seed)}


def data_sections(data: Any, *, seed: int = 0, regime: Optional[tuple[str, str, str]] = None) -> dict[str, Any]:
    """``{"baselines", "regime"}`` for ``data`` (a loaded `istjax.data.Dataset`, scored on its evaluated split): its
    `dataset_baselines` and its regime, ``regime`` or the kind's (`REGIME`) as ``{"baseline", "metric",
    "direction"}``. For a study whose data no config names (a graph it generates)."""
    baselines = dataset_baselines(data, seed=seed)
    name, metric, direction = regime or REGIME[_kind(data)]
    if name not in baselines:
        raise ArgError("regime", name, f"regime baseline {name!r} is not among {sorted(baselines)};",
                       "name one of them.")
    return {"baselines": baselines, "regime": {"baseline": name, "metric": metric, "direction": direction}}


def baseline_sections(config: Any, *, seed: int = 0, regime: Optional[tuple[str, str, str]] = None
                      ) -> dict[str, Any]:
    """`data_sections` of the data ``config`` names (`istjax.launch.config.load_config_data`, so on the split its
    runs are scored on)."""
    from istjax.launch.config import load_config_data

    return data_sections(load_config_data(config), seed=seed, regime=regime)


def record_sections(out: os.PathLike, sections: Mapping[str, Any]) -> pathlib.Path:
    """Adds ``sections`` (`baseline_sections`; any top-level entries) to the results file ``out``, keeping the rest
    (a file not yet written is started with them: a study records its baselines before its first run); written
    whole, atomically (`istjax.launch.study.write_json`)."""
    from istjax.launch.study import write_json

    path = pathlib.Path(out)
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update(json.loads(json.dumps(dict(sections))))
    return write_json(out, doc)
