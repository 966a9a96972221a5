"""Extreme multi-label classification (XMC): ranking metrics and the blockwise top-k over labels
(`istjax.xmc.metrics`); the constant predictor, always the most frequent training labels, a study's trivial baseline
(`istjax.xmc.baselines`). The data side (the repository text format, sparse batches, a generator) is
`istjax.data.extreme`.
"""

from istjax.xmc.metrics import blockwise_top_k as blockwise_top_k
from istjax.xmc.metrics import dense_top_k as dense_top_k
from istjax.xmc.metrics import ndcg_at_k as ndcg_at_k
from istjax.xmc.metrics import precision_at_k as precision_at_k
from istjax.xmc.metrics import propensities as propensities
from istjax.xmc.metrics import psp_at_k as psp_at_k
from istjax.xmc.metrics import ranking_metrics as ranking_metrics

__all__ = [
    "blockwise_top_k",
    "dense_top_k",
    "ndcg_at_k",
    "precision_at_k",
    "propensities",
    "psp_at_k",
    "ranking_metrics",
]
