"""Data: loaders, the dataset registry and the per-worker batching plan."""

from istjax.data.datasets import *  # noqa: F401,F403
from istjax.data.datasets import __all__ as __all__  # noqa: F401
