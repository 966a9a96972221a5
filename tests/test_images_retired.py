"""The image page after the retirement of its two unrecorded grids (issue 55): the figures that replaced theirs are
computed from the decomposition's runs, and the retired studies are no longer commands."""

import pytest

from experiments import tables
from experiments.images import report as images_report  # noqa: F401  (registers the images entries)
from experiments.images import studies


def _variant_doc():
    """IST's defaults and its learning-rate-0.1 variant at W = 2 on three seeds: the variant's workers end 0.02
    lower on every seed."""
    def run(label, seed, worker):
        return {"label": label, "seed": seed, "test_accuracy": 1 - worker, "worker_train_loss": worker}

    base, up = "ist_W2_163k", "ist_W2_163k_lr0.1"
    return {"rows": [], "runs": [run(base, s, w) for s, w in enumerate((0.30, 0.28, 0.29))]
            + [run(up, s, w - 0.02) for s, w in enumerate((0.30, 0.28, 0.29))]}


def test_a_variants_fit_scalar_is_its_workers_loss_minus_the_defaults_paired_by_seed():
    """decompose.variant.W2.lr0.1.fit: the variant's workers' own train loss minus the defaults', seed by seed (here
    -0.02 on each of three seeds, so the interval is the point); with one seed it says so instead of a number."""
    entry = tables.REGISTRY["decompose.variant.W2.lr0.1.fit"]
    d = _variant_doc()
    assert entry.render(d) == "-0.020 [-0.020, -0.020] (3 seeds)"
    one_seed = {"rows": [], "runs": [r for r in d["runs"] if r["seed"] == 0]}
    assert entry.render(one_seed) == "(fewer than two seeds so far)"


def test_resists_bytes_scalar_is_its_cells_bytes_over_local_sgds():
    """decompose.resist.W4.bytes: ResIST's bytes per worker per round over local SGD's at the same W (the figure
    the retired ResIST grid's last column gave)."""
    rows = [{"label": label, "algorithm": algorithm, "num_workers": 4, "seeds": [0, 1], "test_accuracy_mean": 0.7,
             "test_accuracy_std": 0.0, "bytes_per_worker_per_round": b, "rounds": 100}
            for label, algorithm, b in (("resist_W4", "resist", 36.0), ("resist_local_sgd_W4", "local_sgd", 100.0))]
    assert tables.REGISTRY["decompose.resist.W4.bytes"].render({"rows": rows, "runs": []}) == "0.36"


@pytest.mark.parametrize("retired", ["diagnosis", "resist"])
def test_a_retired_study_is_no_command_and_no_entry_reads_its_file(retired, capsys):
    """The retired grids are refused by the CLI (exit 2, the study list names the ones left) and no registered
    table or figure reads their results files."""
    assert retired not in studies.GRIDS
    with pytest.raises(SystemExit) as exc:
        studies.main([retired])
    assert exc.value.code == 2 and "decompose" in capsys.readouterr().err
    path = f"experiments/images/results/{retired}.json"
    assert not [e.name for e in tables.REGISTRY.values() if path in e.sources]
