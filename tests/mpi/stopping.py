"""What the MPI scripts that test a resume share: a run of the driver stopped by a real SIGTERM mid-run.

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

        def wrapped(s, data):
            calls.append(1)
            if len(calls) == rounds:
                os.kill(os.getpid(), signal.SIGTERM)
            return step(s, data)

        return wrapped

    driver.compile_step = stopping
    try:
        train()
        raise AssertionError("SIGTERM did not stop the run")
    except driver.Interrupted as e:
        assert e.exit_code == 143 and f"stopped after round {rounds} of {total}" in str(e), e
    finally:
        driver.compile_step = real_compile
