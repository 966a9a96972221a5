"""experiments.report: every table in README.md and docs/ is what the committed results JSON gives.

The first test is the one that keeps the docs honest: it fails when a number between markers was edited by hand or
a results file changed without `make results`. The others check the tool on copies (``--root``) and small trees.
"""

import json
import pathlib
import shutil

import pytest

from experiments import report, tables

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_committed_tables_agree_with_committed_json(capsys):
    status = report.main(["--check"])
    out = capsys.readouterr()
    assert status == 0, f"{out.out}\n{out.err}\nfix: python -m experiments.report (make results), then commit"


def _copy_of_repository(tmp_path: pathlib.Path) -> pathlib.Path:
    """The pages and every results file the registry reads, under ``tmp_path``."""
    root = tmp_path / "repo"
    for page in report.pages(ROOT):
        (root / page.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(page, root / page.relative_to(ROOT))
    for source in {s for e in tables.REGISTRY.values() for s in e.sources}:
        if (ROOT / source).is_file():
            (root / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, root / source)
    return root


def _placement(text: str, path: str, name: str) -> report.Placement:
    return next(p for p in report.find_markers(text, path) if p.name == name)


def test_a_table_edited_by_hand_fails_the_check_and_write_mode_restores_it(tmp_path, capsys):
    root = _copy_of_repository(tmp_path)
    page = root / "docs" / "benchmarks.md"
    original = page.read_text()
    table = _placement(original, "docs/benchmarks.md", "bench_summary")
    figure = _placement(original, "docs/benchmarks.md", "bench.overhead_2layer")
    edited = original
    for start, end, new in sorted([(table.end, table.end, "| forged | row | yes |\n"),
                                   (figure.start, figure.end, "1.0 %")], reverse=True):
        edited = edited[:start] + new + edited[end:]
    page.write_text(edited)

    assert report.main(["--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "docs/benchmarks.md" in out and "report:bench_summary" in out and "report:bench.overhead_2layer" in out
    assert "-| forged | row | yes |" in out and "-1.0 %" in out
    assert "2 table(s) differ" in out and "python -m experiments.report" in out
    assert page.read_text() == edited  # --check writes nothing

    assert report.main(["--root", str(root)]) == 0
    assert page.read_text() == original
    assert report.main(["--check", "--root", str(root)]) == 0


def _tree(tmp_path: pathlib.Path, readme: str, files: dict | None = None) -> pathlib.Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "README.md").write_text(readme)
    for rel, data in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(data))
    return root


def _errors(root: pathlib.Path, capsys) -> str:
    assert report.main(["--check", "--root", str(root)]) == 2
    assert report.main(["--root", str(root)]) == 2
    return capsys.readouterr().err


def test_a_marker_naming_no_table_is_an_error_naming_file_line_and_fix(tmp_path, capsys):
    err = _errors(_tree(tmp_path, "# t\n\n<!-- report:bench_sumary -->\n<!-- /report:bench_sumary -->\n"), capsys)
    assert "README.md:3" in err and "report:bench_sumary names no table" in err
    assert "did you mean bench_summary" in err and "--list" in err


@pytest.mark.parametrize("readme, where, says", [
    ("text\n<!-- report:headline -->\n| a |\n", "README.md:2", "never closed"),
    ("text\n| a |\n<!-- /report:headline -->\n", "README.md:3", "closes a table that was not opened"),
    ("<!-- report:headline -->\n<!-- report:overlap -->\n<!-- /report:overlap -->\n", "README.md:2",
     "opens inside report:headline"),
    ("IST was <!-- report:fsdd.lsgd_range -->1.2x sooner.\n", "README.md:1", "has no other half on its line"),
    ("a\n<!-- report:fsdd.lsgd_range -->\n<!-- /report:fsdd.lsgd_range -->\n", "README.md:2", "is a figure"),
])
def test_unbalanced_or_misplaced_markers_are_errors(tmp_path, capsys, readme, where, says):
    err = _errors(_tree(tmp_path, readme), capsys)
    assert where in err and says in err and "fix:" in err


def test_a_missing_results_file_is_an_error_naming_it(tmp_path, capsys):
    err = _errors(_tree(tmp_path, "x\n\n<!-- report:bench_summary -->\n<!-- /report:bench_summary -->\n"), capsys)
    assert "README.md:3" in err and "experiments/benchmarks/results.json" in err and "which is not in" in err


def test_markers_inside_code_are_text(tmp_path, capsys):
    readme = ("Write `<!-- report:NAME -->` around a table.\n\n```\n<!-- report:no_such_table -->\n```\n")
    assert report.main(["--check", "--root", str(_tree(tmp_path, readme))]) == 0


AGGREGATED = {"code": {"commit": "0" * 40, "clean": True}, "rows": [
    {"algorithm": "ist", "num_workers": 2, "seeds": [0, 1, 2], "test_accuracy_mean": 0.97123,
     "test_accuracy_std": 0.0041, "bytes_per_round": 39000, "label": "digits"},
    {"algorithm": "data_parallel", "num_workers": 2, "seeds": [0], "test_accuracy_mean": 0.981,
     "test_accuracy_std": None, "bytes_per_round": 1560000, "label": "digits"},
]}


@pytest.fixture
def registry(monkeypatch):
    """An empty registry in place of the real one (entries registered in the test land there)."""
    monkeypatch.setattr(tables, "REGISTRY", {})
    return tables.REGISTRY


def test_an_aggregated_results_table_is_one_call(tmp_path, registry, capsys):
    tables.results_table("demo", "experiments/demo/results/agg.json",
                         ["label", "algorithm", "num_workers", "test_accuracy", "bytes_per_round", "seeds"])
    tables.scalar("demo.ist", "experiments/demo/results/agg.json",
                  lambda d: tables.accuracy(tables.result_rows(d)[0]))
    root = _tree(tmp_path, "IST: <!-- report:demo.ist --><!-- /report:demo.ist -->.\n\n<!-- report:demo -->\n"
                           "<!-- /report:demo -->\n", {"experiments/demo/results/agg.json": AGGREGATED})
    assert report.main(["--check", "--root", str(root)]) == 1
    assert report.main(["--root", str(root)]) == 0
    assert (root / "README.md").read_text() == (
        "IST: <!-- report:demo.ist -->0.971 ± 0.004 (3 seeds)<!-- /report:demo.ist -->.\n\n"
        "<!-- report:demo -->\n\n"
        "|  | algorithm | W | test accuracy (mean ± std over seeds) | bytes per worker per round | seeds |\n"
        "|---|---|---|---|---|---|\n"
        "| digits | IST | 2 | 0.971 ± 0.004 (3 seeds) | 39.0 kB | 0, 1, 2 |\n"
        "| digits | data parallel | 2 | 0.981 (1 seed) | 1.6 MB | 0 |\n\n"
        "<!-- /report:demo -->\n")
    assert report.main(["--check", "--root", str(root)]) == 0
    assert "demo.ist" in report.listing(root, registry) and "README.md:1" in report.listing(root, registry)


def test_an_aggregated_file_without_a_required_field_is_an_error(tmp_path, registry, capsys):
    tables.results_table("demo", "agg.json", ["algorithm", "test_accuracy"])
    bad = {"rows": [{k: v for k, v in AGGREGATED["rows"][0].items() if k != "test_accuracy_std"}]}
    err = _errors(_tree(tmp_path, "<!-- report:demo -->\n<!-- /report:demo -->\n", {"agg.json": bad}), capsys)
    assert "README.md:1" in err and "rows[0] lacks test_accuracy_std" in err


def test_registering_a_name_twice_or_a_bad_name_is_refused(registry):
    tables.scalar("x", "a.json", lambda d: 1)
    with pytest.raises(ValueError, match="twice"):
        tables.scalar("x", "a.json", lambda d: 1)
    with pytest.raises(ValueError, match="letters"):
        tables.scalar("a b", "a.json", lambda d: 1)


def test_number_formats():
    assert tables.span([0.7229, 0.638]) == "0.64-0.72" and tables.span([0.5, 0.5]) == "0.50"
    assert tables.ratio(15.94) == "15.9x" and tables.percent(0.05703) == "5.7 %" and tables.count(8087.1) == "8,087"
    assert tables.nbytes(33857536) == "32.3 MiB" and tables.nbytes(33857536, binary=False) == "33.9 MB"
    assert tables.nbytes(1354301440, unit="MiB") == "1,291.6 MiB"
    assert tables.format_mean_std(0.97, 0.004, 3) == "0.970 ± 0.004 (3 seeds)"
    assert tables.format_mean_std(0.771, None, 1) == "0.771 (1 seed)"  # one seed: the files hold a null std
    assert tables.link_name("100mbit") == "100 Mbit/s" and tables.link_name("10gbit") == "10 Gbit/s"
    assert tables.cell(None) == "-" and tables.cell(123456) == "123,456" and tables.cell(0.5) == "0.500"


def test_every_registered_claim_names_a_table_the_docs_show():
    """`report --check` holds the claims whose tables a page shows to the regime gate: a claim naming a table that
    is not registered, or that no page shows, would never be checked."""
    from experiments import claims

    shown = {p.name for page in report.pages(ROOT)
             for p in report.find_markers(page.read_text(), page.relative_to(ROOT).as_posix())}
    assert claims.CLAIMS, "no claim registered"
    for c in claims.CLAIMS:
        assert c.table in tables.REGISTRY, c
        assert c.table in shown, f"claim {c.name!r}: no page shows table {c.table!r}"
