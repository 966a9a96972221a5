"""The paper's 2x2 example: L = [[a, c], [c, b]], two workers, b_i = 0, on both sides of c = 2ab / (a + b).

Command (under a minute)::

    python -m experiments.theory.main --config=experiments/theory/configs/two_by_two.py --workdir=/tmp/theory_2x2

Writes ``two_by_two.png`` and ``results.json``. What the plot should show (a = 1, b = 4, threshold 1.6):

* left: ``f(x_t) / f(x_0)`` from the worst start (the unit x minimising ⟨∇f(x), g(x)⟩). Below the threshold
  (c = 1.2) it decreases at every round. Above it (c = 1.9) the first rounds *increase* f (IST is not a descent
  method there), yet f still goes to zero: the iteration x -> (I - γ n Diag(L)) x contracts for any c. In
  Diag(L)^(-1/2) coordinates (dashed) f decreases at every round again;
* right: the smallest eigenvalue of n (L Diag(L) + Diag(L) L) / 2 against c, crossing zero exactly at
  c = 2ab / (a + b) (vertical line), for the unscaled and the rescaled problem (which stays positive).

Result: above the threshold (c = 1.9) f rises for the first 2 rounds (f(x₁)/f(x₀) = 1.434) and still converges
(f(x₆₀)/f(x₀) = 1.4e-5), below it (c = 1.2) it never rises (4.7e-6 after 60 rounds), with a = 1, b = 4, γ = 0.05, in
docs/theory.md (no results file is committed).
"""

import ml_collections


def get_config():
    c = ml_collections.ConfigDict()
    c.study = "two_by_two"
    c.seed = 0
    c.a = 1.0
    c.b = 4.0
    c.cs = (1.2, 1.9)
    c.step_size = 0.05
    c.rounds = 60
    return c
