"""The protocols' studies (issue 59, designed, not yet run): every cell loads as a config of the algorithm it names,
every arm tunes the same rates (ADMM its rho too, codistillation its weight), and IST trains the rounds that put it
at local SGD's bytes."""

from experiments.grid import REPO
from experiments.protocols import study
from istjax.launch.study import plan


def test_every_cell_loads_and_every_arm_tunes_the_same_rates():
    for name in study.STUDIES:
        cells = study.cells(name)
        for c, p in zip(cells, plan(cells, [0], "/nonexistent", root=REPO)):
            assert p.config.algorithm.name == c.info["algorithm"] and p.config.model.hidden == (study.HIDDEN,)
            grid = study.grid(c)
            assert grid["learning_rate"] == study.LEARNING_RATES
            assert "algorithm.optimizer_state" not in grid  # plain SGD: no state to restart or carry
            if c.info["algorithm"] == "admm":
                assert grid["algorithm.rho"] == study.RHOS
            if c.info["algorithm"] == "dynamic_averaging":
                assert p.config.num_workers == 8 and p.config.algorithm.delta == c.info["delta"]


def test_dynamic_compares_periodic_averaging_with_every_delta_and_ist_trains_to_equal_bytes():
    dynamic, drift = study.cells("dynamic"), study.cells("drift")
    assert [c.info["delta"] for c in dynamic] == [c.info["delta"] for c in drift] == [0.0, *study.DELTAS]
    assert [c.label for c in dynamic] == [c.label for c in drift]
    drifting = plan(drift, [0], "/nonexistent", root=REPO)
    assert all(p.config.data.drift_round == study.DRIFT_ROUND < p.config.num_rounds for p in drifting)
    assert all(p.config.data.drift_round == 0 for p in plan(dynamic, [0], "/nonexistent", root=REPO))
    import istjax.launch.driver as driver

    planned = {p.cell.label: p.config for p in plan(study.cells("admm"), [0], "/nonexistent", root=REPO)}
    rounds = {label: config.num_rounds for label, config in planned.items()}
    assert rounds["ist"] == study.IST_ROUNDS_FACTOR * rounds["local_sgd"] == study.IST_ROUNDS_FACTOR * rounds["admm"]
    sent = {label: driver.build(planned[label]).algorithm.comm.sent for label in ("ist", "local_sgd", "admm")}
    assert sent["local_sgd"] == sent["admm"] == study.IST_ROUNDS_FACTOR * sent["ist"]  # equal bytes in all
