"""The studies behind every number in the README and docs/: run each as ``python -m experiments.<family>.<module>``
from the repository root (see `experiments.grid` and `istjax.launch.study`)."""
