"""The image studies of docs/images.md: channel IST on a ResNet, ResIST against local SGD, and ResIST's ablation.

A thin script over `istjax.experiment.compare`: each study trains its configs (a finished run in the workdir with
the same config is reused, not retrained), then writes the table (``comparison.md``, ``.csv``, ``.json``) and the
curves (``comparison.png``) into ``--workdir``::

    python experiments/images/studies.py resnet   --workdir=runs/images/resnet    # IST vs DP vs local SGD, W=2,4
    python experiments/images/studies.py resist   --workdir=runs/images/resist    # ResIST vs local SGD, W=2,4,8
    python experiments/images/studies.py ablation --workdir=runs/images/ablation  # the five ablation steps
    python experiments/images/studies.py bytes                                    # ResIST / local SGD bytes

Extra ``--config.FIELD=VALUE`` flags override every run's config (e.g. ``--config.num_rounds=10`` for a quick
look). The first two studies are ``istjax compare`` commands with the right flags; the ablation trains the five
steps of ``experiments/configs/fmnist_resist_ablation.py`` and tabulates them together.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from istjax.experiment import compare
from istjax.experiment.metrics import format_bytes

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run by path: the repository's experiments package
from experiments.grid import Cell, run_grid  # noqa: E402
CONFIGS = REPO / "experiments" / "configs"
RESULTS = REPO / "experiments" / "images" / "results"

STUDIES = {
    "resnet": ["--config", str(CONFIGS / "fmnist_resnet_ist.py"), "--workers", "2,4",
               "--title", "Channel IST vs data parallel vs local SGD, ResNet-18 shape at 1/8 width, Fashion-MNIST"],
    "resist": ["--config", str(CONFIGS / "fmnist_resist.py"), "--algorithms", "resist,local_sgd",
               "--workers", "2,4,8", "--title", "ResIST vs local SGD, pre-activation ResNet (2-2-9 blocks), "
                                                 "Fashion-MNIST"],
}


def ablation(workdir: pathlib.Path, overrides: Sequence[str], overwrite: bool) -> int:
    """Trains the five steps of fmnist_resist_ablation.py into ``workdir/<i>_<step>``; tabulates them."""
    import istjax.experiment.cli as cli
    from istjax.experiment import driver
    from istjax.experiment.plot import load_run

    sys.path.insert(0, str(CONFIGS))
    from fmnist_resist_ablation import STEPS  # noqa: E402  (the config file names its steps)

    runs, failed = [], {}
    for i, step in enumerate(STEPS, 1):
        config, _, _, _ = cli.parse_train_args(
            ["studies.py", f"--config={CONFIGS / 'fmnist_resist_ablation.py'}:{step}", *overrides])
        config.progress = False
        run_dir = workdir / f"{i}_{step}"
        print(f"== ablation step {i}: {step} -> {run_dir}", file=sys.stderr, flush=True)
        try:
            driver.train_and_evaluate(config, run_dir, overwrite=overwrite)
        except driver.TrainingError as e:
            failed[str(run_dir)] = str(e)
            print(f"== {step} failed: {e}", file=sys.stderr, flush=True)
        runs.append(load_run(run_dir))
    table = compare.rows(runs, target=None, notes=failed)
    title = "ResIST ablation in miniature (Fashion-MNIST; the paper's CIFAR-10 accuracy beside each step)"
    paths = compare.write_outputs(runs, table, workdir, title=title, failed=failed)
    text = ablation_table(STEPS, table)
    paths["markdown"].write_text(f"{title}\n\n{text}\n")  # the steps named, instead of compare's generic rows
    print(text)
    print(f"wrote {paths['markdown']}, {paths['png']}")
    return 1 if failed else 0


BYTES_MODELS = {
    # The study's network (fmnist_resist.py), and the paper's PreActResNet-101 layout (3-4-23-3 blocks) with basic
    # blocks at full width, its third section dealt as in the paper's final configuration.
    "fmnist_resist.py (2-2-9 blocks, 4-8-16 ch, stage 2 dealt)":
        dict(stage_sizes=(2, 2, 9), widths=(16, 32, 64), width_multiplier=0.25, partitioned_stages=(2,)),
    "3-4-23-3 basic blocks, 64-512 ch, stage 2 dealt":
        dict(stage_sizes=(3, 4, 23, 3), widths=(64, 128, 256, 512), partitioned_stages=(2,)),
    "3-4-23-3 basic blocks, 64-512 ch, every stage dealt":
        dict(stage_sizes=(3, 4, 23, 3), widths=(64, 128, 256, 512)),
}


def _diagnosis_cells(rounds: int = 40) -> list[Cell]:
    """Channel IST's diagnosis on fmnist_resnet_ist.py (W = 2, ``rounds`` x K = 10 x B = 32 per worker, the same
    samples in every cell): the baselines, two sanity rows, the layout, the activation scaling with the BatchNorm
    statistics policy, then K, the optimizer state and the learning rate around the inner layout."""
    cfg = "experiments/configs/fmnist_resnet_ist.py"
    base = (f"--config.num_rounds={rounds}", f"--config.eval_every={rounds // 2}",
            f"--config.checkpoint_every={rounds}")
    inner = ("--config.model.channel_partition=inner",)

    def cell(label, *overrides, **info):
        return Cell(label, cfg, base + tuple(overrides), info)

    def k_cell(k):  # K local steps with the rounds adjusted so that the samples stay the same
        r = rounds * 10 // k
        return Cell(f"inner_K{k}", cfg, (f"--config.num_rounds={r}", f"--config.eval_every={r // 2}",
                                        f"--config.checkpoint_every={r}", f"--config.local_steps={k}", *inner),
                    {"group": "local steps", "what": f"inner, K = {k} ({r} rounds)"})

    return [
        cell("data_parallel", "--config.algorithm=data_parallel", group="baseline", what="data parallel"),
        cell("local_sgd", "--config.algorithm=local_sgd", group="baseline", what="local SGD"),
        cell("full_w1", "--config.num_workers=1", "--config.batch_size=64", group="sanity",
             what="IST with W = 1 (full-model training)"),
        cell("half_alone", "--config.num_workers=1", "--config.batch_size=64", "--config.model.width_multiplier=0.0625",
             group="sanity", what="one half-width sub-network trained alone, never repartitioned"),
        cell("all_none_recompute", group="layout", what="every conv's channels (the paper's layout; before)"),
        cell("inner_none_recompute", *inner, group="layout", what="only the blocks' inner channels"),
        cell("inner_train_recompute", *inner, "--config.model.activation_scale=train", group="scaling",
             what="inner, train-time rescaling, statistics recomputed"),
        cell("inner_test_recompute", *inner, "--config.model.activation_scale=test", "--config.model.test_keep=0.5",
             group="scaling", what="inner, test-time scaling 1/W, statistics recomputed"),
        cell("inner_none_carry", *inner, "--config.model_state=carry", group="scaling",
             what="inner, no scaling, statistics carried"),
        cell("inner_train_carry", *inner, "--config.model.activation_scale=train", "--config.model_state=carry",
             group="scaling", what="inner, train-time rescaling, statistics carried"),
        cell("inner_optcarry", *inner, "--config.optimizer_state=carry", group="optimizer",
             what="inner, momentum carried across repartitions"),
        k_cell(5),
        k_cell(20),
        cell("inner_lr0.1", *inner, "--config.learning_rate=0.1", group="learning rate", what="inner, lr 0.1"),
        cell("inner_lr0.02", *inner, "--config.learning_rate=0.02", group="learning rate", what="inner, lr 0.02"),
        cell("inner_train_optcarry", *inner, "--config.model.activation_scale=train", "--config.optimizer_state=carry",
             group="combined", what="inner, train-time rescaling, momentum carried, statistics recomputed"),
    ]


GRIDS = {"diagnosis": _diagnosis_cells}


def grid_main(study: str, workdir: pathlib.Path, seeds: Sequence[int], only: Sequence[str]) -> int:
    """Trains a grid study on ``seeds`` into ``workdir``; writes ``experiments/images/results/<study>.json``."""
    command = f"python experiments/images/studies.py {study} --seeds {','.join(map(str, seeds))}"
    return run_grid(study, GRIDS[study](), seeds, workdir, RESULTS / f"{study}.json", command, only)


def bytes_table(workers: Sequence[int] = (2, 4, 8)) -> str:
    """Analytic bytes one worker receives per round, ResIST over local SGD (the whole model), per model and W."""
    import jax.numpy as jnp
    import optax

    import istjax
    from istjax.models import DepthResNet

    x = jnp.zeros((2, 32, 32, 3))
    lines = ["| model | local SGD moves (M floats) | " + " | ".join(f"W={w}" for w in workers) + " |",
             "|---|---|" + "---|" * len(workers)]
    for name, fields in BYTES_MODELS.items():
        model = DepthResNet(num_classes=10, **fields)
        ratios = []
        for w in workers:
            min_depth = 0 if all(n - 1 >= w for n in (fields["stage_sizes"][i] for i in model.partitioned_stages)) else 1
            rs = istjax.resist(model, x, optax.sgd(0.1), num_workers=w, local_steps=1, min_depth=min_depth)
            ls = istjax.local_sgd(rs.task, optax.sgd(0.1), num_workers=w, local_steps=1)
            ratios.append(rs.comm.received / ls.comm.received)
        lines.append(f"| {name} | {ls.comm.received / 4 / 1e6:.2f} M | " + " | ".join(f"{r:.2f}" for r in ratios)
                     + " |")
    return "\n".join(lines)


PAPER_ABLATION = (66.3, 68.3, 84.3, 91.5, 92.0)  # ResIST, arXiv 2107.00961: CIFAR-10 test accuracy per step


def ablation_table(steps: Sequence[str], table) -> str:
    """One line per ablation step: its name, what istjax measured and the paper's number."""
    lines = ["| step | final acc | best acc | paper (CIFAR-10) | bytes/round | time/round (ms) |",
             "|---|---|---|---|---|---|"]
    by_dir = {pathlib.Path(row.run_dir).name: row for row in table}
    for i, (step, paper) in enumerate(zip(steps, PAPER_ABLATION), 1):
        row = by_dir[f"{i}_{step}"]
        per_round = format_bytes(row.bytes_per_round) if row.bytes_per_round is not None else "-"
        lines.append(f"| {i}. {step} | {row.final_accuracy:.4f} | {row.best_accuracy:.4f} | {paper} | {per_round} | "
                     f"{row.time_per_round_s * 1e3:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="studies.py", description=__doc__.split("::")[0].strip())
    parser.add_argument("study", choices=[*STUDIES, *GRIDS, "ablation", "bytes"])
    parser.add_argument("--workdir", type=pathlib.Path, help="where the runs and the table go (not for bytes)")
    parser.add_argument("--seeds", default="0,1,2", help="grid studies: comma-separated seeds (default 0,1,2)")
    parser.add_argument("--only", default="", help="grid studies: comma-separated cell labels to train")
    parser.add_argument("--overwrite", action="store_true", help="retrain runs already in the workdir")
    args, overrides = parser.parse_known_args(argv)
    if args.study == "bytes":
        print(bytes_table())
        return 0
    if args.study in GRIDS:
        if overrides:
            parser.error(f"{args.study}: a grid study takes no overrides ({' '.join(overrides)}); its cells are "
                         f"defined in this file, so that its results file says what was run")
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        only = [x for x in args.only.split(",") if x]
        return grid_main(args.study, args.workdir or REPO / "runs" / "images" / args.study, seeds, only)
    if args.workdir is None:
        parser.error(f"{args.study}: --workdir is required (the runs and the table are written there)")
    if args.study == "ablation":
        return ablation(args.workdir, overrides, args.overwrite)
    extra = ["--overwrite"] if args.overwrite else []
    return compare.main([*STUDIES[args.study], "--workdir", str(args.workdir), *extra, *overrides])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
