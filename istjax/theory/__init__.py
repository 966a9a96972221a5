"""Theory toolkit: IST on problems whose behaviour is known in closed form.

* `istjax.theory.quadratic`: IST on quadratics (Shulgin and Richtárik, arXiv 2306.16484), run through istjax's own
  partition / extract / merge, with the exact expected fixed point, the paper's closed forms and the 2x2 example.
* `istjax.theory.regression`: a wide one-hidden-layer ReLU network trained with IST on a regression task (Liao and
  Kyrillidis, TMLR 2022): loss floor against the number of sub-networks and local steps.
* `istjax.theory.consensus`: local SGD's biased fixed point and consensus ADMM's unbiased one on heterogeneous
  quadratics, in closed form, with the problem as a task the real algorithms run on.

See ``docs/theory.md`` and ``experiments/theory/``.
"""

from istjax.theory.quadratic import COORDS as COORDS
from istjax.theory.quadratic import FixedPoint as FixedPoint
from istjax.theory.quadratic import Quadratic as Quadratic
from istjax.theory.quadratic import Trajectory as Trajectory
from istjax.theory.quadratic import all_partitions as all_partitions
from istjax.theory.quadratic import ascent_direction as ascent_direction
from istjax.theory.quadratic import client_spec as client_spec
from istjax.theory.quadratic import closed_form_fixed_point as closed_form_fixed_point
from istjax.theory.quadratic import coordinate_spec as coordinate_spec
from istjax.theory.quadratic import descent_threshold as descent_threshold
from istjax.theory.quadratic import diag_rescale as diag_rescale
from istjax.theory.quadratic import expected_fixed_point as expected_fixed_point
from istjax.theory.quadratic import ist_round as ist_round
from istjax.theory.quadratic import quadratic as quadratic
from istjax.theory.quadratic import random_quadratic as random_quadratic
from istjax.theory.quadratic import round_map as round_map
from istjax.theory.quadratic import simulate as simulate
from istjax.theory.quadratic import two_by_two as two_by_two

__all__ = [
    "COORDS",
    "FixedPoint",
    "Quadratic",
    "Trajectory",
    "all_partitions",
    "ascent_direction",
    "client_spec",
    "closed_form_fixed_point",
    "coordinate_spec",
    "descent_threshold",
    "diag_rescale",
    "expected_fixed_point",
    "ist_round",
    "quadratic",
    "random_quadratic",
    "round_map",
    "simulate",
    "two_by_two",
]
