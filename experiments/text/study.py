"""The transformer study of docs/transformers.md: IST by width (three scalings) and by depth against data parallel,
local SGD and DiLoCo on Shakespeare's plays, W = 2 and 4, the same samples for every cell, three seeds.

Every cell trains `experiments/configs/shakespeare_transformer.py` (4 layers, 4 heads, width 128, context 64; Adam 2e-3,
its state restarted every round, K = 10 local steps of B = 32 windows) for ``--samples`` windows (rounds = samples / (W
x K x B)), evaluated on 512 held-out windows of whole plays; after every run ``experiments/text/results/study.json`` is
rewritten: per cell the validation loss (nats per character) over seeds (``val_loss_mean``), the bytes a worker moves a
round, and each run's curve of validation loss against rounds, samples and wall time::

    python -m experiments.text.study                  # every cell, seeds 0,1,2 (about an hour on 2 cores)
    python -m experiments.text.study --only ist_width_train_w2 --seeds 0
    python -m experiments.text.study --plot           # redraw docs/figures/transformers.png from the file
    python -m experiments.text.study --text           # a generated text from every cell's seed-0 model
    python -m experiments.text.study --mpi parameter_server,sharded --workers 2 \\
        --only ist_width_test_w2,ist_depth_test_w2 --out experiments/text/results/mpi.json

``--mpi MODES`` trains the cells on the MPI runtime instead, one ``mpiexec -n W`` launch a run, in each named mode
(labels ``<cell>_<mode>``; the sharded mode evaluates in place, no process gathering the model, and deals the
groups with the stratified sampler, each rank owning a fixed 1/W of them): the same cells trained by processes that
exchange over MPI.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, Optional

from experiments.grid import REPO, Cell, parser
from istjax.launch.metrics import read_metrics
from istjax.launch.study import Planned, run_record, run_study

CONFIG = "experiments/configs/shakespeare_transformer.py"
OUT = REPO / "experiments" / "text" / "results" / "study.json"
FIGURE = REPO / "docs" / "figures" / "transformers.png"
K, B = 10, 32
NAMES = {"ist": "IST", "data_parallel": "data parallel", "local_sgd": "local SGD", "diloco": "DiLoCo"}


MPI_MODES = ("parameter_server", "sharded")


def cells(samples: int, workers: Sequence[int] = (2, 4)) -> list[Cell]:
    """Per W: IST by width with no / training-time / test-time scaling, IST by depth (test-time scaling, ResIST's),
    and the three baselines, each for ``samples`` windows."""
    out = []
    for w in workers:
        rounds = samples // (w * K * B)
        if rounds * w * K * B != samples:
            raise SystemExit(f"--samples {samples} is not a whole number of rounds at W = {w} (W x K x B = "
                             f"{w * K * B}); use a multiple of {4 * K * B}.")
        base = (f"--config.num_workers={w}", f"--config.local_steps={K}", f"--config.batch_size={B}",
                f"--config.num_rounds={rounds}", f"--config.eval_every={max(1, rounds // 4)}",
                f"--config.checkpoint_every={rounds}",
                "--config.algorithm.optimizer_state=reset")  # as this study ran: every local state restarted

        def cell(label, algorithm, split="width", scaling="train", **info):
            return Cell(f"{label}_w{w}", CONFIG, base + (f"--config.algorithm.name={algorithm}",
                                                        f"--config.model.split={split}",
                                                        f"--config.model.scaling={scaling}"),
                        {"split": split if algorithm == "ist" else None,
                         "scaling": scaling if algorithm == "ist" else None, **info})

        out += [cell("ist_width_none", "ist", scaling="none"),
                cell("ist_width_train", "ist", scaling="train"),
                cell("ist_width_test", "ist", scaling="test"),
                cell("ist_depth_test", "ist", split="depth", scaling="test"),
                cell("data_parallel", "data_parallel"),
                cell("local_sgd", "local_sgd"),
                cell("diloco", "diloco")]
    return out


def on_mpi(cells_: Sequence[Cell], modes: Sequence[str]) -> list[Cell]:
    """Each cell once per MPI mode: ``runtime.name=mpi``, ``runtime.mode=<mode>``, label ``<cell>_<mode>``."""
    bad = [m for m in modes if m not in MPI_MODES]
    if bad:
        raise SystemExit(f"--mpi {','.join(modes)}: {bad[0]!r} is not a mode; use some of {','.join(MPI_MODES)}.")
    def mode(c: Cell, m: str) -> tuple[str, ...]:
        extra = ("--config.runtime.name=mpi", f"--config.runtime.mode={m}")
        if m == "sharded":  # each rank owns a fixed 1/W of every group: the stratified sampler deals them
            extra += ("--config.sampler.name=stratified", f"--config.sampler.num_owners={_workers(c)}")
        return c.overrides + extra

    return [Cell(f"{c.label}_{m}", c.config, mode(c, m), {**c.info, "runtime": "mpi", "mode": m})
            for m in modes for c in cells_]


def mpi_trainer():
    """`run_study`'s ``train`` for MPI cells: ``mpiexec -n W istjax train ...`` (one process a worker)."""
    from istjax.launch.study import child_trainer

    mpiexec = str(pathlib.Path(sys.executable).parent / "mpiexec")
    return child_trainer(lambda p: [mpiexec, "-n", str(_workers(p.cell))], root=REPO, timeout=1800)


def _workers(cell: Cell) -> int:
    return int(next(o for o in cell.overrides if o.startswith("--config.num_workers=")).split("=")[1])


def record(p: Planned) -> Optional[dict[str, Any]]:
    """`run_record` plus the run's validation curve (``metrics.jsonl``: every evaluation's round, samples, wall time
    and validation loss)."""
    r = run_record(p)
    if r is None:
        return None
    curve = [{k: m[k] for k in ("round", "samples_seen", "wall_time_s", "test_loss")} for m in read_metrics(p.run_dir)
             if "test_loss" in m]
    return {**r, "val_loss": r["test_loss"], "curve": curve}


def baselines(out: pathlib.Path) -> dict:
    """The trivial baselines on the study's validation windows (`istjax.launch.baselines`: unigram, bigram and
    trigram character tables fit on the training plays; the regime, the trigram table), from its first cell's
    resolved config."""
    from istjax.launch.baselines import baseline_sections
    from istjax.launch.config import from_dict

    doc = json.loads(out.read_text())
    return baseline_sections(from_dict(dict(next(iter(doc["configs"].values()))["resolved"])))


_BASELINES: dict = {}  # computed once a process: the data are the same for every run


def finish(out: pathlib.Path) -> None:
    """Adds each row's validation loss over seeds (``val_loss_mean``, ``val_loss_std``, nats per character) and the
    trivial baselines (`baselines`)."""
    from istjax.launch.study import mean_std

    if not _BASELINES:
        _BASELINES.update(baselines(out))
    doc = json.loads(out.read_text())
    doc.update(_BASELINES)
    for row in doc["rows"]:
        mine = [r for r in doc["runs"] if r["label"] == row["label"]]
        row["val_loss_mean"], row["val_loss_std"] = mean_std(r["val_loss"] for r in mine)
    out.write_text(json.dumps(doc, indent=1) + "\n")


PROMPT = "\nFirst Citizen:\n"  # no play's first line: every model is prompted alike
TEXT_LENGTH = 240


def samples(out: pathlib.Path, workdir: pathlib.Path, seed: int = 0) -> dict[str, str]:
    """A generated text from each cell's run of ``seed`` (its last checkpoint, its test-time network,
    `istjax.models.transformer.generate` at temperature 0.8 from `PROMPT` with key 0), written into the results
    file under ``samples``."""
    import jax

    from istjax.data.text import Vocabulary
    from istjax.launch.restore import restore_run
    from istjax.models.transformer import generate

    doc = json.loads(out.read_text())
    texts = {}
    for row in doc["rows"]:
        run_dir = workdir / row["label"] / f"s{seed}"
        if not (run_dir / "summary.json").exists():
            continue
        _, experiment, state, _ = restore_run(run_dir)
        vocab = Vocabulary(experiment.dataset.vocabulary)
        ids = generate(experiment.algorithm.task.eval_module, state.params, vocab.encode(PROMPT), TEXT_LENGTH,
                       jax.random.key(0))
        texts[row["label"]] = PROMPT + vocab.decode(ids)
        print(f"{row['label']}:{texts[row['label']]}\n", flush=True)
    doc["samples"] = {"seed": seed, "prompt": PROMPT, "temperature": 0.8, "texts": texts}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return texts


def plot(out: pathlib.Path = OUT, figure: pathlib.Path = FIGURE, against_bytes: bool = False) -> pathlib.Path:
    """Validation loss against samples, one panel per W, each cell's mean curve over its seeds; with
    ``against_bytes`` a second row of panels against the bytes a worker has moved (received and sent, log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(out.read_text())
    workers = sorted({r["num_workers"] for r in doc["rows"]})
    if not workers:
        return figure
    rows = 2 if against_bytes else 1
    fig, axes = plt.subplots(rows, len(workers), figsize=(5.2 * len(workers), 3.8 * rows), squeeze=False,
                             sharey=True)
    for col, w in enumerate(workers):
        for row in (r for r in doc["rows"] if r["num_workers"] == w):
            _plot_cell(axes[:, col], doc, row)
        axes[0][col].set_title(f"W = {w}")
        axes[0][col].set_xlabel("characters trained (millions)")
        if against_bytes:
            axes[1][col].set_xscale("log")
            axes[1][col].set_xlabel("bytes a worker has moved (received + sent)")
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("validation loss (nats per character)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    plt.close(fig)
    return figure


def _plot_cell(axes, doc: dict, row: dict) -> None:
    """One cell's mean curve over its seeds: against characters on ``axes[0]``, against bytes on ``axes[1]`` when
    there is one."""
    import numpy as np

    curves = [r["curve"] for r in doc["runs"] if r["label"] == row["label"]]
    if not curves:
        return
    n = min(len(c) for c in curves)
    y = np.mean([[c["test_loss"] for c in cv[:n]] for cv in curves], axis=0)
    label = row["label"].rsplit("_w", 1)[0].replace("_", " ")
    axes[0].plot([c["samples_seen"] * 64 / 1e6 for c in curves[0][:n]], y, marker="o", markersize=3, label=label)
    if len(axes) > 1:
        per_round = 2 * row["bytes_per_worker_per_round"]
        axes[1].plot([c["round"] * per_round for c in curves[0][:n]], y, marker="o", markersize=3, label=label)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from istjax.launch.baselines import record_sections

    p = parser("python -m experiments.text.study", __doc__.split("\n\n")[0], ["study"])
    p.add_argument("--samples", type=int, default=19200, help="windows of 64 characters every cell trains")
    p.add_argument("--out", type=pathlib.Path, default=OUT)
    p.add_argument("--workers", default="2,4", help="comma-separated W (default 2,4)")
    p.add_argument("--mpi", default="", help="comma-separated MPI modes (parameter_server, sharded): train the "
                                             "cells under mpiexec in each instead of the simulate runtime")
    p.add_argument("--text", action="store_true", help="train nothing: write a generated text from every cell's "
                                                        "first-seed run into the results file")
    p.add_argument("--baselines", action="store_true", help="train nothing: record the character n-gram tables "
                                                             "on the same validation windows in the results file")
    args = p.parse_args(argv)
    if args.plot:
        print(plot(args.out))
        return 0
    workdir = args.workdir or REPO / "runs" / "text"
    if args.text:
        samples(args.out, workdir, args.seeds[0])
        return 0
    if args.baselines:
        print(record_sections(args.out, baselines(args.out)))
        return 0
    command = "python -m experiments.text.study " + " ".join(sys.argv[1:] if argv is None else argv)
    todo = cells(args.samples, [int(w) for w in args.workers.split(",") if w])
    only = [s for s in args.only.split(",") if s]
    modes = [m for m in args.mpi.split(",") if m]
    if modes:  # --only names the simulate cells; each is trained in every mode
        todo = on_mpi([c for c in todo if not only or c.label in only], modes)
        only = []
    redraw = (lambda: None) if modes else (lambda: plot(args.out))  # the figure draws the simulate study
    outcome = run_study("text", todo, args.seeds, workdir, out=args.out, command=command.strip(),
                        root=REPO, only=only, record=record, cache=pathlib.Path(workdir) / ".jax_cache",
                        train=mpi_trainer() if modes else None,
                        after_run=lambda run, error: (finish(args.out), redraw()))
    finish(args.out)  # the runner's last rewrite of the file
    redraw()
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
