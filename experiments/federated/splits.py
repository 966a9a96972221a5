"""The federated splits drawn (issue 58): who holds which classes of Fashion-MNIST's training set under each split
the study runs, and how much each of Shakespeare's speaking roles holds.

    python -m experiments.federated.splits                 # docs/figures/federated_*.png, about 10 s

Writes, into ``--out`` (default docs/figures):

* ``federated_split_dirichlet_0_1.png``, ``federated_split_dirichlet_0_5.png``, ``federated_split_iid.png`` and
  ``federated_split_shards.png``: Fashion-MNIST's 60,000 training labels split over ``--num-clients`` (100) clients
  as ``istjax train --config.clients.split=...`` splits them (the config's defaults: Dirichlet ``min_size`` 10,
  two shards a client; seed 0), drawn by `istjax.launch.plot_clients.plot_split` (clients x classes, each cell
  the share of the client's examples in the class; each client's size beside). ``--shown`` draws the first
  clients only (all by default: 100 rows stay readable); the title describes the whole split.
* ``federated_shakespeare_roles.png``: the characters each client of ``data.name=shakespeare_roles`` speaks (its
  training and test lines; `istjax.data.natural_clients.load_shakespeare_roles`), a histogram
  (`istjax.launch.plot_clients.plot_client_sizes`).

Fashion-MNIST is read as `istjax.data.load_dataset` reads it (``$ISTJAX_DATA_DIR/fashion-mnist`` or Debian's
/usr/share/datasets/fashion-mnist); ``--num-examples`` splits the first n training labels only (a quick check).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Optional

import numpy as np

import istjax
from istjax.data import clients as clients_lib
from istjax.data.natural_clients import load_shakespeare_roles, shakespeare_roles
from istjax.data.text import shakespeare_plays
from istjax.launch.plot_clients import plot_client_sizes, plot_split

# (file stem, clients.split, the split's own settings), the config's defaults where the study does not change them.
SPLITS = (("dirichlet_0_1", "dirichlet", {"alpha": 0.1, "min_size": 10}),
          ("dirichlet_0_5", "dirichlet", {"alpha": 0.5, "min_size": 10}),
          ("iid", "iid", {}),
          ("shards", "shards", {"shards_per_client": 2}))


def _first(split: clients_lib.ClientSplit, shown: int) -> clients_lib.ClientSplit:
    """``split``'s first ``shown`` clients (the rest's examples held by none: only the drawing is cut)."""
    return dataclasses.replace(split, indices=split.indices[:shown], names=split.names[:shown])


def draw_fashion_mnist(out: pathlib.Path, *, num_clients: int = 100, seed: int = 0, shown: Optional[int] = None,
                       num_examples: Optional[int] = None) -> list[pathlib.Path]:
    """The four splits of Fashion-MNIST's training labels (module docstring) into ``out``; their paths."""
    labels = np.asarray(istjax.data.load_dataset("fashion_mnist").train_y)[:num_examples]
    paths = []
    for stem, kind, options in SPLITS:
        split = getattr(clients_lib, kind)(labels, num_clients, seed=seed, **options)
        drawn = split.num_clients if shown is None else min(shown, split.num_clients)
        title = (f"Fashion-MNIST, {split.describe()}"
                 + (f"; the first {drawn} clients drawn" if drawn < split.num_clients else ""))
        paths.append(plot_split(_first(split, drawn), labels, 10, out / f"federated_split_{stem}.png", title=title))
    return paths


def draw_shakespeare(out: pathlib.Path) -> pathlib.Path:
    """The characters spoken by each client of ``shakespeare_roles`` (its defaults), a histogram, into ``out``."""
    data = load_shakespeare_roles()
    chars = {f"{r.play}/{r.name}": r.num_chars for r in shakespeare_roles(shakespeare_plays())}
    sizes = np.array([chars[name] for name in data.client_names])
    title = (f"Shakespeare by speaking role (data.name=shakespeare_roles): {sizes.size} clients, characters spoken "
             f"{sizes.min():,}..{sizes.max():,}, median {int(np.median(sizes)):,}")
    return plot_client_sizes(sizes, out / "federated_shakespeare_roles.png", unit="characters", title=title)


def main(argv: Optional[Sequence[str]] = None) -> list[pathlib.Path]:
    parser = argparse.ArgumentParser(prog="python -m experiments.federated.splits", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/figures", help="folder the PNGs are written to")
    parser.add_argument("--num-clients", type=int, default=100, help="clients of each Fashion-MNIST split")
    parser.add_argument("--shown", type=int, default=None, help="clients drawn of each split (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-examples", type=int, default=None, help="split the first n training labels only")
    parser.add_argument("--skip-shakespeare", action="store_true", help="draw the Fashion-MNIST splits only")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    paths = draw_fashion_mnist(out, num_clients=args.num_clients, seed=args.seed, shown=args.shown,
                               num_examples=args.num_examples)
    if not args.skip_shakespeare:
        paths.append(draw_shakespeare(out))
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    main()
