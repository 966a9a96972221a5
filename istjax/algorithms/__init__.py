"""Algorithms: factories returning an `Algorithm` of pure pieces (see `istjax.algorithms.base`).

* `istjax.algorithms.ist`: Independent Subnetwork Training (arXiv 1910.02120).
* `istjax.algorithms.replicated`: the data-parallel and local-SGD baselines.
* `istjax.algorithms.resist`: ResIST, IST over the depth of a ResNet (arXiv 2107.00961).
* `istjax.algorithms.reference`: the plain Python-loop rounds every runtime is tested against.
"""

from istjax.algorithms.base import Algorithm as Algorithm
from istjax.algorithms.base import apply_update as apply_update
from istjax.algorithms.base import local_train as local_train
from istjax.algorithms.ist import ist as ist
from istjax.algorithms.replicated import data_parallel as data_parallel
from istjax.algorithms.replicated import local_sgd as local_sgd
from istjax.algorithms.resist import resist as resist

__all__ = ["Algorithm", "apply_update", "data_parallel", "ist", "local_sgd", "local_train", "resist"]
