"""The study runner (`istjax.launch.study`): a killed study resumes and reuses its finished runs; each run records
the commit of the code that trained it, when it trained, and whether that tree was clean; child-process runs."""

import json
import pathlib
import subprocess

import pytest

from istjax.launch import provenance, study

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = ("--config.num_rounds=2", "--config.eval_every=2", "--config.checkpoint_every=2", "--config.local_steps=2",
        "--config.model.hidden=(16,)")
CELL = study.Cell("ist", "experiments/configs/digits_ist.py", TINY, {"what": "IST"})


class Killed(Exception):
    """Stands for the study's process being killed between two runs."""


def _counting_trainer(trained):
    def train(p):
        trained.append((p.cell.label, p.seed))
        return study.train_in_process(p)
    return train


def test_a_killed_study_resumes_and_reuses_its_finished_runs(tmp_path):
    out, trained = tmp_path / "results.json", []

    def kill_after_first(p, error):
        assert error is None
        raise Killed

    with pytest.raises(Killed):
        study.run_study("tiny", [CELL], [0, 1], tmp_path / "runs", out=out, root=REPO, command="pytest",
                        train=_counting_trainer(trained), after_run=kill_after_first)
    doc = json.loads(out.read_text())
    assert trained == [("ist", 0)] and [r["seed"] for r in doc["runs"]] == [0]  # the file has the finished run
    first = tmp_path / "runs" / "ist" / "s0" / "summary.json"
    before = first.stat().st_mtime_ns
    outcome = study.run_study("tiny", [CELL], [0, 1], tmp_path / "runs", out=out, root=REPO, command="pytest",
                              train=_counting_trainer(trained))
    assert trained == [("ist", 0), ("ist", 1)]  # seed 0 was not trained again
    assert first.stat().st_mtime_ns == before and not outcome.failed
    doc = json.loads(out.read_text())
    assert [r["seed"] for r in doc["runs"]] == [0, 1] and doc["rows"][0]["seeds"] == [0, 1]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert {r["commit"] for r in doc["runs"]} == {head.strip()}
    # A third invocation trains nothing and rewrites the same numbers.
    study.run_study("tiny", [CELL], [0, 1], tmp_path / "runs", out=out, root=REPO, train=_counting_trainer(trained))
    assert len(trained) == 2 and json.loads(out.read_text())["rows"] == doc["rows"]


def test_a_study_on_a_new_machine_keeps_the_runs_its_file_holds(tmp_path):
    """The run directories are gone (another session's machine): the runs the results file holds are neither
    retrained nor dropped; a cell whose overrides changed is trained afresh."""
    import shutil

    out, trained = tmp_path / "results.json", []
    study.run_study("tiny", [CELL], [0], tmp_path / "runs", out=out, root=REPO, train=_counting_trainer(trained))
    shutil.rmtree(tmp_path / "runs")
    first = json.loads(out.read_text())
    study.run_study("tiny", [CELL], [0, 1], tmp_path / "runs2", out=out, root=REPO, train=_counting_trainer(trained))
    doc = json.loads(out.read_text())
    assert trained == [("ist", 0), ("ist", 1)]  # seed 0 kept from the file, seed 1 trained
    assert doc["runs"][0] == first["runs"][0] and doc["rows"][0]["seeds"] == [0, 1]
    changed = CELL._replace(overrides=CELL.overrides + ("--config.batch_size=16",))
    assert study.kept_records(out, [changed]) == {}
    assert set(study.kept_records(out, [CELL])) == {("ist", 0), ("ist", 1)}


def test_a_cell_whose_overrides_changed_but_not_its_config_keeps_its_runs(tmp_path):
    """Pinning a value the config file already has (as a study does when the file's default moves) keeps the runs;
    a pin that changes the config does not."""
    out, trained = tmp_path / "results.json", []
    study.run_study("tiny", [CELL], [0], tmp_path / "runs", out=out, root=REPO, train=_counting_trainer(trained))
    recorded = json.loads(out.read_text())["configs"]["ist"]["resolved"]
    assert recorded["batch_size"] == 32  # digits_ist.py's own value
    pinned = CELL._replace(overrides=CELL.overrides + ("--config.batch_size=32",))
    moved = CELL._replace(overrides=CELL.overrides + ("--config.batch_size=16",))
    assert study.kept_records(out, [pinned], {"ist": recorded}).keys() == {("ist", 0)}
    assert study.kept_records(out, [pinned]) == {}  # without the resolved fields only the overrides can match
    assert study.kept_records(out, [moved], {"ist": {**recorded, "batch_size": 16}}) == {}
    study.run_study("tiny", [pinned], [0], tmp_path / "runs2", out=out, root=REPO, train=_counting_trainer(trained))
    assert trained == [("ist", 0)]  # kept, not retrained
    assert json.loads(out.read_text())["configs"]["ist"]["overrides"] == list(pinned.overrides)
    study.run_study("tiny", [moved], [0], tmp_path / "runs3", out=out, root=REPO, train=_counting_trainer(trained))
    assert trained == [("ist", 0), ("ist", 0)]  # the config changed: trained afresh


def test_a_run_directory_left_by_the_cells_earlier_config_is_not_recorded_as_its_run(tmp_path):
    """A tuning choice that moved (here the batch size) plans the cell's runs into the same directories; where the
    new run fails (the workdir holds the old config's run and refuses it), the results file must not record the
    old run under the new config, and a later study must train it, not keep it."""
    out, trained = tmp_path / "results.json", []
    study.run_study("tiny", [CELL], [0], tmp_path / "runs", out=out, root=REPO, train=_counting_trainer(trained))
    moved = CELL._replace(overrides=CELL.overrides + ("--config.batch_size=16",))
    outcome = study.run_study("tiny", [moved], [0], tmp_path / "runs", out=out, root=REPO,
                              train=_counting_trainer(trained))
    assert outcome.failed and "different config" in next(iter(outcome.failed.values()))
    assert json.loads(out.read_text())["runs"] == []  # the old run is not the moved cell's
    assert study.kept_records(out, [moved]) == {}


def test_a_pinned_cell_keeps_runs_recorded_before_a_field_was_added(tmp_path):
    """A results file written before a config field existed records no value for it; the run trained at what is
    now its default, so a cell pinning something else the file already has keeps its runs (as `finished` reads an
    old ``config.json``), and a cell whose config now differs in that field does not."""
    out, trained = tmp_path / "results.json", []
    study.run_study("tiny", [CELL], [0], tmp_path / "runs", out=out, root=REPO, train=_counting_trainer(trained))
    doc = json.loads(out.read_text())
    del doc["configs"]["ist"]["resolved"]["compute_dtype"]  # as a file written before bfloat16 compute existed
    out.write_text(json.dumps(doc))
    pinned = CELL._replace(overrides=CELL.overrides + ("--config.batch_size=32",))
    now = study.resolved_fields(study.plan([pinned], [0], tmp_path / "r", root=REPO)[0].config)
    assert study.kept_records(out, [pinned], {"ist": now}).keys() == {("ist", 0)}
    assert study.kept_records(out, [pinned], {"ist": {**now, "compute_dtype": "bfloat16"}}) == {}


def test_a_run_of_some_cells_keeps_the_other_cells_pinned_runs(tmp_path):
    """``only`` trains one cell; another cell whose overrides now pin its config's own value keeps its runs (their
    run directories gone: a study that outlives its machine)."""
    out, trained = tmp_path / "results.json", []
    other = CELL._replace(label="other")
    study.run_study("tiny", [CELL, other], [0], tmp_path / "runs", out=out, root=REPO,
                    train=_counting_trainer(trained))
    pinned = other._replace(overrides=other.overrides + ("--config.batch_size=32",))
    study.run_study("tiny", [CELL, pinned], [0], tmp_path / "runs2", out=out, root=REPO, only=["ist"],
                    train=_counting_trainer(trained))
    assert trained == [("ist", 0), ("other", 0)]  # nothing retrained
    assert sorted(r["label"] for r in json.loads(out.read_text())["runs"]) == ["ist", "other"]


def test_a_study_run_for_other_seeds_keeps_the_seeds_its_file_holds(tmp_path):
    """Seeds 0 and 1 are in the file; a run for seed 2 alone trains it and keeps 0 and 1, in seed order."""
    out, trained = tmp_path / "results.json", []
    study.run_study("tiny", [CELL], [1, 0], tmp_path / "runs", out=out, root=REPO, train=_counting_trainer(trained))
    study.run_study("tiny", [CELL], [2], tmp_path / "runs2", out=out, root=REPO, train=_counting_trainer(trained))
    doc = json.loads(out.read_text())
    assert trained == [("ist", 1), ("ist", 0), ("ist", 2)]
    assert [r["seed"] for r in doc["runs"]] == [0, 1, 2] and doc["rows"][0]["seeds"] == [0, 1, 2]


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _code_repo(path: pathlib.Path) -> pathlib.Path:
    """A git repository standing for the code (`provenance.PACKAGE_DIR` is pointed at it): one tracked file."""
    path.mkdir()
    _git(path, "init", "-q")
    _git(path, "config", "user.email", "t@example.com")
    _git(path, "config", "user.name", "t")
    (path / "code.py").write_text("v = 1\n")
    _git(path, "add", "code.py")
    _git(path, "commit", "-qm", "first")
    return path


def test_each_run_records_the_commit_it_trained_at_and_a_dirty_tree(tmp_path, monkeypatch):
    """Seed 0 trains at commit A, seed 1 at commit B (made between the runs), seed 2 on B with a tracked file
    edited: each record carries its own run's commit, and the third reads clean=False."""
    code = _code_repo(tmp_path / "code")
    monkeypatch.setattr(provenance, "PACKAGE_DIR", code)
    heads = []

    def between_runs(p, error):
        heads.append(_git(code, "rev-parse", "HEAD"))
        if p.seed == 0:
            (code / "code.py").write_text("v = 2\n")
            _git(code, "commit", "-qam", "second")
        elif p.seed == 1:
            (code / "code.py").write_text("v = 3  # not committed\n")

    out = tmp_path / "results.json"
    study.run_study("tiny", [CELL], [0, 1, 2], tmp_path / "runs", out=out, root=REPO, after_run=between_runs)
    runs = json.loads(out.read_text())["runs"]
    assert heads[0] != heads[1] == heads[2]
    assert [(r["commit"], r["clean"]) for r in runs] == [(heads[0], True), (heads[1], True), (heads[1], False)]
    for r in runs:  # the record is the run's own summary.json's, written when it trained
        summary = json.loads((tmp_path / "runs" / "ist" / f"s{r['seed']}" / "summary.json").read_text())
        assert summary["code"] == {"commit": r["commit"], "clean": r["clean"]}
    # The file written now, at yet another commit, does not restamp the runs it reuses.
    (code / "code.py").write_text("v = 4\n")
    _git(code, "commit", "-qam", "third")
    study.run_study("tiny", [CELL], [0, 1, 2], tmp_path / "runs", out=out, root=REPO)
    assert json.loads(out.read_text())["runs"] == runs


def test_code_version_outside_a_checkout(tmp_path):
    assert provenance.code_version(tmp_path) == {"commit": None, "clean": False}


@pytest.mark.slow
def test_child_process_runs_behind_a_launch_prefix(tmp_path):
    """A run trained as ``istjax train`` in a child process behind a prefix (``env`` here; ``mpiexec -n 2`` or a
    namespace wrapper in a real study) is a finished run like any other: reused afterwards, with its provenance."""
    prefixes = []

    def prefix(p):
        prefixes.append(p.seed)
        return ["env", "JAX_PLATFORMS=cpu"]

    train = study.child_trainer(prefix, root=REPO)
    outcome = study.run_study("child", [CELL], [3], tmp_path / "runs", out=tmp_path / "r.json", root=REPO,
                              train=train)
    assert not outcome.failed and prefixes == [3]
    (run,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert run["seed"] == 3 and run["commit"] and run["machine"]["cores"]
    config = json.loads((tmp_path / "runs" / "ist" / "s3" / "config.json").read_text())
    assert config["seed"] == 3 and config["num_rounds"] == 2
    study.run_study("child", [CELL], [3], tmp_path / "runs", root=REPO, train=train)
    assert prefixes == [3]  # finished: not launched again


def test_mean_std_is_the_one_seed_statistic():
    assert study.mean_std([1.0, None, 3.0]) == (2.0, pytest.approx(2 ** 0.5))
    assert study.mean_std([0.5]) == (0.5, None) and study.mean_std([None]) == (None, None)


def test_plan_refuses_repeated_labels_and_unknown_cells(tmp_path):
    with pytest.raises(ValueError, match="repeat"):
        study.plan([CELL, CELL], [0], tmp_path, root=REPO)
    with pytest.raises(ValueError, match="no cell named"):
        study.plan([CELL], [0], tmp_path, root=REPO, only=["nope"])


# ----------------------------------------------------------------------------------------------------------------
# experiments.report --check on results files the runner built from a clean and a dirty tree

def test_report_provenance_fails_on_a_number_from_a_dirty_tree_run(tmp_path, monkeypatch, capsys):
    from experiments import report, tables

    code = _code_repo(tmp_path / "code")
    monkeypatch.setattr(provenance, "PACKAGE_DIR", code)
    tree = tmp_path / "tree"
    clean, dirty = "experiments/demo/results/clean.json", "experiments/demo/results/dirty.json"
    study.run_study("demo", [CELL], [0], tmp_path / "runs", out=tree / clean, root=REPO)  # at a clean commit
    (code / "code.py").write_text("v = 2  # not committed\n")
    study.run_study("demo", [CELL], [0, 1], tmp_path / "runs", out=tree / dirty, root=REPO)  # seed 1: dirty
    runs = json.loads((tree / dirty).read_text())["runs"]
    assert [r["clean"] for r in runs] == [True, False]

    monkeypatch.setattr(tables, "REGISTRY", {})
    for name, source in (("demo.clean", clean), ("demo.dirty", dirty)):
        tables.scalar(name, source, lambda d: tables.accuracy(tables.result_rows(d)[0]))
    (tree / "README.md").write_text("Clean: <!-- report:demo.clean --><!-- /report:demo.clean -->.\n")
    docs = tree / "docs"
    docs.mkdir()
    (docs / "page.md").write_text("Dirty: <!-- report:demo.dirty --><!-- /report:demo.dirty -->.\n")
    assert report.main(["--root", str(tree)]) == 1  # the numbers are written into the pages, and the dirty run told
    capsys.readouterr()
    assert report.main(["--check", "--root", str(tree)]) == 1  # every number agrees, but one rests on a dirty tree
    out = capsys.readouterr().out
    assert "every table agrees" in out
    assert f"provenance: {dirty}: 1 of 2 runs from a dirty tree" in out and "ist seed 1" in out
    assert "docs/page.md:1 report:demo.dirty" in out and clean not in out

    # A file that cannot be remade here may declare why; then every page reading it must carry the note.
    doc = json.loads((tree / dirty).read_text())
    (tree / dirty).write_text(json.dumps({**doc, "unrecorded": {"why": "made on a GPU.", "rerun": "make gpu"}}))
    assert report.main(["--check", "--root", str(tree)]) == 1
    assert "docs/page.md, which carries no provenance note" in capsys.readouterr().out
    note = "\n<!-- report:provenance -->\n<!-- /report:provenance -->\n"
    (docs / "page.md").write_text((docs / "page.md").read_text() + note)
    (tree / "README.md").write_text((tree / "README.md").read_text() + note)
    assert report.main(["--root", str(tree)]) == 0
    page = (docs / "page.md").read_text()
    assert f"- `{dirty}`: made on a GPU. Rerun: `make gpu`." in page and clean not in page
    assert "Every number on this page rests on runs from a clean commit" in (tree / "README.md").read_text()
    capsys.readouterr()
    assert report.main(["--check", "--root", str(tree)]) == 0
    assert f"provenance: {dirty}: declared: made on a GPU." in capsys.readouterr().out
    (tree / dirty).write_text(json.dumps({**doc, "unrecorded": {"why": "made on a GPU."}}))  # no rerun command
    assert report.main(["--check", "--root", str(tree)]) == 2
    assert "'unrecorded' must be" in capsys.readouterr().err

    (tree / dirty).write_text(json.dumps(doc))
    (docs / "page.md").unlink()  # only the clean run's number is left in the pages
    assert report.main(["--check", "--root", str(tree)]) == 0
    assert "every number rests on runs from a clean commit" in capsys.readouterr().out


def test_paired_difference_by_hand():
    """Seeds 0-2 in both (seed 3 only in a): differences 0.1, 0.3, 0.2, mean 0.2, std 0.1, 95 % half-width
    t(0.975, 2) * 0.1 / sqrt(3) = 4.3027 * 0.057735 = 0.24841."""
    a = [{"seed": s, "acc": v} for s, v in enumerate([0.6, 0.8, 0.7, 0.9])]
    b = [{"seed": s, "acc": v} for s, v in enumerate([0.5, 0.5, 0.5])]
    d = study.paired_difference(a, b, "acc")
    assert d["seeds"] == [0, 1, 2]
    assert d["mean"] == pytest.approx(0.2) and d["std"] == pytest.approx(0.1)
    assert d["high"] - d["mean"] == pytest.approx(0.24841, abs=1e-4) and d["low"] == pytest.approx(0.2 - 0.24841,
                                                                                                  abs=1e-4)
    assert study.paired_difference(a[:1], b, "acc") is None  # one common seed: no spread, no interval


def test_the_gap_parts_add_up_to_the_test_loss_gap_by_hand():
    """experiments.images.gap.gap_parts: IST's test loss minus data parallel's, split into the workers' fit, the
    merge, the statistics and the rest; per seed the parts add up to the gap (hand numbers: seed 0's gap 0.2 = 0.3
    fit - 0.05 merge + 0.01 statistics - 0.06 rest)."""
    from experiments.images import gap

    def run(label, seed, test, worker, merge, merged_train, merged_test, acc):
        return {"label": label, "seed": seed, "test_loss": test, "worker_train_loss": worker, "merge_cost": merge,
                "merged_train_loss": merged_train, "merged_test_loss": merged_test, "test_accuracy": acc}

    d = {"runs": [run("ist_W2_1k", 0, 0.6, 0.6, -0.05, 0.55, 0.56, 0.8), run("ist_W2_1k", 1, 0.7, 0.7, -0.1, 0.6,
                                                                                  0.6, 0.7),
                  run("data_parallel_W2_1k", 0, 0.4, 0.3, 0.0, 0.3, 0.3, 0.9),
                  run("data_parallel_W2_1k", 1, 0.4, 0.35, 0.0, 0.35, 0.36, 0.85)]}
    g = gap.gap_parts(d, "ist_W2_1k", "data_parallel_W2_1k")
    assert g["test_loss"]["differences"] == pytest.approx([0.2, 0.3])
    assert g["workers' own fit"]["differences"] == pytest.approx([0.3, 0.35])
    assert g["the merge"]["differences"] == pytest.approx([-0.05, -0.1])
    assert g["the statistics"]["differences"] == pytest.approx([0.01, -0.01])
    assert g["test set vs training batches"]["differences"] == pytest.approx([-0.06, 0.06])
    parts = [g[name]["mean"] for name, _ in gap.GAP_PARTS]
    assert sum(parts) == pytest.approx(g["test_loss"]["mean"])
    assert g["accuracy"]["mean"] == pytest.approx(-0.125)
    assert gap.gap_parts(d, "ist_W2_1k", "local_sgd_W2_1k") is None  # no baseline runs: no row



def test_the_gap_at_each_budget_reads_the_cells_of_that_budget(tmp_path):
    """The README's by-budget row and the budgets figure pair IST with data parallel within each budget's cells
    (hand numbers: at 40,960 samples IST trails by 10 points on both seeds, at 163,840 by 5); a budget without
    both cells is left out, and the row says whether the workers' fit exceeds the gap everywhere."""
    from experiments.images import report as images_report
    from experiments.images import studies

    def run(label, seed, acc, test, worker):
        return {"label": label, "seed": seed, "test_accuracy": acc, "test_loss": test, "worker_train_loss": worker,
                "merge_cost": -0.05, "merged_train_loss": worker - 0.05, "merged_test_loss": worker - 0.05}

    runs = []
    for seed in (0, 1):
        runs += [run("ist_W2_40k", seed, 0.70, 0.9, 0.9), run("data_parallel_W2_40k", seed, 0.80, 0.6, 0.55),
                 run("ist_W2_163k", seed, 0.80, 0.6, 0.6), run("data_parallel_W2_163k", seed, 0.85, 0.4, 0.35)]
    d = {"rows": [], "runs": runs}
    text = images_report._headline_decompose_budgets(d)
    assert text.startswith("W = 2: -10.0 [-10.0, -10.0] points at 40,960 (2 seeds), -5.0 [-5.0, -5.0] points at "
                           "163,840 (2 seeds)"), text
    assert "W = 4" not in text and "81,920" not in text
    assert text.endswith("the workers' own fit exceeds the whole test-loss gap at every budget and W (the merge "
                         "gains)")
    path = tmp_path / "results.json"
    path.write_text(__import__("json").dumps(d))
    out = studies.plot_budgets(path, tmp_path / "budgets.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

def test_the_fit_split_by_the_fixed_sub_network_control_by_hand():
    """The workers' fit gap (IST 0.6, 0.7 against data parallel 0.3, 0.35: +0.325) splits into a narrower network on
    one worker's samples (the sub-network control's 0.5, 0.5 against data parallel: +0.175, 54 %) and the
    repartitioning (IST against the control: +0.150, 46 %); the whole-network control (0.4, 0.45) splits the first
    into the width (control minus whole network: +0.075, 23 %) and the samples (whole network minus data parallel:
    +0.100, 31 %). Without the whole-network control its columns read '-'."""
    from experiments.images import report as images_report

    def run(label, seed, worker):
        return {"label": label, "seed": seed, "worker_train_loss": worker}

    def row(label, **more):
        return {"label": label, "algorithm": "ist", "num_workers": 2, "seeds": [0, 1], "test_accuracy_mean": 0.5,
                "test_accuracy_std": 0.0, "budget": 1000, **more}

    rows = [row("ist_W2_1k"), row("fixed_subnet_W2_1k", control_for="ist_W2_1k", control="fixed_subnet",
                                  num_workers=1, worker_train_loss_mean=0.5, worker_train_loss_std=0.0)]
    runs = [run("ist_W2_1k", 0, 0.6), run("ist_W2_1k", 1, 0.7), run("data_parallel_W2_1k", 0, 0.3),
            run("data_parallel_W2_1k", 1, 0.35), run("fixed_subnet_W2_1k", 0, 0.5), run("fixed_subnet_W2_1k", 1, 0.5)]
    full = row("full_width_W2_1k", control_for="ist_W2_1k", control="full_width", num_workers=1,
               worker_train_loss_mean=0.425, worker_train_loss_std=0.035)
    full_runs = [run("full_width_W2_1k", 0, 0.4), run("full_width_W2_1k", 1, 0.45)]

    def line(d):
        text = images_report._images_decompose_fit(d)
        return next(line for line in text.splitlines() if line.startswith("| 1,000 | 2 |"))

    without = line({"rows": rows, "runs": runs})
    assert "+0.325 [" in without and "+0.175 [" in without and "; 54 %" in without
    assert "+0.150 [" in without and "; 46 %" in without and [c.strip() for c in without.split("|")].count("-") == 3
    whole = line({"rows": rows + [full], "runs": runs + full_runs})
    assert "+0.075 [" in whole and "; 23 %" in whole and "+0.100 [" in whole and "; 31 %" in whole
    assert "-" not in [c.strip() for c in whole.split("|")]


def test_a_variant_reads_better_worse_or_no_difference_from_its_paired_interval():
    """Against the defaults (0.70, 0.72, 0.71): a variant 2 points up on every seed is better, one that moves +1, -1,
    +1 shows no measurable difference; the table pairs by seed and the scalar names the verdict."""
    from experiments.images import report as images_report

    def run(label, seed, acc):
        return {"label": label, "seed": seed, "test_accuracy": acc, "worker_train_loss": 1 - acc,
                "merge_cost": 0.0, "test_loss": 1 - acc}

    def row(label, **more):
        return {"label": label, "algorithm": "ist", "num_workers": 2, "seeds": [0, 1, 2], "test_accuracy_mean": 0.7,
                "test_accuracy_std": 0.01, "budget": 163_840, "group": "settings", **more}

    base, up, mixed = "ist_W2_163k", "ist_W2_163k_lr0.1", "ist_W2_163k_K10"
    defaults = (0.70, 0.72, 0.71)
    d = {"rows": [row(base, group="main"), row(up, base=base, what="ist, W = 2: learning rate 0.1"),
                  row(mixed, base=base, what="ist, W = 2: K = 10")],
         "runs": [run(base, s, a) for s, a in enumerate(defaults)]
         + [run(up, s, a + 0.02) for s, a in enumerate(defaults)]
         + [run(mixed, s, a + e) for s, (a, e) in enumerate(zip(defaults, (0.01, -0.01, 0.01)))]}
    text = images_report._images_decompose_variants(d)
    lr = next(line for line in text.splitlines() if "learning rate 0.1" in line)
    k10 = next(line for line in text.splitlines() if "K = 10" in line)
    assert "+2.0 [+2.0, +2.0] (3)" in lr and "| better |" in lr and "-0.020 [" in lr
    assert "| no measurable difference |" in k10
    assert images_report._variant_scalar(2, "lr0.1")(d) == "+2.0 [+2.0, +2.0] points (3 seeds; better)"


def test_a_run_record_carries_its_first_windows_workers_loss(tmp_path):
    """`run_record` reads the workers' own loss of the first evaluation window that recorded the split from the
    run's metrics.jsonl (with the last window's from summary.json: whether the run trained at all), and the rows
    average it over seeds; a run without the split has neither."""
    summary = {"test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0, "rounds": 4, "samples_seen": 64,
               "time_per_round_s": 0.1, "bytes_sent_per_worker_per_round": 1, "bytes_received_per_worker_per_round": 1,
               "algorithm": "ist", "num_workers": 2}
    runs = []
    for seed, (first, last) in enumerate(((2.0, 0.5), (3.0, 0.7))):
        run_dir = tmp_path / f"s{seed}"
        run_dir.mkdir()
        (run_dir / "summary.json").write_text(json.dumps({**summary, "worker_train_loss": last}))
        (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
            {"round": 0, "test_accuracy": 0.1}, {"round": 2, "worker_train_loss": first},
            {"round": 4, "worker_train_loss": last})) + "\n")
        runs.append(study.run_record(study.Planned(CELL, seed, run_dir, CELL.config)))
    assert [(r["worker_train_loss_first"], r["worker_train_loss"]) for r in runs] == [(2.0, 0.5), (3.0, 0.7)]
    row, = study.aggregate([CELL], runs)
    assert row["worker_train_loss_first_mean"] == 2.5 and row["worker_train_loss_mean"] == 0.6
    (tmp_path / "s0" / "metrics.jsonl").write_text(json.dumps({"round": 2, "test_accuracy": 0.1}) + "\n")
    assert "worker_train_loss_first" not in study.run_record(study.Planned(CELL, 0, tmp_path / "s0", CELL.config))


def test_the_ablation_compares_each_step_with_the_one_before_handled_alike_and_a_recomputed_step_with_it_carried():
    """`ablation_against` names cells the study has, in the paper's order: step 1 carried stands alone; step 2
    recomputed against step 1 recomputed and step 2 carried; step 4 (no recomputed twin) against step 3 carried. The
    table pairs by seed and shows whether a step trained (its workers' loss, first window -> last)."""
    from experiments.images import report as images_report
    from experiments.images import studies

    labels = {c.label for c in studies._decompose_ablation_cells()}
    assert images_report.ablation_against("ablation_1_naive") == []
    assert images_report.ablation_against("ablation_2_share_strided_recomputed") == [
        ("step 1 recomputed", "ablation_1_naive_recomputed"), ("carried", "ablation_2_share_strided")]
    assert images_report.ablation_against("ablation_4_test_scale") == [("step 3", "ablation_3_one_section")]
    assert {other for label in labels for _, other in images_report.ablation_against(label)} <= labels

    one, two = "ablation_1_naive_recomputed", "ablation_2_share_strided_recomputed"
    rows = [{"label": label, "group": "ablation", "step": step, "what": label, "seeds": [0, 1, 2], "base": "x",
             "algorithm": "resist", "num_workers": 2,
             "test_accuracy_mean": 0.5, "test_accuracy_std": 0.0, "worker_train_loss_first_mean": 2.0,
             "worker_train_loss_mean": 0.5} for label, step in ((one, 1), (two, 2))]
    runs = [{"label": label, "seed": s, "test_accuracy": a + (0.03 if label == two else 0.0)}
            for label in (one, two) for s, a in enumerate((0.60, 0.62, 0.61))]
    text = images_report._images_decompose_ablation({"rows": rows, "runs": runs,
                                                     "baselines": {"linear": {"test_accuracy": 0.4}}})
    line = next(x for x in text.splitlines() if x.startswith(f"| {two} "))
    assert "+3.0 [+3.0, +3.0] (3) vs step 1 recomputed" in line and "2.000 → 0.500" in line


@pytest.mark.parametrize("config_cell, error", [
    ("ist_W4_163k_momentum_carried", r":w4 \(W = 4, momentum carried\) or :diagnosis"),
    ("resist_W4_momentum_carried", r":w4 \(W = 4, momentum carried\)\.")])
def test_a_configs_w4_setting_is_the_cell_the_decomposition_measured(config_cell, error):
    """fmnist_resnet_ist.py:w4 and fmnist_resist.py:w4 (W = 4, momentum carried) are the defaults with the overrides
    of the decomposition's W = 4 momentum-carried cell and nothing else: the setting a config names is the one
    measured."""
    from experiments.images import studies
    from istjax.launch import cli

    (cell,) = [c for c in studies.GRIDS["decompose"]() if c.label == config_cell]
    config = pathlib.Path(__file__).resolve().parents[1] / cell.config
    both = [cli.parse_train_args(["istjax", f"--config={config}{arg}", *cell.overrides])[0].to_dict()
            for arg in ("", ":w4")]
    assert both[0] == both[1]
    plain, w4 = (cli.parse_train_args(["istjax", f"--config={config}{arg}"])[0] for arg in ("", ":w4"))
    assert (plain.num_workers, plain.algorithm.optimizer_state) == (2, "reset")
    assert (w4.num_workers, w4.algorithm.optimizer_state) == (4, "carry")
    with pytest.raises(ValueError, match=error):
        cli.parse_train_args(["istjax", f"--config={config}:w8"])
