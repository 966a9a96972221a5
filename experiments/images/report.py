"""The image studies' tables: ``experiments/images/results/*.json`` (``python -m experiments.images.studies``).
Registered in `experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from experiments.tables import (accuracy, algorithm_name, baseline_cells, cell, fixed, headline_row, label_accuracy,
                               markdown_table, nbytes, points_above_baseline, result_rows, scalar, spread, table)
from experiments.images import headline  # noqa: F401  (registers the headline study's tables and scalars)
from experiments.images.gap import GAP_PARTS, gap_parts
from experiments.tables import runs_of
from experiments.images.studies import (ABLATION_RECOMPUTABLE, ABLATION_STEPS, DECOMPOSE_SAMPLES, DECOMPOSE_VARIANTS,
                                        LARGEST, PAPER_ABLATION, RESIST_SAMPLES, ablation_label)
from istjax.launch.metrics import format_mean_std

IMAGE_BYTES = "experiments/images/results/bytes.json"


@table("images_bytes", IMAGE_BYTES)
def _images_bytes(d):
    """ResIST's analytic bytes per worker per round over local SGD's, per model and W."""
    return markdown_table(["model", "local SGD moves (M floats)", *(f"W={w}" for w in d["workers"])],
                          [[m["model"], f"{m['local_sgd_floats'] / 1e6:.2f} M",
                            *(fixed(m["resist_over_local_sgd"][str(w)]) for w in d["workers"])] for m in d["models"]])


def _bytes_row(d, prefix: str) -> str:
    m = next(m for m in d["models"] if m["model"].startswith(prefix))
    return ", ".join(fixed(m["resist_over_local_sgd"][str(w)]) for w in d["workers"])


scalar("images.bytes.paper_layout", IMAGE_BYTES, lambda d: _bytes_row(d, "3-4-23-3 basic blocks, 64-512 ch, stage 2"))
scalar("images.bytes.study", IMAGE_BYTES, lambda d: _bytes_row(d, "fmnist_resist.py"))


def _bytes_vs(label: str, reference: str, whole_run: bool = False) -> Callable[[Any], str]:
    """Cell ``label``'s bytes per worker per round over ``reference``'s, as a fraction: '0.51'; ``whole_run``: over
    the whole run (bytes per round x rounds), the comparison for cells of equal samples but different K, where a
    round is not the same unit."""
    def fn(d):
        by = {r["label"]: r for r in result_rows(d)}
        moved = {k: by[k]["bytes_per_worker_per_round"] * (by[k]["rounds"] if whole_run else 1)
                 for k in (label, reference)}
        return fixed(moved[label] / moved[reference])
    return fn


# The earlier channel-IST grid (diagnosis.json) and ResIST-against-local-SGD grid (resist.json) are retired: trained
# before runs recorded their commit, superseded by the decomposition below (docs/images.md says which cells answer
# their questions).
ABLATION = "experiments/images/results/ablation.json"
RESNET = "experiments/images/results/resnet.json"


def _points_vs(rows: list[dict[str, Any]], algorithm: str) -> Callable[[dict[str, Any]], str]:
    """A row's mean test accuracy minus ``algorithm``'s at the same W, in points: '-3.0'."""
    ref = {r["num_workers"]: r for r in rows if r["label"] == f"{algorithm}_W{r['num_workers']}"}

    def fn(r):
        other = ref.get(r["num_workers"])
        if other is None or other is r:
            return "-"
        return f"{100 * (r['test_accuracy_mean'] - other['test_accuracy_mean']):+.1f}"
    return fn


def _cell_name(r: dict[str, Any]) -> str:
    """'IST, momentum carried across repartitions' from a comparison cell's ``what`` ('ist, W = 2, momentum ...')."""
    rest = r["what"].split(", ")[2:]
    return ", ".join([algorithm_name(r["algorithm"]), *rest])


@table("images_resnet", RESNET)
def _images_resnet(d):
    rows = result_rows(d)
    dp, local = _points_vs(rows, "data_parallel"), _points_vs(rows, "local_sgd")
    return markdown_table(
        ["cell", "W", "test accuracy (mean ± std over seeds)", "min-max", "points vs data parallel",
         "points vs local SGD", "train loss", "bytes per worker per round"],
        [[_cell_name(r), r["num_workers"], accuracy(r), spread(r), dp(r), local(r), fixed(r["train_loss_mean"], 3),
          nbytes(r["bytes_per_worker_per_round"], binary=False)] for r in rows]
        + baseline_cells(d, 8, {2: "test_accuracy"}))


for _label in ("ist_W2", "ist_W4", "data_parallel_W2", "data_parallel_W4", "local_sgd_W2", "local_sgd_W4",
               "ist_W2_momentum_carried"):
    scalar(f"resnet.{_label}", RESNET, label_accuracy(_label))
scalar("resnet.bytes_ist_vs_local_W2", RESNET, _bytes_vs("ist_W2", "local_sgd_W2"))
scalar("resnet.bytes_ist_vs_local_W4", RESNET, _bytes_vs("ist_W4", "local_sgd_W4"))
scalar("resnet.bytes_carried_vs_local_W2", RESNET, _bytes_vs("ist_W2_momentum_carried", "local_sgd_W2"))
scalar("resnet.machine", RESNET, lambda d: f"{d['machine'].get('device', d['machine']['cpu'])}, jax "
                                        f"{d['machine'].get('jax', '?')}")
# the linear baseline (`python -m experiments.images.studies resnet --baselines`) and how far the cells lie above it
scalar("resnet.linear", RESNET, lambda d: d["baselines"]["linear"]["test_accuracy"])
scalar("resnet.above_linear", RESNET, lambda d: points_above_baseline(d, [r["label"] for r in result_rows(d)]))


for _i, _step in enumerate(("naive", "share_strided", "one_section", "test_scale", "preactivation"), 1):
    scalar(f"ablation.{_i}", ABLATION, label_accuracy(f"{_i}_{_step}"))
scalar("ablation.linear", ABLATION, lambda d: d["baselines"]["linear"]["test_accuracy"])  # `ablation --baselines`
scalar("ablation.above_linear", ABLATION, lambda d: points_above_baseline(d, [r["label"] for r in result_rows(d)]))


@table("images_ablation", ABLATION)
def _images_ablation(d):
    return markdown_table(
        ["step", "test accuracy (mean ± std over seeds)", "min-max", "train loss", "paper (CIFAR-10)",
         "bytes per worker per round"],
        [[r["step"], accuracy(r), spread(r), fixed(r["train_loss_mean"], 3), f"{r['paper']:.1f}",
          nbytes(r["bytes_per_worker_per_round"], binary=False)] for r in result_rows(d)]
        + baseline_cells(d, 6, {1: "test_accuracy"}))


@headline_row("channel IST vs data parallel vs local SGD, ResNet-18 layout at 1/4 width, Fashion-MNIST, 384,000 "
              "samples per worker, on a GPU (`python -m experiments.images.studies resnet`)", "`docs/images.md`",
              RESNET)
def _headline_resnet(d):
    by = {r["label"]: r for r in result_rows(d)}

    def at(w):
        return (f"W = {w}: IST {accuracy(by[f'ist_W{w}'])}, data parallel {accuracy(by[f'data_parallel_W{w}'])}, "
                f"local SGD {accuracy(by[f'local_sgd_W{w}'])}")
    gaps = [by[f"ist_W{w}"]["test_accuracy_mean"] - by[f"{a}_W{w}"]["test_accuracy_mean"]
            for w in (2, 4) for a in ("data_parallel", "local_sgd")]
    verdict = ("within 1 point of both: the target is met" if min(gaps) >= -0.01 else
               f"IST trails by up to {-100 * min(gaps):.1f} points: the target (within 1 point) is not met")
    return (f"{at(2)}; {at(4)}; IST moves {_bytes_vs('ist_W2', 'local_sgd_W2')(d)} (W = 2) and "
            f"{_bytes_vs('ist_W4', 'local_sgd_W4')(d)} (W = 4) of local SGD's bytes; {verdict}")


# The decomposition (issue 35): `python -m experiments.images.studies decompose --seeds 0,1,2,3,4`.
DECOMPOSE = "experiments/images/results/decompose.json"

def _in_points(p: dict[str, Any]) -> str:
    """A paired accuracy difference in points: 'mean [low, high]'."""
    return f"{100 * p['mean']:+.1f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}]"


def _paired_points(d, a: str, b: str) -> str:
    """``a``'s test accuracy minus ``b``'s in points, paired by seed: mean [95 % interval] (n seeds)."""
    from istjax.launch.study import paired_difference

    p = paired_difference(runs_of(d, a), runs_of(d, b), "test_accuracy")
    return "-" if p is None else f"{_in_points(p)} ({len(p['seeds'])})"


def _split(r: dict[str, Any], key: str) -> str:
    mean = r.get(f"{key}_mean")
    return "-" if mean is None else format_mean_std(mean, r.get(f"{key}_std"), len(r["seeds"]), digits=3)


@table("images_decompose", DECOMPOSE)
def _images_decompose(d):
    # the main grid: a variant names its base cell, ResIST's cells are in their own table
    rows = [r for r in result_rows(d) if "base" not in r and r.get("group") == "main"]
    rows.sort(key=lambda r: (-r["budget"], r["num_workers"], r["algorithm"] != "ist", r["algorithm"]))

    def vs(r, other):
        if r["algorithm"] != "ist":
            return ""
        return _paired_points(d, r["label"], r["label"].replace("ist_", f"{other}_", 1))

    body = markdown_table(
        ["samples", "W", "algorithm", "test accuracy", "IST minus data parallel (points)", "IST minus local SGD",
         "workers' own train loss", "merged, same batches, train mode", "merged, test mode", "merge cost"],
        [[cell(r["budget"]), r["num_workers"], algorithm_name(r["algorithm"]), accuracy(r),
          vs(r, "data_parallel"), vs(r, "local_sgd"), _split(r, "worker_train_loss"),
          _split(r, "merged_train_loss"), _split(r, "merged_test_loss"), _split(r, "merge_cost")] for r in rows]
        + baseline_cells(d, 10, {3: "test_accuracy"}, name_at=2))
    return ("ResNet-18 layout at 1/8 width on Fashion-MNIST, the same samples in all at each budget (rounds x W x "
            "K = 20 x B = 32), mean ± std over seeds; differences paired by seed, mean [95 % t interval] (seeds). "
            "The loss split is the last evaluation window's mean over rounds, on the batch each worker trained last "
            "(`istjax.algorithms.loss_split`; the merge cost is merged minus the workers' own, train mode).\n\n"
            + body)


# The linear baseline (`python -m experiments.images.studies decompose --baselines`) and how far the main cells lie
# above it, per budget and, at the largest, per algorithm (both W).
scalar("decompose.linear", DECOMPOSE, lambda d: d["baselines"]["linear"]["test_accuracy"])
for _samples in DECOMPOSE_SAMPLES:
    _k = f"{_samples // 1000}k"
    scalar(f"decompose.above_linear.{_k}", DECOMPOSE, lambda d, k=_k: points_above_baseline(
        d, [f"{a}_W{w}_{k}" for a in ("ist", "data_parallel", "local_sgd") for w in (2, 4)]))
for _a in ("ist", "data_parallel", "local_sgd"):
    scalar(f"decompose.above_linear.{LARGEST}.{_a}", DECOMPOSE,
           lambda d, a=_a: points_above_baseline(d, [f"{a}_W{w}_{LARGEST}" for w in (2, 4)]))


def _interval(p: Optional[dict[str, Any]], total: Optional[dict[str, Any]] = None) -> str:
    if p is None:
        return "-"
    share = f"; {100 * p['mean'] / total['mean']:.0f} %" if total and total["mean"] else ""
    return f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]{share}"


@table("images_decompose_gap", DECOMPOSE)
def _images_decompose_gap(d):
    rows = [r for r in result_rows(d) if r["algorithm"] == "ist" and "base" not in r and r.get("group") == "main"]
    lines = []
    for r in sorted(rows, key=lambda r: (-r["budget"], r["num_workers"])):
        for other in ("data_parallel", "local_sgd"):
            g = gap_parts(d, r["label"], r["label"].replace("ist_", f"{other}_", 1))
            if g is None:
                continue
            acc = g["accuracy"]
            lines.append([cell(r["budget"]), r["num_workers"], algorithm_name(other), len(g["test_loss"]["seeds"]),
                          _in_points(acc),
                          _interval(g["test_loss"]),
                          *(_interval(g[name], g["test_loss"]) for name, _ in GAP_PARTS)])
    if not lines:
        return "(no budget has two seeds of IST and a baseline yet: `python -m experiments.images.studies decompose`)"
    body = markdown_table(["samples", "W", "IST against", "seeds", "accuracy (points)", "test loss",
                           *(f"{name}" for name, _ in GAP_PARTS)], lines)
    return ("IST minus the baseline, paired by seed: mean [95 % t interval]; the test-loss gap split into parts that "
            "add up to it run by run, each with its share of the gap (a negative share: a part against the gap's sign). The "
            "workers' own fit is their training loss after K local steps; the merge, the merged model's train-mode "
            "loss on the same batches minus theirs; the statistics, its test-mode minus train-mode loss there; the "
            "last, the test set's loss at the end minus the training batches' in test mode (last evaluation window)."
            "\n\n" + body)


def fit_parts(d, control: str, ist: str, full: Optional[str] = None) -> dict[str, Optional[dict[str, Any]]]:
    """The workers' own training loss, paired by seed: IST's minus data parallel's (``fit``), the fixed sub-network
    control's minus data parallel's (``narrow``: a narrower network on one worker's share of the samples) and IST's
    minus the control's (``repartitioning``: a new sub-network every K steps). With ``full``, the whole network
    trained on the same share, ``narrow`` splits in two: the control minus ``full`` (``width``, the samples held
    equal) and ``full`` minus data parallel (``samples``, the width held equal); None where fewer than two seeds
    pair."""
    from istjax.launch.study import paired_difference

    dp = ist.replace("ist_", "data_parallel_", 1)
    pairs = {"fit": (ist, dp), "narrow": (control, dp), "repartitioning": (ist, control),
             "width": (control, full), "samples": (full, dp)}
    return {k: None if None in (a, b) else paired_difference(runs_of(d, a), runs_of(d, b), "worker_train_loss")
            for k, (a, b) in pairs.items()}


def _controls(d) -> dict[str, dict[str, str]]:
    """``{IST cell: {"fixed_subnet": label, "full_width": label}}``: the capacity controls each IST cell has."""
    out: dict[str, dict[str, str]] = {}
    for r in result_rows(d):
        if r.get("control_for"):
            out.setdefault(r["control_for"], {})[r.get("control", "fixed_subnet")] = r["label"]
    return out


@table("images_decompose_fit", DECOMPOSE)
def _images_decompose_fit(d):
    """The workers' own fit split by two controls trained on one worker's share of the samples (W = 1): one IST
    worker's sub-network, never repartitioned, and the whole network; each difference paired by seed."""
    lines = []
    by_label = {r["label"]: r for r in result_rows(d)}
    for ist, ctl in sorted(_controls(d).items()):
        if ist not in by_label or "fixed_subnet" not in ctl:
            continue
        f = fit_parts(d, ctl["fixed_subnet"], ist, ctl.get("full_width"))
        r, full = by_label[ctl["fixed_subnet"]], by_label.get(ctl.get("full_width"))
        lines.append([cell(r["budget"]), by_label[ist]["num_workers"], _split(r, "worker_train_loss"),
                      "-" if full is None else _split(full, "worker_train_loss"), _interval(f["fit"]),
                      _interval(f["narrow"], f["fit"]), _interval(f["width"], f["fit"]),
                      _interval(f["samples"], f["fit"]), _interval(f["repartitioning"], f["fit"])])
    if not lines:
        return "(the fixed sub-network control has not finished a run yet: `python -m experiments.images.studies " \
               "decompose`)"
    body = markdown_table(["samples", "W", "sub-network control's own train loss", "whole-network control's",
                           "IST's workers' fit minus data parallel's",
                           "a narrower network on one worker's samples (sub-network control minus data parallel)",
                           "of which the width (sub-network minus whole-network control)",
                           "of which one batch a step and momentum restarts (whole-network control minus data "
                           "parallel)",
                           "repartitioning (IST minus the sub-network control)"], lines)
    return ("The workers' own fit (the gap table's first part) split by two controls trained alone (W = 1) on one "
            "worker's share of the samples, momentum reset every K steps as IST's workers: one IST worker's "
            "sub-network, never repartitioned (`--config.sampler.name=nested --config.sampler.shuffle=False`), and "
            "the whole network. Differences of the training loss after the local steps, paired by seed: mean [95 % t "
            "interval]; share of the fit gap. The sub-network control against data parallel differs in width, in "
            "samples and in its momentum restarts; the whole-network control parts the width from the rest (the "
            "width: the two controls, same samples, same restarts; the rest: the whole network on one worker's "
            "share, its momentum restarted every K steps, against data parallel's, which sees W batches a step and "
            "keeps its momentum: the two are not parted here). IST's workers against the sub-network control differ "
            "in being dealt a new sub-network every round (and in starting each round from a model all workers "
            "trained).\n\n" + body)


def _verdict(p: Optional[dict[str, Any]]) -> str:
    """A paired accuracy difference read at its interval: better or worse where the interval excludes 0."""
    if p is None:
        return "-"
    return "better" if p["low"] > 0 else "worse" if p["high"] < 0 else "no measurable difference"


def _paired_scalar(a: str, b: str) -> Callable[[Any], str]:
    """Cell ``a``'s test accuracy minus cell ``b``'s in points, paired by seed, with its verdict."""
    def fn(d):
        from istjax.launch.study import paired_difference

        p = paired_difference(runs_of(d, a), runs_of(d, b), "test_accuracy")
        return "(fewer than two seeds so far)" if p is None else (
            f"{_in_points(p)} points ({len(p['seeds'])} seeds; {_verdict(p)})")
    return fn


def _fit_vs(d, a: str, b: str) -> str:
    """Cell ``a``'s workers' own training loss minus cell ``b``'s, paired by seed: 'mean [low, high] (n seeds)'."""
    from istjax.launch.study import paired_difference

    p = paired_difference(runs_of(d, a), runs_of(d, b), "worker_train_loss")
    return "(fewer than two seeds so far)" if p is None else f"{_interval(p)} ({len(p['seeds'])} seeds)"


def _paired_loss(d, a: str, b: str, key: str) -> str:
    from istjax.launch.study import paired_difference

    return _interval(paired_difference(runs_of(d, a), runs_of(d, b), key))


@table("images_decompose_variants", DECOMPOSE)
def _images_decompose_variants(d):
    from istjax.launch.study import paired_difference

    rows = [r for r in result_rows(d) if "base" in r and r.get("group") not in ("resist", "ablation")]
    if not rows:
        return "(no variant has finished a run yet: `python -m experiments.images.studies decompose`)"
    lines = []
    for r in sorted(rows, key=lambda r: (r["num_workers"], r["group"], r["label"])):
        acc = paired_difference(runs_of(d, r["label"]), runs_of(d, r["base"]), "test_accuracy")
        lines.append([r["num_workers"], r["group"], r["what"].split(": ", 1)[-1], accuracy(r),
                      "-" if acc is None else f"{_in_points(acc)} ({len(acc['seeds'])})", _verdict(acc),
                      _paired_loss(d, r["label"], r["base"], "worker_train_loss"),
                      _paired_loss(d, r["label"], r["base"], "merge_cost"),
                      _paired_loss(d, r["label"], r["base"], "test_loss")])
    body = markdown_table(
        ["W", "group", "channel IST with", "test accuracy", "minus IST's cell (points)", "verdict",
         "workers' own train loss, minus IST's cell's", "merge cost, minus", "test loss, minus"], lines)
    return (f"Channel IST's variants at {cell(rows[0]['budget'])} samples against the study's IST cell at the same "
            f"budget (the main table's IST row), each difference paired by seed, mean [95 % t interval]; the accuracy "
            f"difference in points with its seeds; the verdict reads that interval (better or worse where it excludes "
            f"0).\n\n" + body)


def _variant_scalar(w: int, suffix: str) -> Callable[[Any], str]:
    def fn(d):
        from istjax.launch.study import paired_difference

        label, base = f"ist_W{w}_{LARGEST}_{suffix}", f"ist_W{w}_{LARGEST}"
        p = paired_difference(runs_of(d, label), runs_of(d, base), "test_accuracy")
        if p is None:
            return "(fewer than two seeds so far)"
        return f"{_in_points(p)} points ({len(p['seeds'])} seeds; {_verdict(p)})"
    return fn


for _w in (2, 4):
    for _suffix, *_ in DECOMPOSE_VARIANTS:
        scalar(f"decompose.variant.W{_w}.{_suffix}", DECOMPOSE, _variant_scalar(_w, _suffix))
        scalar(f"decompose.variant.W{_w}.{_suffix}.bytes", DECOMPOSE,  # the whole run's: equal samples, K varies
               _bytes_vs(f"ist_W{_w}_{LARGEST}_{_suffix}", f"local_sgd_W{_w}_{LARGEST}", whole_run=True))
        scalar(f"decompose.variant.W{_w}.{_suffix}.fit", DECOMPOSE,  # the workers' own train loss, paired by seed
               lambda d, a=f"ist_W{_w}_{LARGEST}_{_suffix}", b=f"ist_W{_w}_{LARGEST}": _fit_vs(d, a, b))


@table("images_decompose_resist", DECOMPOSE)
def _images_decompose_resist(d):
    rows = [r for r in result_rows(d) if r.get("group") == "resist"]
    if not rows:
        return "(no ResIST cell has finished a run yet: `python -m experiments.images.studies decompose`)"

    def vs(r):
        if r["algorithm"] != "resist":
            return ""
        if "base" in r:
            return f"{_paired_points(d, r['label'], r['base'])} vs ResIST's defaults"
        return f"{_paired_points(d, r['label'], r['label'].replace('resist_', 'resist_local_sgd_', 1))} vs local SGD"

    body = markdown_table(
        ["W", "cell", "test accuracy", "paired difference (points)", "workers' own train loss",
         "merged, same batches, train mode", "merged, test mode", "merge cost"],
        [[r["num_workers"], r["what"].split(", ", 2)[-1] if "base" in r else algorithm_name(r["algorithm"]),
          accuracy(r), vs(r), _split(r, "worker_train_loss"), _split(r, "merged_train_loss"),
          _split(r, "merged_test_loss"), _split(r, "merge_cost")]
         for r in sorted(rows, key=lambda r: (r["num_workers"], r["algorithm"], r["label"]))]
        + baseline_cells(d, 8, {2: "test_accuracy"}, name_at=1))
    return (f"ResIST (fmnist_resist.py) against local SGD, {cell(rows[0]['budget'])} samples in all at each W, mean ± "
            f"std over seeds; differences paired by seed, mean [95 % t interval] (seeds).\n\n" + body)


@table("images_decompose_ablation", DECOMPOSE)
def _images_decompose_ablation(d):
    rows = sorted((r for r in result_rows(d) if r.get("group") == "ablation"), key=lambda r: (r["step"], r["label"]))
    if not rows:
        return "(no ablation step has finished a run yet: `python -m experiments.images.studies decompose`)"

    def vs(r):
        return "; ".join(f"{_paired_points(d, r['label'], other)} vs {name}"
                         for name, other in ablation_against(r["label"]))

    def trained(r):  # the workers' own loss, first evaluation window -> last: did the step train at all
        first, last = r.get("worker_train_loss_first_mean"), r.get("worker_train_loss_mean")
        return "-" if None in (first, last) else f"{first:.3f} → {last:.3f}"

    body = markdown_table(
        ["step", "test accuracy", "paired difference (points)", "workers' own train loss, first window → last",
         "merged, train mode", "merged, test mode", "merge cost"],
        [[r["what"], accuracy(r), vs(r), trained(r), _split(r, "merged_train_loss"),
          _split(r, "merged_test_loss"), _split(r, "merge_cost")] for r in rows]
        + baseline_cells(d, 7, {1: "test_accuracy"}))
    return ("ResIST's ablation in the paper's order (fmnist_resist_ablation.py, 150 rounds, W = 2), each step with "
            "the statistics carried as the config has them and steps 1-3 with them recomputed on the merged network; "
            "mean ± std over seeds (the workers' loss: means over seeds), differences paired by seed, mean [95 % t "
            "interval] (seeds): each step against the one before it handled the same way, and a recomputed step "
            "against the same step carried.\n\n" + body)


def ablation_against(label: str) -> list[tuple[str, str]]:
    """What an ablation cell is compared with, (name, label): the step before it with the statistics handled the
    same way (the paper's order), and for a recomputed step the same step carried."""
    recomputed = label.endswith("_recomputed")
    step = int(label.split("_")[1])
    out = [] if step == 1 else [(f"step {step - 1}" + (" recomputed" if recomputed else ""),
                                 ablation_label(step - 1, recomputed))]
    return out + ([("carried", ablation_label(step))] if recomputed else [])


for _step in range(1, len(ABLATION_STEPS) + 1):
    for _recomputed in (False, True) if _step <= ABLATION_RECOMPUTABLE else (False,):
        _label = ablation_label(_step, _recomputed)
        for _name, _other in ablation_against(_label):
            scalar(f"decompose.ablation.{_label}.vs_{_name.replace(' ', '_')}", DECOMPOSE,
                   _paired_scalar(_label, _other))


@headline_row(f"channel IST's gap decomposed, ResNet-18 layout at 1/8 width, Fashion-MNIST, {DECOMPOSE_SAMPLES[0]:,} "
              "samples in all, "
              "IST against data parallel (`python -m experiments.images.studies decompose`)", "`docs/images.md`",
              DECOMPOSE)
def _headline_decompose(d):
    parts = []
    for w in (2, 4):
        ist, dp = f"ist_W{w}_{LARGEST}", f"data_parallel_W{w}_{LARGEST}"
        g = gap_parts(d, ist, dp)
        if g is None:
            continue
        n = len(g["test_loss"]["seeds"])
        acc = g["accuracy"]
        split = ", ".join(f"{name} {g[name]['mean']:+.3f}" for name, _ in GAP_PARTS)
        ctl = _controls(d).get(ist, {})
        f = fit_parts(d, ctl.get("fixed_subnet", ""), ist, ctl.get("full_width"))
        fit = "" if None in (f["width"], f["samples"], f["repartitioning"]) else (
            f" (of which the sub-network's width {f['width']['mean']:+.3f}, one batch a step instead of W with "
            f"momentum restarted {f['samples']['mean']:+.3f}, the repartitioning {f['repartitioning']['mean']:+.3f})")
        parts.append(f"W = {w} ({n} seeds): {_in_points(acc)} points; test-loss gap "
                     f"{g['test_loss']['mean']:+.3f} = {split.replace(',', fit + ',', 1)}")
    return "; ".join(parts) if parts else "(in progress: fewer than two seeds of a pair so far)"


@headline_row("channel IST minus data parallel at each budget, the same study (40,960 / 81,920 / 163,840 samples "
              "in all)", "`docs/images.md`", DECOMPOSE)
def _headline_decompose_budgets(d):
    parts, fit_exceeds = [], []
    for w in (2, 4):
        at = []
        for samples in sorted(DECOMPOSE_SAMPLES):
            g = gap_parts(d, f"ist_W{w}_{samples // 1000}k", f"data_parallel_W{w}_{samples // 1000}k")
            if g is None:
                continue
            at.append(f"{_in_points(g['accuracy'])} points at {samples:,} ({len(g['test_loss']['seeds'])} seeds)")
            fit_exceeds.append(g["workers' own fit"]["mean"] > g["test_loss"]["mean"])
        if at:
            parts.append(f"W = {w}: " + ", ".join(at))
    if not parts:
        return "(in progress: fewer than two seeds of a pair so far)"
    reading = ("the workers' own fit exceeds the whole test-loss gap at every budget and W (the merge gains)"
               if all(fit_exceeds) else "the workers' own fit does not carry the whole gap everywhere (docs)")
    return "; ".join(parts) + f"; {reading}"


@headline_row("ResIST vs local SGD, pre-activation ResNet (2-2-9 blocks, 4-16 channels), Fashion-MNIST, "
              f"{RESIST_SAMPLES:,} samples in all, with the loss split "
              "(`python -m experiments.images.studies decompose`)", "`docs/images.md`", DECOMPOSE)
def _headline_decompose_resist(d):
    by = {r["label"]: r for r in result_rows(d)}
    parts, gaps = [], []
    for w in (2, 4):
        res, loc = by.get(f"resist_W{w}"), by.get(f"resist_local_sgd_W{w}")
        if res is None or loc is None:
            continue
        gaps.append(res["test_accuracy_mean"] - loc["test_accuracy_mean"])
        parts.append(f"W = {w}: ResIST {accuracy(res)}, local SGD {accuracy(loc)}, paired "
                     f"{_paired_points(d, f'resist_W{w}', f'resist_local_sgd_W{w}')} points, merge cost "
                     f"{res['merge_cost_mean']:+.3f}, {_bytes_vs(f'resist_W{w}', f'resist_local_sgd_W{w}')(d)} of "
                     f"its bytes")
        carried = by.get(f"resist_W{w}_momentum_carried")
        if carried is not None:
            parts[-1] += f"; momentum carried {accuracy(carried)}"
    if not parts:
        return "(in progress)"
    verdict = ("within 1 point of local SGD: the target is met" if min(gaps) >= -0.01 else
               f"ResIST trails by up to {-100 * min(gaps):.1f} points: the target (within 1 point) is not met")
    return "; ".join(parts) + f"; {verdict}"


@headline_row("ResIST's five ablation steps, W = 2, 150 rounds, with the loss split "
              "(`python -m experiments.images.studies decompose`)", "`docs/images.md`", DECOMPOSE)
def _headline_decompose_ablation(d):
    by = {r["label"]: r for r in result_rows(d)}
    steps = range(1, len(ABLATION_STEPS) + 1)
    if any(ablation_label(i) not in by for i in steps):
        return "(in progress)"
    carried = " -> ".join(f"{by[ablation_label(i)]['test_accuracy_mean']:.3f}" for i in steps)
    recomputed = " -> ".join(f"{by[ablation_label(i, True)]['test_accuracy_mean']:.3f}"
                             for i in range(1, ABLATION_RECOMPUTABLE + 1) if ablation_label(i, True) in by)
    n = min(len(by[ablation_label(i)]["seeds"]) for i in steps)
    paper = " -> ".join(str(p) for p in PAPER_ABLATION)
    return (f"statistics carried: {carried}; steps 1-{ABLATION_RECOMPUTABLE} with them recomputed: {recomputed} "
            f"(mean of {n} seeds; the paper, CIFAR-10: {paper}); every step's paired difference in docs/images.md")


def _gap_scalar(ist: str, baseline: str, part: str) -> Callable[[Any], str]:
    """Cell ``ist`` minus cell ``baseline``, paired by seed, one part of the split (or ``test_loss``, ``accuracy`` in
    points): 'mean [low, high] (n seeds)'."""
    def fn(d):
        g = gap_parts(d, ist, baseline)
        if g is None:
            return "(fewer than two seeds so far)"
        p, n = g[part], len(g["test_loss"]["seeds"])
        if part == "accuracy":
            return f"{_in_points(p)} points ({n} seeds)"
        return f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}] ({n} seeds)"
    return fn


# Scalars decompose.W2.data_parallel.merge (the largest budget), decompose.81k.W2.data_parallel.merge (a smaller one)
# and decompose.resist.W2.merge (ResIST minus local SGD).
GAP_KEYS = (("accuracy", "accuracy"), ("loss", "test_loss"), ("fit", "workers' own fit"), ("merge", "the merge"),
            ("statistics", "the statistics"), ("rest", "test set vs training batches"))
for _w in (2, 4):
    for _key, _part in GAP_KEYS:
        for _base in ("data_parallel", "local_sgd"):
            scalar(f"decompose.W{_w}.{_base}.{_key}", DECOMPOSE,
                   _gap_scalar(f"ist_W{_w}_{LARGEST}", f"{_base}_W{_w}_{LARGEST}", _part))
            for _samples in DECOMPOSE_SAMPLES[1:]:
                _budget = f"{_samples // 1000}k"
                scalar(f"decompose.{_budget}.W{_w}.{_base}.{_key}", DECOMPOSE,
                       _gap_scalar(f"ist_W{_w}_{_budget}", f"{_base}_W{_w}_{_budget}", _part))
        scalar(f"decompose.resist.W{_w}.{_key}", DECOMPOSE,
               _gap_scalar(f"resist_W{_w}", f"resist_local_sgd_W{_w}", _part))


def _test_network_cost(w: int) -> Callable[[Any], str]:
    """ResIST minus local SGD at W = ``w``: the merged model's test-mode loss on the workers' batches minus the
    workers' own (the merge and the statistics together). ResIST scales its dealt branches at test time only, so
    its train-mode merged network (every branch at full scale) is one no worker trains or anyone evaluates."""
    def fn(d):
        from istjax.launch.study import paired_difference

        def with_cost(label):
            return [{**r, "cost": r["merged_test_loss"] - r["worker_train_loss"]} for r in runs_of(d, label)
                    if r.get("merged_test_loss") is not None and r.get("worker_train_loss") is not None]

        p = paired_difference(with_cost(f"resist_W{w}"), with_cost(f"resist_local_sgd_W{w}"), "cost")
        return "(fewer than two seeds so far)" if p is None else (
            f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}] ({len(p['seeds'])} seeds)")
    return fn


for _w in (2, 4):
    scalar(f"decompose.resist.W{_w}.test_network", DECOMPOSE, _test_network_cost(_w))
    scalar(f"decompose.resist.W{_w}.momentum_carried", DECOMPOSE,
           _paired_scalar(f"resist_W{_w}_momentum_carried", f"resist_W{_w}"))
    scalar(f"decompose.resist.W{_w}.momentum_carried_vs_local_sgd", DECOMPOSE,
           _paired_scalar(f"resist_W{_w}_momentum_carried", f"resist_local_sgd_W{_w}"))
    scalar(f"decompose.resist.W{_w}.momentum_carried_bytes", DECOMPOSE,
           _bytes_vs(f"resist_W{_w}_momentum_carried", f"resist_local_sgd_W{_w}"))
    scalar(f"decompose.resist.W{_w}.bytes", DECOMPOSE, _bytes_vs(f"resist_W{_w}", f"resist_local_sgd_W{_w}"))


def _fit_scalar(w: int, part: str) -> Callable[[Any], str]:
    def fn(d):
        ist = f"ist_W{w}_{LARGEST}"
        ctl = _controls(d).get(ist, {})
        f = fit_parts(d, ctl.get("fixed_subnet", f"fixed_subnet_W{w}_{LARGEST}"), ist, ctl.get("full_width"))
        p = f[part]
        if p is None:
            return "(fewer than two seeds so far)"
        share = f" ({100 * p['mean'] / f['fit']['mean']:.0f} % of the fit gap)" if f["fit"] else ""
        return f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]{share}"
    return fn


for _w in (2, 4):
    for _part in ("narrow", "width", "samples", "repartitioning"):
        scalar(f"decompose.fit.W{_w}.{_part}", DECOMPOSE, _fit_scalar(_w, _part))
