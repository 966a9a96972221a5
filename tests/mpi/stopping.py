"""What the MPI scripts that test a resume share: a run of the driver stopped by a real SIGTERM mid-run, and the
check that its resumed run ends where one never stopped does.

`interrupted_after(driver, rounds)` patches ``driver.compile_step`` so that every rank sends itself SIGTERM during
round ``rounds``, runs ``train()`` (which must stop with `istjax.launch.driver.Interrupted`, exit code 143, after
that round) and restores the driver. The scripts run as files under mpiexec, so this sits beside them.
"""

import os
import signal


def interrupted_after(driver, rounds: int, train, total: int) -> None:
    """``train()`` stopped by SIGTERM during its round ``rounds`` (of ``total``), on every rank."""
    real_compile = driver.compile_step

    def stopping(run, state):
        step, calls = real_compile(run, state), []

        def wrapped(s, data, split):
            calls.append(1)
            if len(calls) == rounds:
                os.kill(os.getpid(), signal.SIGTERM)
            return step(s, data, split)

        return wrapped

    driver.compile_step = stopping
    try:
        train()
        raise AssertionError("SIGTERM did not stop the run")
    except driver.Interrupted as e:
        assert e.exit_code == 143 and f"stopped after round {rounds} of {total}" in str(e), e
    finally:
        driver.compile_step = real_compile


def resumed_equals_uninterrupted(config, root, rows=None) -> None:
    """The driver on ``config()`` (4 rounds, a checkpoint at the end) twice under ``root``: ``full`` never stopped,
    ``split`` stopped by SIGTERM after round 2 and resumed by the same command; then, on rank 0, both final
    checkpoints (the whole state, every worker's rows gathered) equal bit for bit, at round 4. ``rows(state)``, when
    given, is what must hold all W workers' rows in the checkpoint (asserted by the caller's ``W`` in its shapes)."""
    import pathlib

    import jax
    import numpy as np

    import istjax.launch.driver as driver
    from istjax.launch.checkpoint import Checkpointer
    from istjax.runtimes import mpi as M

    root = pathlib.Path(root)
    driver.train_and_evaluate(config(), root / "full")
    interrupted_after(driver, 2, lambda: driver.train_and_evaluate(config(), root / "split"), 4)
    driver.train_and_evaluate(config(), root / "split")  # the same command resumes from round 2
    M._world().Barrier()
    if M.rank() == 0:
        like = jax.jit(driver.build(config()).algorithm.whole_init)(jax.random.key(0))
        ends = []
        for run in ("full", "split"):
            with Checkpointer(root / run / "checkpoints", enabled=False) as ckpt:
                ends.append(ckpt.restore_latest(like))
        (a, _, step_a), (b, _, step_b) = ends
        assert step_a == step_b == 4, (step_a, step_b)
        if rows is not None:
            rows(a)
        for x, y in zip(jax.tree.leaves((a.params, a.model_state, a.opt_state)),
                        jax.tree.leaves((b.params, b.model_state, b.opt_state))):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    M._world().Barrier()
