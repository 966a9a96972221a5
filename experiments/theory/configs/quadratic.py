"""Quadratic IST (Shulgin and Richtárik): distance to the expected fixed point and to the optimum vs rounds.

Command (about a minute on 2 CPU cores)::

    python -m experiments.theory.main --config=experiments/theory/configs/quadratic.py --workdir=/tmp/theory_quadratic

Writes ``quadratic.png`` and ``results.json`` to the workdir. One panel per (local steps K, step size γ) of a
heterogeneous problem with d = 6 coordinates on n = 3 workers (90 partitions, enumerated). What the plot should show:

* the mean iterate over ``num_runs`` runs (solid blue) converges to the exact expected fixed point x̂ along the
  predicted curve ``||E[A]^t (x0 - x̂)||`` (dashed black) until it reaches the Monte-Carlo floor (dotted: the standard
  error of the mean), so the run and the prediction overlap;
* its distance to the optimum x* (solid red) follows its prediction (dashed grey) and levels off at the bias
  ``||x̂ - x*||`` (horizontal line): IST does not converge to x*;
* for K = 1 the bias is the same for every γ (x̂ does not depend on γ) and the decayed-step panel levels off at
  the same bias; for K > 1 the fixed point moves with γ and K;
* a single run (faint) fluctuates around x̂ with an RMS distance that shrinks with γ.

Vary with ``--config.heterogeneity=0`` (homogeneous), ``--config.dim=4 --config.num_workers=4`` (d = n), etc.

Result: all 30 per-coordinate z-scores of the mean of 1000 runs against the enumerated x̂ lie within ±2 (largest
1.96), and the bias ||x̂ - x*|| is 0.65 (0.64 for K = 4, γ = 0.08), in
``experiments/theory/results/quadratic/results.json``, rendered in docs/theory.md.
"""

import ml_collections


def get_config():
    c = ml_collections.ConfigDict()
    c.study = "quadratic"
    c.seed = 0
    c.dim = 6
    c.num_workers = 3
    c.heterogeneity = 1.0
    c.b_scale = 1.0
    c.rounds = 300
    c.num_runs = 1000
    # One panel per entry: (local_steps, step_size, decay). Decay d: step γ / (1 + d t).
    c.sweep = ((1, 0.02, 0.0), (1, 0.08, 0.0), (1, 0.08, 0.05), (4, 0.02, 0.0), (4, 0.08, 0.0))
    return c
