"""The theory study's table: ``experiments/theory/results/quadratic/results.json`` (``python -m
experiments.theory.main``). Registered in `experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from experiments.tables import headline_row, markdown_table, scalar, table

QUADRATIC = "experiments/theory/results/quadratic/results.json"


def _vector(v: Sequence[float]) -> str:
    return "[" + ", ".join(f"{x:.4f}".replace("-", "−") for x in v) + "]"


@table("theory_quadratic", QUADRATIC)
def _theory_quadratic(d):
    runs = d["config"]["num_runs"]
    rows = []
    for p in d["results"]["panels"]:
        schedule = f", γ_t = γ/(1+{p['decay']:g}t)" if p["decay"] else ""
        rows.append([f"{p['local_steps']}, {p['step_size']:g}{schedule}", _vector(p["x_hat_enumerated"]),
                     _vector(p["mean_of_runs_final"]), f"{max(abs(z) for z in p['z_scores_final']):.2f}",
                     _vector(p["x_star"])])
    return markdown_table(["K, γ", "x̂ (exact, enumerated)", f"mean of {runs} runs",
                           "largest \\|z\\|", "x*"], rows)


def _z_scores(d) -> list[float]:
    return [z for p in d["results"]["panels"] for z in p["z_scores_final"]]


scalar("theory.z_count", QUADRATIC, lambda d: str(len(_z_scores(d))))
scalar("theory.z_max", QUADRATIC, lambda d: f"{max(abs(z) for z in _z_scores(d)):.2f}")
scalar("theory.runs", QUADRATIC, lambda d: str(d["config"]["num_runs"]))
scalar("theory.closed_form_diff", QUADRATIC, lambda d: f"{max(p['closed_form_max_abs_diff'] or 0.0 for p in d['results']['panels']):.0e}")


@headline_row("quadratic theory: IST's mean iterate vs the exact expected fixed point, heterogeneous d = 6, n = 3 "
              "(`python -m experiments.theory.main --config=experiments/theory/configs/quadratic.py "
              "--workdir=experiments/theory/results/quadratic`)", "`docs/theory.md`", QUADRATIC)
def _headline_theory(d):
    z = _z_scores(d)
    inside = sum(abs(x) <= 2 for x in z)
    return (f"mean of {d['config']['num_runs']} runs within 2 standard errors of x̂ in {inside} of {len(z)} "
            f"coordinates (largest \\|z\\| {max(abs(x) for x in z):.2f}), 5 settings of K and γ")
