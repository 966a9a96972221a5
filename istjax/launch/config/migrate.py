"""The flat field names of earlier versions, and where each now lives: refused with the nested name in a new config,
read through in an old run's ``config.json`` (`upgrade_dict`), so old runs stay resumable and comparable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

__all__ = ["RENAMED", "OPEN_SECTIONS", "renamed", "upgrade_dict"]

#: The flat field names of earlier versions -> where each now lives (``--config.backend`` -> ``runtime.name``).
RENAMED = {
    "algorithm": "algorithm.name",
    "optimizer_state": "algorithm.optimizer_state",
    "model_state": "algorithm.model_state",
    "resist_min_depth": "algorithm.min_depth",
    "resist_test_scale": "algorithm.test_scale",
    "sampler": "sampler.name",
    "sampler_args": "sampler",
    "group_samplers": "sampler.groups",
    "dataset": "data.name",
    "dataset_kwargs": "data.kwargs",
    "sharding": "data.sharding",
    "augment": "data.augment",
    "augment_pad": "data.augment_pad",
    "graph_batches": "data.graph_batches",
    "num_clusters": "data.num_clusters",
    "clusters_per_step": "data.clusters_per_step",
    "cluster_method": "data.cluster_method",
    "backend": "runtime.name",
    "mpi_mode": "runtime.mode",
}
#: The sections whose keys a config may add (a config file need not name them first): the loader's arguments, checked
#: against the loader, and the per-group samplers, checked against the model's groups.
OPEN_SECTIONS = ("data.kwargs", "sampler.groups")


def renamed(field: str) -> Optional[str]:
    """The nested name of a flat field of earlier versions (``"backend"`` -> ``"runtime.name"``,
    ``"sampler_args.num_owners"`` -> ``"sampler.num_owners"``), or None when ``field`` is not one."""
    head, _, rest = field.partition(".")
    if head not in RENAMED:
        return None
    if head in ("algorithm", "sampler") and rest:  # already nested: algorithm.name, sampler.groups.x
        return None
    new = RENAMED[head]
    return f"{new}.{rest}" if rest else new



def upgrade_dict(values: dict) -> dict:
    """``values`` with the flat fields of earlier versions moved to their sections (`RENAMED`)."""
    out: dict = {}

    def put(dotted: str, value) -> None:
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        if isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
            node[leaf].update(value)
        else:
            node[leaf] = value

    for key, value in values.items():
        flat = key in RENAMED and not (key in ("algorithm", "sampler") and isinstance(value, Mapping))
        put(RENAMED[key] if flat else key, value)
    return out
