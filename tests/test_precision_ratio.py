"""The bfloat16 / float32 speed ratio of benchmark study 8, repetition by repetition (issue 55): the paired ratios,
their median and range on hand-made timings, and how the pages write them."""

import pytest

from experiments.benchmarks import dp_bfloat16, measure
from experiments import tables
from experiments.precision import report


def _t(*seconds):
    return measure.Timing(tuple(seconds))


def test_paired_ratio_pairs_repetition_r_with_repetition_r():
    # float32 1.0, 2.0 (a loaded repetition), 1.2 s; bfloat16 beside each: 0.8, 1.6, 1.0 s.
    f32, bf16 = _t(1.0, 2.0, 1.2), _t(0.8, 1.6, 1.0)
    got = measure.paired_ratio(f32, bf16)
    assert got["per_rep"] == pytest.approx([1.25, 1.25, 1.2])
    assert got["median"] == pytest.approx(1.25) and got["reps"] == 3
    assert (got["min"], got["max"]) == (pytest.approx(1.2), pytest.approx(1.25))
    # The ratio of medians pairs repetitions that did not run together: 1.2 / 1.0, not what any pair measured.
    assert f32.median / bf16.median == pytest.approx(1.2)


def test_paired_ratio_median_of_an_even_count_and_its_range():
    got = measure.paired_ratio(_t(1.0, 1.0, 1.0, 1.0), _t(0.5, 1.0, 0.8, 2.0))
    assert sorted(got["per_rep"]) == pytest.approx([0.5, 1.0, 1.25, 2.0])
    assert got["median"] == pytest.approx((1.0 + 1.25) / 2)
    assert (got["min"], got["max"]) == (pytest.approx(0.5), pytest.approx(2.0))


def test_paired_ratio_refuses_timings_of_different_lengths():
    with pytest.raises(ValueError, match="2 and 3 repetitions"):
        measure.paired_ratio(_t(1.0, 1.0), _t(1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="0 and 0"):
        measure.paired_ratio(_t(), _t())


def test_pages_write_median_range_and_repetitions():
    assert report.paired(1.2345, 1.111, 1.27, 7) == "1.23x (range 1.11-1.27, 7 reps)"


def _results(dp_turn_wg=0.5):
    """A study-8 results file by hand: IST and data parallel, 3 repetitions each, data parallel's pieces."""
    def row(alg, dtype, f32, bf16):
        paired = measure.paired_ratio(_t(*f32), _t(*bf16))
        return {"algorithm": alg, "dtype": dtype, "W": 2, "K": 20, "reps": 3, "local_s": 1.0, "local_gflops": 100.0,
                "speedup": paired["median"], "speedup_min": paired["min"], "speedup_max": paired["max"]}
    t = {"forward/float32": [0.30] * 3, "forward/bfloat16 in turn": [0.20] * 3, "forward/bfloat16 all rows": [0.18] * 3,
         "weight_grad/float32": [0.40] * 3, "weight_grad/bfloat16 in turn": [dp_turn_wg] * 3,
         "weight_grad/bfloat16 all rows": [0.30] * 3, "convert_kernel": [0.10] * 3}
    summed = {form: _t(*map(sum, zip(*(t[p] for p in parts)))) for form, parts in dp_bfloat16.STEPS.items()}
    pieces = {"kernel": [4096, 4096], "W": 2, "B": 128, "reps": 3, "pieces": {n: v[0] for n, v in t.items()},
              "steps": {f: {"seconds": s.median, "speed_vs_float32": measure.paired_ratio(summed["float32"], s)}
                        for f, s in summed.items()}}
    dp = row("data_parallel", "bfloat16", (1.0, 1.1, 1.2), (1.2, 1.1, 1.3))
    return {"results": {"8_precision": {"rows": [row("ist", "bfloat16", (1.0, 1.5, 1.2), (0.8, 1.0, 1.0)),
                                                 {**dp, "pieces": pieces}]}}}


def test_scalars_render_the_paired_median_and_range_from_the_file():
    d = _results()
    ist = tables.REGISTRY["precision_speedup"].render(d)
    assert ist == "1.25x (range 1.20-1.50, 3 reps)"  # ratios 1.25, 1.5, 1.2
    assert tables.REGISTRY["precision_dp_speedup"].render(d) == "0.92x (range 0.83-1.00, 3 reps)"


def test_data_parallel_reason_follows_the_pieces():
    # float32 step 0.30 + 0.40 = 0.70 s; bfloat16 in turn 0.20 + 0.50 + 0.10 = 0.80 s: 0.875x, the step loses.
    text = report.dp_reason(_results())
    assert "0.88x (range 0.88-0.88, 3 reps) their float32 speed, so the step loses" in text
    assert "2 products over 128 rows" in text and "500.0 ms against 400.0 ms" in text
    assert "all 256 rows at once would run at 1.21x" in text  # 0.70 / (0.18 + 0.30 + 0.10)
    # A weight gradient in turn cheap enough: the step gains, and the page says so.
    assert "so the step gains" in report.dp_reason(_results(dp_turn_wg=0.3))


def test_data_parallel_pieces_time_the_same_products_in_each_form():
    """The forms `dp_bfloat16.pieces` times compute one product each way: equal to float32's within bfloat16's
    rounding (the weight gradient summed over both workers' rows), and the study records every form."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    x, dy, k = (rng.standard_normal(s, np.float32) for s in ((2, 3, 8), (2, 3, 4), (8, 4)))
    bf = {n: jnp.asarray(a, jnp.bfloat16) for n, a in (("x", x), ("dy", dy), ("k", k))}
    f = {name: fn for name, (fn, _) in dp_bfloat16.FORMS.items()}
    forward, grad = np.einsum("wbi,io->wbo", x, k), np.einsum("wbi,wbo->io", x, dy)
    for name in ("forward/bfloat16 in turn", "forward/bfloat16 all rows"):
        np.testing.assert_allclose(np.asarray(f[name](bf["x"], bf["k"]), np.float32), forward, rtol=0.05, atol=0.05)
    for name in ("weight_grad/bfloat16 in turn", "weight_grad/bfloat16 all rows"):
        np.testing.assert_allclose(np.asarray(f[name](bf["x"], bf["dy"])), grad, rtol=0.05, atol=0.05)
    np.testing.assert_allclose(np.asarray(f["weight_grad/float32"](x, dy)), grad, rtol=1e-5)
    out = dp_bfloat16.pieces((8, 4), 2, 3, reps=2)
    assert set(out["pieces"]) == set(dp_bfloat16.FORMS) and set(out["steps"]) == set(dp_bfloat16.STEPS)
    assert out["steps"]["float32"]["speed_vs_float32"]["per_rep"] == [1.0, 1.0]
    assert out["steps"]["bfloat16 in turn"]["speed_vs_float32"]["reps"] == 2


def test_the_accuracy_table_shows_each_data_sets_linear_model_and_refuses_a_file_without(monkeypatch):
    from experiments.precision import studies as precision_studies

    rows = [{"label": "speech_ist_float32", "data": "speech", "algorithm": "ist", "precision": "float32",
             "seeds": [0], "test_accuracy_mean": 0.9, "test_accuracy_std": None, "bytes_per_worker_per_round": 10}]
    runs = [{"label": "speech_ist_float32", "seed": 0, "test_accuracy": 0.9}]
    monkeypatch.setattr(report, "DATA", {"speech": "speech MLP"})
    doc = {"rows": rows, "runs": runs, "baselines": {"speech linear": {"test_accuracy": 0.95}}}
    table = report.accuracy(doc)
    assert "| speech MLP | linear (trivial baseline) | - | 0.950 | - | - | - |" in table
    with pytest.raises(tables.ResultsError, match="--baselines"):
        report.accuracy({"rows": rows, "runs": runs})
    # --baselines: one linear model per data set, from that data set's first cell
    seen = []
    monkeypatch.setattr(precision_studies, "cell_baselines",
                        lambda c: seen.append(c.label) or {"baselines": {"linear": {"test_accuracy": len(seen)}}})
    got = precision_studies.data_baselines()["baselines"]
    assert list(got) == [f"{d} linear" for d in precision_studies.DATASETS]
    assert seen == [f"{d}_ist_float32" for d in precision_studies.DATASETS]
