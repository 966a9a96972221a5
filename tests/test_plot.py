"""`istjax plot` on real run directories (written by the training driver) and its errors."""

import json

import numpy as np
import pytest

from istjax.experiment import config as config_lib
from istjax.experiment import plot
from istjax.experiment.metrics import RECORD_FIELDS


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    """Two tiny real runs on digits (IST and local SGD, W=2) via train_and_evaluate."""
    from istjax.experiment import driver as train

    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for algo in ("ist", "local_sgd"):
        c = config_lib.default_config()
        c.algorithm, c.num_workers, c.local_steps, c.batch_size = algo, 2, 2, 16
        c.model.hidden, c.num_rounds, c.eval_every, c.progress = (8,), 4, 2, False
        c.eval_train_examples = 200
        train.train_and_evaluate(c, root / algo)
        dirs.append(root / algo)
    return dirs


def test_metrics_lines_carry_the_schema(run_dirs):
    for d in run_dirs:
        run = plot.load_run(d)
        assert [r["round"] for r in run.records] == [2, 4]
        for rec in run.records:
            assert set(RECORD_FIELDS) <= set(rec), set(RECORD_FIELDS) - set(rec)
        assert plot.label(run) == f"{run.config['algorithm']} W=2 K=2"


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


def test_default_out_for_one_run(run_dirs):
    assert plot.main([str(run_dirs[0])]) == 0
    assert (run_dirs[0] / "accuracy.png").exists()


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
