"""Smoke tests of the benchmark suite's machinery at tiny sizes (no timed assertions: timings are not tested)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.benchmarks import measure
from experiments.benchmarks import run as bench

TINY = bench.Workload("tiny 8-4-3", input_dim=8, hidden=(4,), num_classes=3, batch=2, local_steps=2)


def test_dense_train_flops_by_hand():
    # Kernels [8, 4] and [4, 3], batch 2. Layer 1: forward 2*2*8*4 = 128, weight grad 128, no input grad -> 256.
    # Layer 2: forward 2*2*4*3 = 48, weight grad 48, input grad 48 -> 144. Total 400.
    assert measure.dense_train_flops([(8, 4), (4, 3)], 2) == 400
    assert measure.dense_train_flops([(8, 4), (4, 3)], 2, first_input_grad=True) == 528


def test_xla_flops_of_a_matmul():
    f = jax.jit(lambda a, b: a @ b)
    flops = measure.xla_flops(f, jnp.ones((3, 5)), jnp.ones((5, 7)))
    assert flops == pytest.approx(2 * 3 * 5 * 7, rel=0.05)


def test_analytic_flops_agree_with_xla_on_the_local_phase():
    pr = bench.prepare(TINY, "ist")
    kernels = bench._worker_kernel_shapes(pr.alg, pr.state.params)
    assert kernels == [(8, 2), (2, 3)]  # W = 2 halves the hidden layer
    one_step = jax.tree.map(lambda x: x[:, :1], pr.batches)
    xla = measure.xla_flops(pr.local, pr.workers, one_step)
    analytic = 2 * measure.dense_train_flops(kernels, TINY.batch)  # W = 2 workers, one step
    assert analytic <= xla  # XLA also counts the elementwise work (BatchNorm, softmax, SGD update)


def test_count_compiles_counts_once_per_shape():
    f = jax.jit(lambda x: x * 2 + 1)
    three, four = np.ones(3, np.float32), np.ones(4, np.float32)  # numpy inputs: making them compiles nothing
    with measure.count_compiles() as log:
        f(three)
        f(three)
        f(four)
    assert log.count == 2
    assert list(log.by_name().values()) == [2]
    with measure.count_compiles() as log:
        f(three)
    assert log.count == 0


def test_interleaved_runs_every_candidate_reps_times():
    calls = []
    t = measure.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, reps=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warmup a, b; then rotating order
    assert len(t["a"].samples) == 3 and t["a"].median >= 0
    with pytest.raises(ValueError, match="reps"):
        measure.interleaved({"a": lambda: None}, reps=0)


def test_tree_bytes_and_memory_stats():
    assert measure.tree_bytes({"a": jnp.zeros((2, 3)), "b": jnp.zeros(4, jnp.int8)}) == 28
    mem = measure.memory_stats(jax.jit(lambda x: x + 1), jnp.zeros((16, 16)))
    assert mem["argument_bytes"] == 1024 and mem["output_bytes"] == 1024
    assert measure.copy_fn()(jnp.arange(3.0)).tolist() == [0.0, 1.0, 2.0]


def test_communication_table_follows_one_over_w():
    rows = bench.communication(TINY, [2, 4], local_steps=TINY.local_steps)
    for r in rows:
        # 2-layer MLP: every kernel partitioned on one axis, so IST moves exactly 1/W of the model each way.
        assert r["ist_fraction_of_model"] == pytest.approx(1 / r["W"])
        assert r["local_sgd_bytes"] == 2 * r["model_bytes"]
        assert r["data_parallel_bytes"] == 2 * r["model_bytes"] * TINY.local_steps


def test_compilation_study_compiles_each_function_once():
    (row,) = bench.compilation(TINY, rounds=3, local_steps=2, algorithms=["ist"])
    assert row["later_round_compilations"] == 0
    assert row["recompiled"] == []
    assert any("round" in k for k in row["by_name"])


@pytest.mark.slow
def test_studies_run_at_tiny_size():
    reps = 1
    # per step and worker: [8, 2] layer 2 passes * 2*2*8*2 = 128, [2, 3] layer 3 passes * 2*2*2*3 = 72; x W=2 x K=2
    assert bench.compute_efficiency(TINY, ["ist"], reps)[0]["flops_analytic"] == 800
    rows = bench.gather_scatter(TINY, [2], reps)
    assert rows[0]["bytes"] == measure.tree_bytes(jax.eval_shape(TINY.task().init, jax.random.key(0)))
    over = bench.round_overhead(TINY, reps)
    assert 0 < over["overhead_share"]
    thr = bench.throughput(TINY, ["ist", "data_parallel"], reps)
    assert [r["algorithm"] for r in thr] == ["ist", "data_parallel"]
    scale = bench.scaling(TINY, [2], local_steps=1, reps=reps)
    assert [r["W"] for r in scale] == [2] and scale[0]["round_s_vs_first"] == 1.0
    text = bench.table("t", thr, ["algorithm", "samples_per_s"])
    assert "data_parallel" in text


def test_precision_study_times_both_dtypes_against_their_own_matmuls():
    rows = bench.precision_speed(TINY, ["ist", "data_parallel"], 1)
    assert [(r["algorithm"], r["dtype"]) for r in rows] == [("ist", "float32"), ("ist", "bfloat16"),
                                                          ("data_parallel", "float32"), ("data_parallel", "bfloat16")]
    assert rows[0]["speedup"] == 1.0 and rows[1]["speedup"] > 0
    assert rows[1]["own_matmuls_gflops"] > 0 and rows[1]["vs_own_matmuls"] > 0 and rows[2]["vs_own_matmuls"] is None
    assert set(bench.cpu_flags()) <= {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


def test_batches_shapes():
    b = TINY.batches(3, 2)
    assert b["x"].shape == (3, 2, 2, 8) and b["y"].shape == (3, 2, 2)
    assert b["y"].dtype == jnp.int32 and np.all(np.asarray(b["y"]) < 3)


def test_phase_matmuls_cost_what_dense_train_flops_counts():
    kernels, W, B = [(8, 4), (4, 3)], 2, 5
    fn, args = measure.phase_matmuls(kernels, W, B)
    assert measure.xla_flops(fn, *args) == pytest.approx(W * measure.dense_train_flops(kernels, B), rel=0.01)
    shapes = [o.shape for o in fn(*args)]  # forward, weight grad; forward, weight grad, input grad
    assert shapes == [(W, B, 4), (W, 8, 4), (W, B, 3), (W, 4, 3), (W, B, 4)]


def test_targets_judge_the_worst_row():
    results = {
        "1_compute_efficiency": {"rows": [{"efficiency_strict": 0.9}, {"efficiency_strict": 0.55}]},
        "3_round_overhead": {"rows": [{"overhead_share_at_K20": 0.05}]},
        "6_compilation": {"rows": [{"later_round_compilations": 0}, {"later_round_compilations": 1}]},
    }
    got = {r["study"]: r for r in bench.targets(results)}
    assert set(got) == {"1_compute_efficiency", "3_round_overhead", "6_compilation"}
    assert got["1_compute_efficiency"]["worst"] == 0.55 and got["1_compute_efficiency"]["met"] == "NO"
    assert got["1_compute_efficiency"]["best"] == 0.9
    assert got["3_round_overhead"]["met"] == "yes"
    assert got["6_compilation"]["worst"] == 1 and got["6_compilation"]["met"] == "NO"


def test_strict_efficiency_uses_the_best_matmul_of_the_study():
    rows = [{"local_gflops": 50.0, "matmul_same_gflops": 80.0, "matmul_square_gflops": 100.0},
            {"local_gflops": 60.0, "matmul_same_gflops": 70.0, "matmul_square_gflops": 120.0}]
    out = bench._strict_efficiency(rows)
    assert [r["efficiency_strict"] for r in out] == [50 / 120, 60 / 120]


def test_matmul_shapes_script_runs(capsys):
    from experiments.benchmarks import matmul_shapes

    rates = matmul_shapes.main(["--workers", "64", "--reps", "1"])  # thin shapes: fast
    assert set(rates) == {"forward", "weight_gradient", "weight_gradient+sgd", "square_2048"}
    assert all(r > 0 for r in rates.values()) and "GFLOP/s" in capsys.readouterr().out


@pytest.mark.slow
def test_conv_yardstick_records_every_conv_of_a_resnet():
    """The conv benchmark's yardstick runs exactly the sub-network's convolutions: stem + 2 per block + one 1x1
    projection per stage that changes width or stride, with the shapes the model runs them at."""
    from experiments.benchmarks.conv import ConvWorkload

    wl = ConvWorkload("tiny", 1 / 16, stage_sizes=(1, 1), batch=2, local_steps=1)
    convs = measure.record_convs(wl.model(), wl.example(), train=False)
    assert len(convs) == 1 + 2 * 2 + 1
    assert convs[0] == ((2, 32, 32, 3), (3, 3, 3, 4), (1, 1))
    assert ((2, 32, 32, 4), (1, 1, 4, 8), (2, 2)) in convs  # stage 1's strided projection
    fn, args = measure.phase_convs(convs, num_workers=2)
    out = jax.block_until_ready(fn(*args))
    assert len(out) == len(convs) and out[0][0].shape == (2, 2, 32, 32, 4)
    assert out[1][2].shape == args[2].shape  # an input gradient, shaped like the conv's input


@pytest.mark.slow
def test_graph_benchmark_runs_at_quick_size(tmp_path):
    """The GIST benchmark end to end at its CI size: every study reports, the targets are computed from them."""
    from experiments.benchmarks import graph

    out = graph.main(["--quick", "--out", str(tmp_path / "g.json")])
    assert {r["W"] for r in out["throughput"]} == {1, 2, 4}
    assert out["throughput"][0]["algorithm"] == "full model" and out["round_overhead"]["W"] == 2
    assert out["aggregation"]["aggregate_vs_copy"] > 0 and len(out["targets"]) == 2
    assert (tmp_path / "g.md").read_text().startswith("GIST benchmarks (quick)")


@pytest.mark.slow
def test_xmc_benchmark_runs_at_quick_size(tmp_path):
    """The extreme-classification benchmark end to end at its CI size: the four goals computed from timings that
    ran and from XLA's buffer assignment (the targets judge the measured ratios; the bag a chunk of slots at a time
    holds less scratch than all slots at once, forward and gradient)."""
    from experiments.benchmarks import xmc

    out = xmc.main(["--quick", "--out", str(tmp_path / "x.json")])
    bag = out["bag"]
    memory = bag["bag_grad_scratch_bytes"] / bag["bag_block_grad_scratch_bytes"]
    assert [t["met"] for t in out["targets"]] == [bag["bag_vs_gather"] >= 0.5, memory <= 0.25,
                                                  out["output"]["phase_vs_matmuls"] >= 0.6,
                                                  out["round_overhead"]["overhead_share_parts"] <= 0.1]
    assert bag["bag_scratch_bytes"] < bag["bag_block_scratch_bytes"]
    assert bag["bag_grad_scratch_bytes"] < bag["bag_block_grad_scratch_bytes"]
    assert out["round_overhead"]["round_s"] > out["round_overhead"]["merge_s"] > 0
    assert (tmp_path / "x.md").read_text().startswith("XMC benchmarks (quick)")


@pytest.mark.slow
def test_transformer_benchmark_runs_at_quick_size(tmp_path):
    """The transformer benchmark end to end at its CI size: the three goals judged from the measured ratios, and
    the per-array yardstick that explains extract + merge beside the copy of one array."""
    from experiments.benchmarks import transformer

    out = transformer.main(["--quick", "--out", str(tmp_path / "t.json")])
    lp, em, ro = out["local"], out["extract_merge"], out["round_overhead"]
    assert [t["met"] for t in out["targets"]] == [lp["phase_vs_matmuls"] >= 0.6, em["extract_merge_vs_copy"] >= 0.5,
                                                  ro["overhead_share_parts"] <= 0.1]
    assert em["leaves"] > 10 and em["copy_leaves_s"] > 0 and ro["round_s"] > ro["merge_s"] > 0
    assert (tmp_path / "t.md").read_text().startswith("Transformer benchmarks (quick)")


def test_loss_split_benchmark_times_the_same_round_with_and_without_it(tmp_path):
    """The loss split's cost at CI size: every row times the same config's round both ways, and its share is
    computed from those two medians."""
    from experiments.benchmarks import loss_split

    out = loss_split.main(["--quick", "--out", str(tmp_path / "s.json")])
    assert [(r["algorithm"], r["W"]) for r in out["rows"]] == [("ist", 2), ("local_sgd", 2)]
    for r in out["rows"]:
        assert r["with_s"] > 0 and r["without_s"] > 0
        assert r["share"] == (r["with_s"] - r["without_s"]) / r["with_s"]
    assert (tmp_path / "s.md").read_text().startswith("The loss split's cost (quick)")


def test_mpi_vs_simulate_and_overhead_share_from_profiled_phases():
    """The MPI goals of study 4: samples/s over the simulate row of the same algorithm and W, and the largest share
    of a rank's profiled round outside the local steps and the exchanges."""
    from experiments.benchmarks import run as suite

    rows = [{"algorithm": "ist", "backend": "simulate", "W": 2, "samples_per_s": 100.0},
            {"algorithm": "ist", "backend": "mpi x2", "W": 2, "samples_per_s": 80.0,
             "phases_by_rank": [{"batches": 0.1, "distribute": 0.2, "scatter": 0.1, "local": 1.4, "gather": 0.1,
                                 "collect": 0.1, "metrics": 0.0},
                                {"batches": 0.1, "distribute": 0.0, "scatter": 0.4, "local": 1.4, "gather": 0.1,
                                 "collect": 0.0, "metrics": 0.0}]},
            {"algorithm": "local_sgd", "backend": "mpi x2", "W": 2, "samples_per_s": 50.0}]
    out = suite.mpi_vs_simulate(rows)
    assert out[1]["vs_simulate"] == pytest.approx(0.8) and out[2]["vs_simulate"] is None
    assert out[1]["overhead_share"] == pytest.approx(0.4 / 2.0)  # rank 0: batches + distribute + collect
    assert out[1]["local_share"] == pytest.approx(1.4 / 2.0)
    got = suite.targets({"4_throughput": {"rows": out}})
    assert [t["met"] for t in got] == ["NO", "NO"]
