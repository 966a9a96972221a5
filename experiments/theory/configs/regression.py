"""Masked-neuron regression (Liao and Kyrillidis): loss floor vs the number of sub-networks W and local steps K.

Command (a few minutes on 2 CPU cores)::

    python -m experiments.theory.main --config=experiments/theory/configs/regression.py --workdir=/tmp/theory_reg

Writes ``regression.png`` and ``results.json``. A one-hidden-layer ReLU network (width 512, NTK scaling, fixed
output layer) fits 32 points in 8 dimensions with full-batch gradient steps; every run takes the same number of
gradient steps (``total_steps``, so rounds = total_steps / K). What the plot should show:

* left: the full network's training loss vs gradient steps for IST with W = 1 (plain gradient descent: linear
  convergence to zero) and W > 1 (linear convergence down to a floor);
* middle: the floor (mean loss over the last quarter of the run) vs W for IST's disjoint partition
  (ξ = 1 / W) and each K: the floor grows with W;
* right: the floor vs the number of sub-networks p at a *fixed* selection probability ξ = ``keep_prob``
  (independent Bernoulli masks, averaged on merge): the setting of the paper's theorem, where the paper states the
  neighbourhood shrinks as p grows and widens as K grows.

See docs/theory.md for the measured numbers and how they compare with the paper's statements.

Result: at K = 1 the loss floor grows with W under IST's disjoint partition (4.0e-5 at W = 2, 1.2e-3 at W = 8) and
shrinks with p at a fixed ξ = 0.5 (1.6e-3 at p = 1, 1.7e-4 at p = 8), single seed, in docs/theory.md (no results file
is committed).
"""

import ml_collections


def get_config():
    c = ml_collections.ConfigDict()
    c.study = "regression"
    c.seed = 0
    c.num_points = 32
    c.dim = 8
    c.width = 512
    c.init_scale = 1.0
    c.step_size = 1.0
    c.total_steps = 4000
    c.workers = (1, 2, 4, 8)
    c.local_steps = (1, 4, 16)
    c.keep_prob = 0.5
    c.subnetworks = (1, 2, 4, 8)
    return c
