"""Codistillation (Anil et al. 2018, "Large Scale Distributed Neural Network Training Through Online Distillation"):
groups of workers that talk only through each other's predictions.

The W workers form ``groups`` groups of ``R = W / groups`` replicas. Each group trains its own model as local SGD
does (its replicas start a round from it, take K steps, and their mean is its new model; one replica a group: it
trains alone). After ``burn_in`` rounds, each step's loss adds ``distill_weight`` times the distillation term

    ``KL(teacher || student)``, the teacher the mean of the other groups' predicted distributions,

the paper's cross-entropy against the teachers' average up to the teachers' own entropy, which has no gradient
(`distillation_term`). The other groups' models are *stale copies*: every ``teacher_every`` rounds each group's model
is sent to every other group, and until the next exchange the teachers are those copies (their predictions in test
mode, their running statistics). So a worker moves its replica to its group's mean and back each round (none when
``R = 1``), and on an exchange round receives ``groups - 1`` models and, for the first replica of each group, sends
its group's one; `round_metrics` counts both per worker as ``measured_bytes_sent`` / ``_received``.

State: the global ``opt_state`` is `CodistillState` (every group's model, the teachers' copies, the round they were
taken), checkpointed with the rest; the global ``params`` and ``model_state`` are group 0's model (what an
evaluation reads; the other groups' are in the state). With ``distill_weight = 0`` the groups never interact: each
is local SGD over its own replicas.

Under MPI the round runs as the ``groups`` exchange from the pieces `_groups` gives (`istjax.runtimes.mpi.groups`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import Algorithm, Groups, bind, check_common, local_train
from istjax.core.comm import CommBytes, Exchange, tree_bytes
from istjax.core.errors import ArgError
from istjax.core.state import WORKERS, RoundPlan, TrainState, WorkerState, round_keys, worker_init
from istjax.core.task import Task, scored

__all__ = ["Codistill", "CodistillState", "codistillation", "distillation_term"]


class Codistill(NamedTuple):
    """Codistillation's declaration (`istjax.Algorithm.protocol`), what the reference loop reads: ``groups``, the
    distillation term's ``weight``, ``teacher_every`` and ``burn_in`` (rounds)."""

    groups: int
    weight: float
    teacher_every: int
    burn_in: int


class CodistillState(NamedTuple):
    """Codistillation's global ``opt_state``.

    Attributes:
      groups: every group's model, ``(params, model_state)`` with leaves `[G, ...]`.
      teachers: the copies of the groups' models taken at the last exchange, the same layout.
      taken: `[]` int32, the round (rounds completed) at which the teachers were taken.
    """

    groups: Any
    teachers: Any
    taken: jax.Array


def distillation_term(student_logits: jax.Array, teacher_probs: jax.Array) -> jax.Array:
    """The mean over examples of ``KL(teacher || softmax(student_logits))``, `[B, C]` each; its gradient in the
    logits is ``(softmax(student) - teacher) / B``."""
    log_student = jax.nn.log_softmax(student_logits.astype(jnp.float32), axis=-1)
    teacher = teacher_probs.astype(jnp.float32)
    return jnp.mean(jnp.sum(teacher * (jnp.log(jnp.maximum(teacher, 1e-30)) - log_student), axis=-1))


def _check(task: Task, num_workers: int, groups: Any, distill_weight: Any, teacher_every: Any, burn_in: Any) -> None:
    if task.logits is None or task.score is None:
        raise ArgError("task", task, "codistillation adds a term on the model's predictions, but this task gives none "
                       "(task.logits);", "build it with istjax.classifier(model, data).")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 2 or num_workers % groups:
        raise ArgError("groups", groups, f"groups={groups!r}: need an integer >= 2 that divides num_workers="
                       f"{num_workers} (each group W / groups replicas);", ("e.g.", {"groups": 2}, "."))
    if isinstance(distill_weight, bool) or not isinstance(distill_weight, (int, float)) or not distill_weight >= 0:
        raise ArgError("distill_weight", distill_weight, f"distill_weight={distill_weight!r}: need a number >= 0 "
                       f"(0: independent groups);", ("e.g.", {"distill_weight": 1.0}, "."))
    for name, v, low in (("teacher_every", teacher_every, 1), ("burn_in", burn_in, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ArgError(name, v, f"{name}={v!r}: need an integer >= {low} (rounds);", ("e.g.", {name: 1 + low}, "."))


def codistillation(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                   groups: int = 2, distill_weight: float = 1.0, teacher_every: int = 1, burn_in: int = 0,
                   backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """Codistillation (module docstring): ``groups`` groups of ``num_workers / groups`` replicas, each group's loss
    plus ``distill_weight`` times the distillation term against the other groups' stale copies, exchanged every
    ``teacher_every`` rounds, from round ``burn_in`` on."""
    check_common(task, num_workers, local_steps, "reset", "carry")
    _check(task, num_workers, groups, distill_weight, teacher_every, burn_in)
    replicas = num_workers // groups
    pieces = _groups(groups, replicas, teacher_every)
    key0 = jax.random.key(0)
    model_bytes = tree_bytes((jax.eval_shape(task.init, key0), jax.eval_shape(task.init_state, key0)))

    def init(key):
        keys = jax.random.split(key, groups + 1)
        params = jax.vmap(task.init)(keys[1:])  # each group its own initialisation
        model = (params, jax.vmap(task.init_state)(keys[1:]))
        first = jax.tree.map(lambda v: v[0], model)
        return TrainState(first[0], first[1], CodistillState(model, model, jnp.zeros((), jnp.int32)), keys[0],
                          jnp.zeros((), jnp.int32))

    def distribute(state):
        params, model_state = jax.tree.map(lambda v: jnp.repeat(v, replicas, axis=0), state.opt_state.groups)
        on = jnp.broadcast_to(state.round >= burn_in, (num_workers,))
        own = jnp.arange(num_workers, dtype=jnp.int32) // replicas
        teachers = jax.tree.map(lambda v: jnp.broadcast_to(v, (num_workers, *v.shape)), state.opt_state.teachers)
        opt = (worker_init(optimizer, params, state.round), teachers, own, on)
        return WorkerState(params, model_state, opt), RoundPlan(round_keys(state.key)[0], None)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # groups talk only between rounds
        del axis_name, reduce
        inner, teachers, own, on = worker.opt_state
        loss = _distilled_loss(task, teachers, own, jnp.where(on, float(distill_weight), 0.0))
        trained, metrics = local_train(loss, optimizer, worker._replace(opt_state=inner), batches_K, shared)
        return trained._replace(opt_state=(trained.opt_state, teachers, own, on)), metrics

    def collect(state, workers, plan, batches=None, shared=None):
        del plan, batches, shared
        mean = lambda v: jnp.mean(v.reshape(groups, replicas, *v.shape[1:]).astype(jnp.float32),  # noqa: E731
                                  axis=1).astype(v.dtype)
        return pieces.settle(state, jax.tree.map(mean, (workers.params, workers.model_state)))

    def metrics(old, new):
        exchanged = (new.opt_state.taken == new.round).astype(jnp.float32)
        lead = (jnp.arange(num_workers) % replicas == 0).astype(jnp.float32)
        within = float(model_bytes if replicas > 1 else 0)
        return {"measured_bytes_sent": within + exchanged * lead * model_bytes,
                "measured_bytes_received": within + exchanged * (groups - 1) * model_bytes * jnp.ones(num_workers),
                "teachers_exchanged": exchanged}

    most = CommBytes(received=model_bytes * (groups - 1 + (replicas > 1)), sent=model_bytes * (1 + (replicas > 1)))
    algorithm = Algorithm(init=init, round=None, distribute=distribute, local=local, collect=collect,
                          name="codistillation", num_workers=num_workers, local_steps=local_steps, comm=most, task=task,
                          optimizer=optimizer, exchange=Exchange.GROUPS, whole_init=init, round_metrics=metrics, groups=pieces,
                          protocol=Codistill(groups, float(distill_weight), teacher_every, burn_in),
                          collect_reads_workers=True)
    return bind(algorithm, backend, **backend_options)


def _groups(groups: int, replicas: int, teacher_every: int) -> Groups:
    """Codistillation's round in the pieces the MPI ``groups`` exchange runs (`istjax.algorithms.base.Groups`)."""

    def settle(state, model_G):  # the teachers retaken on an exchange round; group 0's model the global one
        done = state.round + 1
        exchange = done % teacher_every == 0
        old = state.opt_state
        teachers = jax.tree.map(lambda new, t: jnp.where(exchange, new, t), model_G, old.teachers)
        new = CodistillState(model_G, teachers, jnp.where(exchange, done, old.taken))
        return whole(state._replace(key=round_keys(state.key)[0], round=done, opt_state=new), model_G)

    def whole(state, model_G):
        first = jax.tree.map(lambda v: v[0], model_G)
        return state._replace(params=first[0], model_state=first[1],
                              opt_state=state.opt_state._replace(groups=model_G))

    return Groups(groups, replicas, lambda done: done % teacher_every == 0, lambda state: state.opt_state.groups,
                  settle, whole)


def _distilled_loss(task: Task, teachers: Any, own: jax.Array, weight: jax.Array):
    """``(params, model_state, batch, shared) -> (loss, (aux, model_state))``: the task's loss on the student's
    predictions plus ``weight`` times the distillation term against the mean of the other groups' (``teachers``,
    `[G, ...]`; group ``own`` left out) predicted distributions; ``aux`` gains ``distill``, the term."""

    def loss(params, model_state, batch, shared=None):
        logits, new_state = task.logits(params, model_state, batch, shared, train=True)
        value, aux = scored(task.score, logits, batch)
        teacher_logits = jax.vmap(lambda p, s: task.logits(p, s, batch, shared, train=False)[0])(*teachers)
        probs = jax.nn.softmax(jax.lax.stop_gradient(teacher_logits).astype(jnp.float32), axis=-1)  # [G, B, C]
        others = (jnp.arange(probs.shape[0]) != own).astype(jnp.float32)
        teacher = jnp.tensordot(others / jnp.sum(others), probs, axes=1)
        term = distillation_term(logits, teacher)
        return value + weight * term, ({**aux, "distill": term}, new_state)

    return loss
