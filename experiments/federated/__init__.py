"""The federated study (issue 58): clients drawn from a data set (`istjax.data.clients`, `istjax.data.natural_clients`)
and the algorithms that train on them (`istjax.algorithms.federated`). ``python -m experiments.federated.splits``
draws the splits into docs/figures/."""
