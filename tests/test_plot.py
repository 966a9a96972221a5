"""`istjax plot` on real run directories (written by the training driver) and its errors."""

import json

import numpy as np
import pytest

from istjax.launch import config as config_lib
from istjax.launch import plot
from istjax.launch.metrics import RECORD_FIELDS, format_bytes


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    """Two tiny real runs on digits (IST and local SGD, W=2) via train_and_evaluate."""
    from istjax.launch import driver as train

    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for algo in ("ist", "local_sgd"):
        c = config_lib.default_config()
        c.algorithm.name, c.num_workers, c.local_steps, c.batch_size = algo, 2, 2, 16
        c.model.hidden, c.num_rounds, c.eval_every, c.progress = (8,), 4, 2, False
        c.eval_train_examples = 256  # the smallest evaluation batch of a batch-statistics model
        train.train_and_evaluate(c, root / algo)
        dirs.append(root / algo)
    return dirs


def test_metrics_lines_carry_the_schema(run_dirs):
    for d in run_dirs:
        run = plot.load_run(d)
        assert [r["round"] for r in run.records] == [2, 4]
        for rec in run.records:
            assert set(RECORD_FIELDS) <= set(rec), set(RECORD_FIELDS) - set(rec)
        assert plot.label(run) == f"{run.config['algorithm']['name']} W=2 K=2"


def test_plot_writes_a_png_from_run_dirs(run_dirs, tmp_path):
    out = tmp_path / "fig" / "cmp.png"
    assert plot.main([str(d) for d in run_dirs] + ["--out", str(out), "--target", "0.5"]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    import matplotlib.image as mpimg

    img = mpimg.imread(out)
    assert img.shape[1] > 2 * img.shape[0]  # three panels side by side
    # Both runs' colours are drawn (IST blue, local SGD green: tab10 #1f77b4, #2ca02c).
    rgb = (img[..., :3] * 255).round().astype(int).reshape(-1, 3)
    for color in ((0x1F, 0x77, 0xB4), (0x2C, 0xA0, 0x2C)):
        assert (np.abs(rgb - color).sum(1) < 10).sum() > 50
    # Beside it, where the loss went (both runs recorded the split): both colours again.
    split = out.with_name("cmp_loss_split.png")
    img = mpimg.imread(split)
    rgb = (img[..., :3] * 255).round().astype(int).reshape(-1, 3)
    for color in ((0x1F, 0x77, 0xB4), (0x2C, 0xA0, 0x2C)):
        assert (np.abs(rgb - color).sum(1) < 10).sum() > 50


def test_default_out_for_one_run(run_dirs):
    assert plot.main([str(run_dirs[0])]) == 0
    assert (run_dirs[0] / "accuracy.png").exists() and (run_dirs[0] / "accuracy_loss_split.png").exists()


def test_no_loss_split_figure_without_the_split(run_dirs, tmp_path):
    """A run trained with --config.runtime.loss_split=False (its records without the split): no second figure."""
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(run_dirs[0], bare)
    lines = [json.loads(line) for line in (bare / "metrics.jsonl").read_text().splitlines()]
    (bare / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in rec.items() if k not in (
        "worker_train_loss", "merged_train_loss", "merged_test_loss", "merge_cost")}) + "\n" for rec in lines))
    assert plot.plot_loss_split([bare], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
    assert plot.main([str(bare), "--out", str(tmp_path / "only.png")]) == 0
    assert (tmp_path / "only.png").exists() and not (tmp_path / "only_loss_split.png").exists()


def test_errors(tmp_path, capsys):
    assert plot.main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert plot.main([str(tmp_path)]) == 2
    assert "metrics.jsonl' not found" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text("\n")
    assert plot.main([str(tmp_path)]) == 2
    assert "is empty" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5}\nnot json\n'
                                            '{"round": 2, "test_accuracy": 0.6}\n')
    with pytest.raises(plot.PlotError, match=r"metrics.jsonl:2: not a JSON object"):
        plot.load_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"round": 1, "test_loss": 0.5}\n')
    with pytest.raises(plot.PlotError, match="no 'test_accuracy' field"):
        plot.load_run(tmp_path)
    with pytest.raises(plot.PlotError, match="ending in .png"):
        (tmp_path / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5}\n')
        plot.plot_runs([tmp_path], tmp_path / "x.pdf")


def test_half_written_last_line_is_skipped(tmp_path):
    rec = {"round": 1, "step": 2, "test_accuracy": 0.5, "algorithm": "ist", "num_workers": 2}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rec) + '\n{"round": 2, "test_acc')
    run = plot.load_run(tmp_path)
    assert len(run.records) == 1 and run.local_steps == 2  # K = step / round without config.json


def _hand_run(path, accs, *, every=2, bytes_per_round=1e4, wall_per_round=0.01, **config):
    """A hand-written run directory (IST, W=2, K=2 unless ``config`` says otherwise)."""
    path.mkdir(parents=True)
    cfg = {"name": path.name, "algorithm": "ist", "num_workers": 2, "local_steps": 2, "learning_rate": 0.1,
           "seed": 0, "dataset": "digits", "model": {"name": "mlp", "hidden": [8]}, "eval_every": every, **config}
    (path / "config.json").write_text(json.dumps(cfg))
    lines = [json.dumps({"round": (i + 1) * every, "test_accuracy": a, "wall_time_s": (i + 1) * every * wall_per_round,
                         "bytes_total": (i + 1) * every * bytes_per_round, "algorithm": cfg["algorithm"],
                         "num_workers": cfg["num_workers"]}) for i, a in enumerate(accs)]
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return path


def _capture_figure(monkeypatch):
    """Keeps the figure `plot_runs` draws (instead of closing it), to read its axes."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    return kept


def _tick_labels(axis):
    """The non-empty tick labels inside the axis's view (major and minor)."""
    axis.axes.figure.canvas.draw()
    lo, hi = sorted(axis.get_view_interval())
    major = [axis.get_major_formatter()(v) for v in axis.get_majorticklocs() if lo <= v <= hi]
    minor = [axis.get_minor_formatter()(v) for v in axis.get_minorticklocs() if lo <= v <= hi]
    return [t for t in major + minor if t]


def test_legend_names_w_and_k_only_where_they_differ_and_the_title_the_shared_ones(tmp_path):
    """Runs at W=2 and W=4 (both K=2): the labels name W, not K; the title names K=2 and not W."""
    runs = [plot.load_run(_hand_run(tmp_path / "w2", [0.5, 0.7])),
            plot.load_run(_hand_run(tmp_path / "w4", [0.4, 0.6], num_workers=4))]
    assert plot.legend_labels(plot.group_runs(runs)) == ["ist W=2", "ist W=4"]
    assert plot.figure_title(runs) == "test accuracy of mlp on digits, K=2"
    assert plot.figure_title(runs[:1]) == "test accuracy of mlp on digits, W=2, K=2"
    # a title of the caller's own does not name them: the labels do
    assert plot.legend_labels(plot.group_runs(runs), shared_in_title=False) == ["ist W=2 K=2", "ist W=4 K=2"]


def test_legend_names_the_differing_field(tmp_path, monkeypatch):
    a = _hand_run(tmp_path / "lr01", [0.5, 0.7], learning_rate=0.1, name="first", eval_every=2)
    b = _hand_run(tmp_path / "lr005", [0.4, 0.6], learning_rate=0.05, name="second", num_rounds=9)
    runs = [plot.load_run(a), plot.load_run(b)]
    groups = plot.group_runs(runs)
    assert len(groups) == 2  # different learning rates: two curves
    # Only learning_rate differs (name, num_rounds are run-control fields: left out).
    assert plot.legend_labels(groups) == ["ist learning_rate=0.1", "ist learning_rate=0.05"]
    styles = plot._styles(groups)
    assert styles[0] != styles[1]
    kept = _capture_figure(monkeypatch)
    plot.plot_runs([a, b], tmp_path / "lr.png")
    (legend,) = kept[0].legends
    assert [t.get_text() for t in legend.get_texts()] == ["ist learning_rate=0.1",
                                                           "ist learning_rate=0.05"]
    # Two algorithms at two learning rates: algorithm, W, K stay the base label; every curve has its own style.
    c = _hand_run(tmp_path / "lsgd", [0.4, 0.6], algorithm="local_sgd", learning_rate=0.05)
    groups = plot.group_runs([plot.load_run(p) for p in (a, b, c)])
    assert plot.legend_labels(groups)[2] == "local_sgd learning_rate=0.05"
    assert len({tuple(sorted(s.items())) for s in plot._styles(groups)}) == 3


def test_seeds_are_one_curve_with_a_band(tmp_path, monkeypatch):
    dirs = [_hand_run(tmp_path / f"s{s}", accs, seed=s, name=f"run-{s}")
            for s, accs in enumerate([[0.2, 0.5, 0.6], [0.4, 0.7, 0.8], [0.3, 0.6, 0.9]])]
    runs = [plot.load_run(d) for d in dirs]
    (group,) = plot.group_runs(runs)
    assert len(group) == 3
    assert plot.legend_labels([group]) == ["ist (mean of 3 seeds)"]
    curve = plot.group_curve(group, "round")
    assert curve.x == [2, 4, 6] and curve.y == pytest.approx([0.3, 0.6, 2.3 / 3])
    assert curve.lo == pytest.approx([0.2, 0.5, 0.6]) and curve.hi == pytest.approx([0.4, 0.7, 0.9])
    std = plot.group_curve(group, "round", band="std")
    assert std.hi[0] == pytest.approx(0.3 + 0.1)  # mean + sample std (0.1)
    # Seeds that evaluated at other rounds: the union of rounds inside the common range, interpolated.
    odd = plot.load_run(_hand_run(tmp_path / "s3", [0.3, 0.5], every=3, seed=3))
    mixed = plot.group_curve([runs[0], odd], "round")
    assert mixed.x == [3, 4, 6] and mixed.y[-1] == pytest.approx((0.6 + 0.5) / 2)
    kept = _capture_figure(monkeypatch)
    out = plot.plot_runs(dirs, tmp_path / "band.png")
    fig = kept.pop()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["ist (mean of 3 seeds)"]
    assert "min–max across seeds" in legend.get_title().get_text()
    assert len(fig.axes[0].collections) == 1 and len(fig.axes[0].lines) == 1  # one band, one mean line
    import matplotlib.image as mpimg

    rgb = (mpimg.imread(out)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    band = np.array([255 - 0.18 * (255 - c) for c in (0x1F, 0x77, 0xB4)])  # tab:blue at alpha 0.18 on white
    assert (np.abs(rgb - band).sum(1) < 12).sum() > 1000
    # --no-bands: one line per seed, labelled with its seed, each with its own marker.
    assert plot.main([str(d) for d in dirs] + ["--no-bands", "--out", str(tmp_path / "lines.png")]) == 0
    fig = kept.pop()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [f"ist seed={s}" for s in range(3)]
    assert len({line.get_marker() for line in fig.axes[0].lines}) == 3 and not fig.axes[0].collections


def test_log_axes_read_in_units(tmp_path, monkeypatch):
    major, _ = plot.log_unit_formatters(format_bytes)
    assert [major(v) for v in (1e3, 1e4, 1e7, 1e9)] == ["1 kB", "10 kB", "10 MB", "1 GB"]
    assert [plot.format_seconds(s) for s in (0.01, 1, 90, 7200)] == ["10 ms", "1 s", "1.5 min", "2 h"]
    # Many decades: every label a unit, at most 7, none repeated.
    a = _hand_run(tmp_path / "a", [0.2, 0.5], bytes_per_round=100.0, wall_per_round=0.001)
    b = _hand_run(tmp_path / "b", [0.3, 0.6], bytes_per_round=1e10, wall_per_round=0.3, algorithm="data_parallel")
    kept = _capture_figure(monkeypatch)
    plot.plot_runs([a, b], tmp_path / "wide.png", log_time=True)
    fig = kept.pop()
    labels = _tick_labels(fig.axes[2].xaxis)
    assert 3 <= len(labels) <= 7 and len(set(labels)) == len(labels), labels
    assert all(t.split()[-1] in ("B", "kB", "MB", "GB", "TB") for t in labels), labels
    assert all(t.split()[-1] in ("µs", "ms", "s", "min", "h") for t in _tick_labels(fig.axes[1].xaxis))
    # Less than two decades: the 2x and 5x ticks are labelled too, so the axis has more than one label.
    # (bytes_total 4 MB per round at W=2: the panel's 1 MB per worker each way per round)
    c = _hand_run(tmp_path / "c", [0.2, 0.5, 0.6, 0.7, 0.8], every=3, bytes_per_round=4e6)
    plot.plot_runs([c], tmp_path / "narrow.png")
    labels = _tick_labels(kept.pop().axes[2].xaxis)
    assert {"5 MB", "10 MB"} <= set(labels) and all(t.endswith("MB") for t in labels), labels


def _custom_and_stock(tmp_path):
    """A stock MLP run and a run of a registered model with other fields (as ``config.json`` records them)."""
    stock = _hand_run(tmp_path / "mlp", [0.5, 0.8], model={"name": "mlp", "hidden": [8], "batch_norm": True,
                                                            "output_batch_norm": True, "module": ""})
    custom = _hand_run(tmp_path / "custom", [0.4, 0.7], model={"name": "residual_mlp", "width": 64,
                                                                "module": "models/residual.py:ResidualMLP"})
    return stock, custom


def test_legend_of_a_custom_model_names_the_model_not_unset_fields(tmp_path):
    stock, custom = _custom_and_stock(tmp_path)
    groups = plot.group_runs([plot.load_run(stock), plot.load_run(custom)])
    # The models differ: the label names each model, not every field the other model lacks.
    assert plot.legend_labels(groups) == ["ist model=mlp", "ist model=residual_mlp"]
    # A second MLP of another width: model.hidden tells the MLPs apart, and is shown only on them.
    wide = _hand_run(tmp_path / "wide", [0.6, 0.85], model={"name": "mlp", "hidden": [16], "batch_norm": True,
                                                             "output_batch_norm": True})
    # A field only one run has (weight_decay, not a model field) is shown on that run only.
    decay = _hand_run(tmp_path / "decay", [0.4, 0.75], weight_decay=1e-4,
                      model={"name": "residual_mlp", "width": 64})
    groups = plot.group_runs([plot.load_run(p) for p in (stock, custom, wide, decay)])
    labels = plot.legend_labels(groups)
    assert labels == ["ist model=mlp model.hidden=[8]", "ist model=residual_mlp",
                      "ist model=mlp model.hidden=[16]", "ist model=residual_mlp weight_decay=0.0001"]
    assert not any("unset" in t or "module" in t or "batch_norm" in t for t in labels)
    assert plot.varying_fields(groups)[1] == "model=residual_mlp"
    assert len({tuple(sorted(s.items())) for s in plot._styles(groups)}) == 4


def _figure_of(run_dirs, out, monkeypatch, **kwargs):
    kept = _capture_figure(monkeypatch)
    plot.plot_runs(run_dirs, out, **kwargs)
    fig = kept.pop()
    fig.canvas.draw()
    return fig


def test_figure_names_the_models_and_keeps_the_panels_wide(tmp_path, monkeypatch):
    stock, custom = _custom_and_stock(tmp_path)
    fig = _figure_of([stock, custom], tmp_path / "cmp.png", monkeypatch)
    assert fig._suptitle.get_text() == "test accuracy of mlp and residual_mlp on digits, W=2, K=2"
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["ist model=mlp", "ist model=residual_mlp"]
    _assert_clean_layout(fig)


def test_long_labels_are_wrapped_below_the_panels(tmp_path, monkeypatch):
    """Runs that differ in many fields: labels on several short lines, the legend under the panels, which keep
    their width; one column per label while they fit."""
    dirs = [_hand_run(tmp_path / f"r{i}", [0.4 + 0.1 * i, 0.8], learning_rate=0.1 / (i + 1),
                      optimizer=("sgd", "momentum", "adam")[i], weight_decay=1e-4 * i, momentum=0.5 + 0.2 * i,
                      lr_schedule=("constant", "cosine", "step")[i], warmup_rounds=i,
                      model={"name": "mlp", "hidden": [8 * (i + 1), 4], "batch_norm": i != 1})
            for i in range(3)]
    fig = _figure_of(dirs, tmp_path / "long.png", monkeypatch, title=None)
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    labels = plot.legend_labels(plot.group_runs([plot.load_run(d) for d in dirs]))
    assert [t.replace("\n", " ") for t in texts] == labels and all(len(t) > 100 for t in labels)
    assert all("\n" in t and max(map(len, t.splitlines())) <= 60 for t in texts)
    assert fig._suptitle.get_text() == "test accuracy of mlp on digits, W=2, K=2"
    _assert_clean_layout(fig)


def _assert_clean_layout(fig):
    """Each of the three panels is wide (more than a quarter of the figure), the panels do not overlap, and the
    legend lies below all of them, inside the figure."""
    boxes = [ax.get_position() for ax in fig.axes[:3]]
    assert all(b.width > 0.25 for b in boxes), [b.width for b in boxes]
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:]))
    renderer = fig.canvas.get_renderer()
    legend_box = fig.legends[0].get_window_extent(renderer).transformed(fig.transFigure.inverted())
    labels_bottom = min(ax.get_tightbbox(renderer).transformed(fig.transFigure.inverted()).y0 for ax in fig.axes[:3])
    assert legend_box.y1 <= labels_bottom + 1e-3 and legend_box.y0 >= 0 and legend_box.x0 >= 0
    assert legend_box.x1 <= 1


def test_wall_time_axis_says_what_was_timed(tmp_path, monkeypatch):
    """The wall-time panel names the runtime each run recorded: simulate is one process with no communication; an
    MPI run names its process count (summary.json's num_processes, else one peak_rss entry per process)."""
    sim = _hand_run(tmp_path / "sim", [0.5, 0.7], runtime={"name": "simulate", "mode": "parameter_server"})
    fig = _figure_of([sim], tmp_path / "sim.png", monkeypatch)
    assert fig.axes[1].get_xlabel().replace("\n", " ") == (
        "training wall time (s): one process computes every worker, no communication (runtime=simulate)")
    mpi = _hand_run(tmp_path / "mpi", [0.5, 0.7], runtime={"name": "mpi", "mode": "parameter_server"})
    (mpi / "summary.json").write_text(json.dumps({"peak_rss_mib_per_process": [600.0, 610.0]}))
    runs = [plot.load_run(mpi)]
    assert plot.wall_time_label(runs) == "training wall time (s) under runtime=mpi, 2 processes"
    (mpi / "summary.json").write_text(json.dumps({"runtime": "mpi", "runtime_mode": "sharded", "num_processes": 4}))
    assert plot.wall_time_label(runs, log_time=True) == (
        "training wall time (log scale) under runtime=mpi (sharded), 4 processes")
    assert plot.wall_time_text([plot.load_run(sim), *runs]) == (
        "one process computes every worker, no communication (runtime=simulate); runtime=mpi (sharded), 4 processes")
    # Runs that record no runtime (hand-written ones, runs of old versions): the plain label.
    assert plot.wall_time_label([plot.load_run(_hand_run(tmp_path / "old", [0.5]))]) == "training wall time (s)"


def test_wall_time_text_reads_what_the_runtime_declares(tmp_path, monkeypatch):
    """What the wall time measures comes from the runtime's declaration (`Runtime.wall_time`), never from its name:
    a runtime registered later is described in its own words, and one declaring none by name and process count."""
    from istjax import runtimes

    simulate = runtimes.RUNTIMES["simulate"]
    monkeypatch.setitem(runtimes.RUNTIMES._entries, "in_house",
                        simulate._replace(name="in_house", wall_time="one GPU per worker, NCCL between them"))
    monkeypatch.setitem(runtimes.RUNTIMES._entries, "simulate", simulate._replace(wall_time=""))
    mine = _hand_run(tmp_path / "mine", [0.5], runtime={"name": "in_house"})
    sim = _hand_run(tmp_path / "sim", [0.5], runtime={"name": "simulate"})
    (sim / "summary.json").write_text(json.dumps({"num_processes": 1}))
    assert plot.wall_time_label([plot.load_run(mine)]) == (
        "training wall time (s): one GPU per worker, NCCL between them (runtime=in_house)")
    assert plot.wall_time_label([plot.load_run(sim)]) == "training wall time (s) under runtime=simulate, 1 process"
