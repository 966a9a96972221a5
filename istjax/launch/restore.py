"""A saved run rebuilt without training: `restore_run` gives its own config, its experiment and the state of its
newest checkpoint that verifies (or of a chosen step) on one process; `evaluate_run` evaluates it (``istjax eval``).
A checkpoint that does not fit the run's config is refused as a config problem, never taken for damage.
"""

from __future__ import annotations

import contextlib
import pathlib
from typing import Any, Optional

import jax

import istjax.launch.config as config_lib
from istjax.algorithms.base import whole_state_init
from istjax.launch import workdir as workdir_lib
from istjax.launch.checkpoint import Checkpointer, CheckpointMismatch
from istjax.launch.config import ConfigError, build
from istjax.launch.evaluator import make_evaluator

__all__ = ["evaluate_run", "restore_run"]


def restore_run(workdir: str | pathlib.Path, *, checkpoint: Optional[int] = None,
                model_module: Optional[str] = None):
    """A saved run rebuilt on one process: ``(config, experiment, state, step)`` from its own config and its newest
    checkpoint that verifies (or step ``checkpoint``). ``model_module`` names the model's class for a run whose
    config does not record ``model.module``.

    Raises:
      ConfigError: no run in ``workdir``, or no usable checkpoint (naming what was found).
    """
    workdir = pathlib.Path(workdir).absolute()
    config = config_lib.load_run_config(workdir)
    # The state is whole in a checkpoint; evaluation needs no workers: the default runtime, with none of the run's
    # runtime options (the MPI mode it trained in).
    config.runtime = config_lib.default_config().runtime
    if model_module:
        with config.model.unlocked():
            config.model.module = model_module
    experiment = build(config)
    task, algorithm = experiment.task, experiment.algorithm
    like = jax.jit(whole_state_init(algorithm))(jax.random.key(int(config.seed)))
    recorded = config_lib.to_dict(config_lib.load_run_config(workdir))  # with the run's own runtime
    with Checkpointer(workdir / "checkpoints", enabled=False) as ckpt, _refused_mismatch(recorded, workdir):
        steps = ckpt.steps()
        if not steps:
            raise ConfigError([f"workdir={str(workdir)!r} holds no checkpoint to evaluate."])
        if checkpoint is None:
            restored = ckpt.restore_latest(like)
            if restored is None:
                raise ConfigError([f"no checkpoint in {ckpt.directory} verifies (steps {steps})."])
            state, _, step = restored
        elif checkpoint not in steps:
            raise ConfigError([f"checkpoint={checkpoint}: {ckpt.directory} holds steps {steps}; pick one of them."])
        else:
            try:
                state, _ = ckpt.restore(checkpoint, like)
            except CheckpointMismatch:
                raise  # a config problem (`_refused_mismatch`), not damage
            except Exception as e:  # noqa: BLE001 - damaged or unverified: say which and why, in one line
                raise ConfigError([f"checkpoint {ckpt.directory / str(checkpoint)} does not restore or verify "
                                   f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})."]) from e
            step = checkpoint
    return config, experiment, state, step


@contextlib.contextmanager
def _refused_mismatch(config_dict: dict, workdir: pathlib.Path):
    """A checkpoint that does not fit the run's config, refused as a config problem (`restore_run`)."""
    try:
        yield
    except CheckpointMismatch as e:
        raise workdir_lib.mismatch_refusal(e, config_dict, workdir) from None


def evaluate_run(workdir: str | pathlib.Path, *, checkpoint: Optional[int] = None,
                 model_module: Optional[str] = None) -> dict[str, Any]:
    """Evaluates a saved run without training (`restore_run`): its own config, its newest checkpoint that verifies
    (or step ``checkpoint``), on one process. Returns ``{"round", "checkpoint", test/train loss and accuracy}``.

    Raises:
      ConfigError: no run in ``workdir``, or no usable checkpoint (naming what was found).
    """
    workdir = pathlib.Path(workdir).absolute()
    config, experiment, state, step = restore_run(workdir, checkpoint=checkpoint, model_module=model_module)
    evaluate = make_evaluator(experiment.task, experiment.dataset, batch_size=int(config.eval_batch_size),
                              train_examples=int(config.eval_train_examples), drift=experiment.drift)
    return {"round": int(jax.device_get(state.round)), "checkpoint": str(workdir / "checkpoints" / str(step)),
            **evaluate(state)}
