"""The pieces a config names, each made by the library call it stands for: the optimizer (optax), the sampler
(`istjax.core.partition.SAMPLERS`), the dataset (`istjax.data`) and the task (`istjax.models`, `istjax.classifier`).
Each raises the library's own error; `istjax.launch.config.build` reports it in the config's terms."""

from __future__ import annotations

import ml_collections

from istjax.core.partition import SAMPLERS
from istjax.data.cluster_batches import clustered
from istjax.launch.config.fields import OPTIMIZERS, data_module, model_fields, model_module

__all__ = ["make_optimizer", "scaled_learning_rate", "schedule_rounds", "make_sampler", "record_sources", "load_config_data", "make_task"]


def make_optimizer(config: ml_collections.ConfigDict):
    """The optax transformation the config names (validated values assumed): the optimizer at the config's rate (the
    linear scaling rule's, `scaled_learning_rate`), with L2 weight decay (`_OPTIMIZERS`), and the round-counted
    learning-rate schedule (`istjax.core.schedule.round_scheduled`) unless it is constant."""
    from istjax.core.schedule import make_schedule, round_scheduled

    if config.optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer={config.optimizer!r}: choose one of {OPTIMIZERS}.")
    opt = _OPTIMIZERS[config.optimizer](config, scaled_learning_rate(config), float(config.weight_decay))
    schedule = make_schedule(config.lr_schedule, num_rounds=schedule_rounds(config),
                             decay_at=tuple(config.lr_decay_at), factor=float(config.lr_decay_factor),
                             warmup_rounds=int(config.warmup_rounds))
    return opt if schedule is None else round_scheduled(opt, schedule)


def scaled_learning_rate(config: ml_collections.ConfigDict) -> float:
    """``learning_rate``, or under the linear scaling rule (``lr_reference_batch > 0``) ``learning_rate`` times the
    examples one optimizer step reads over ``lr_reference_batch``: ``W * B`` when the algorithm averages every step's
    gradients over its workers (`istjax.algorithms.AlgorithmEntry.averages_steps`), ``B`` otherwise.

    >>> from istjax.launch.config import default_config
    >>> c = default_config(); c.algorithm.name = "data_parallel"; c.num_workers, c.batch_size = 4, 32
    >>> c.learning_rate, c.lr_reference_batch = 0.1, 32
    >>> round(scaled_learning_rate(c), 6)
    0.4
    """
    from istjax.algorithms import ALGORITHMS

    lr, reference = float(config.learning_rate), int(config.lr_reference_batch)
    if not reference:
        return lr
    entry = ALGORITHMS.get(config.algorithm.name)
    step = int(config.batch_size) * (int(config.num_workers) if entry.averages_steps else 1)
    return lr * step / reference


def _matrices(params):
    """True for the leaves LARS and LAMB scale and decay (kernels, embeddings); biases and norms (vectors) excluded."""
    import jax

    return jax.tree.map(lambda p: p.ndim > 1, params)


def _decayed(opt, weight_decay: float):
    """``opt`` after L2 weight decay added to the gradients (as torch's SGD ``weight_decay``)."""
    import optax

    return optax.chain(optax.add_decayed_weights(weight_decay), opt) if weight_decay else opt


def _lars(config, lr: float, weight_decay: float):
    import optax

    return optax.lars(lr, weight_decay=weight_decay, weight_decay_mask=_matrices,
                      trust_coefficient=float(config.trust_coefficient) or LARS_TRUST, trust_ratio_mask=_matrices,
                      momentum=float(config.momentum))


def _lamb(config, lr: float, weight_decay: float):
    """optax.lamb's chain (Adam's step at its eps 1e-6, decoupled decay, the trust ratio, the rate) with the trust
    coefficient exposed and vectors left unscaled."""
    import optax

    return optax.chain(optax.scale_by_adam(eps=1e-6), optax.add_decayed_weights(weight_decay, _matrices),
                       optax.masked(optax.scale_by_trust_ratio(
                           trust_coefficient=float(config.trust_coefficient) or LAMB_TRUST), _matrices),
                       optax.scale_by_learning_rate(lr))


def _plain(name: str):
    def build(config, lr: float, weight_decay: float):
        import optax

        opt = {"sgd": lambda: optax.sgd(lr), "momentum": lambda: optax.sgd(lr, momentum=float(config.momentum)),
               "adam": lambda: optax.adam(lr)}[name]()
        return _decayed(opt, weight_decay)

    return build


#: The published trust coefficients (You et al. 2017's LARS, 2020's LAMB): ``trust_coefficient = 0`` takes them.
LARS_TRUST, LAMB_TRUST = 0.001, 1.0

#: Each config ``optimizer``'s builder ``(config, learning_rate, weight_decay) -> optax.GradientTransformation``.
_OPTIMIZERS = {**{name: _plain(name) for name in ("sgd", "momentum", "adam")}, "lars": _lars, "lamb": _lamb}
assert tuple(_OPTIMIZERS) == OPTIMIZERS, "every config optimizer has its builder"


def schedule_rounds(config) -> int:
    """The learning-rate schedule's length in rounds: ``lr_schedule_rounds``, or ``num_rounds`` when it is 0."""
    return int(config.lr_schedule_rounds) or int(config.num_rounds)


def _one_sampler(name: str, args):
    return SAMPLERS.get(name).build(args)


def make_sampler(config: ml_collections.ConfigDict):
    """The `istjax.Sampler` the config names: ``sampler.name`` for every group, `istjax.per_group` where
    ``sampler.groups`` names groups (raises ValueError naming the field for bad arguments)."""
    from istjax.core import partition

    default = _one_sampler(config.sampler.name, config.sampler)
    if not len(config.sampler.groups):
        return default
    return partition.per_group({g: _one_sampler(s, config.sampler) for g, s in config.sampler.groups.items()},
                               default=default)


def record_sources(config: ml_collections.ConfigDict) -> None:
    """Sets ``model.module`` and ``data.module`` to where the model's class and the data's function load from again
    (absolute file paths), so the run's config.json is enough for ``--resume``, ``eval``, ``compare`` and ``plot``
    in a fresh process from any folder."""
    _record_model_source(config)
    _record_data_source(config)


def _record_model_source(config: ml_collections.ConfigDict) -> None:
    """Sets ``model.module`` to where the model's class can be loaded again (an absolute file path), so the run's
    config.json is enough for `--resume` and `istjax eval` in a fresh process (`istjax.models.model_source`)."""
    import istjax.models as models

    try:
        source = models.model_source(config.model.name, model_module(config))
    except (ValueError, TypeError):
        return  # reported by the model check
    if source != model_module(config):
        with config.model.unlocked():
            config.model.module = source


def _record_data_source(config: ml_collections.ConfigDict) -> None:
    """Sets ``data.module`` to its file's absolute path, so the run's config.json loads the data again from any
    folder (`istjax.core.user_code.absolute`)."""
    from istjax.core.user_code import absolute

    spec = data_module(config)
    if spec and isinstance(spec, str) and absolute(spec) != spec:
        config.data.module = absolute(spec)


def load_config_data(config: ml_collections.ConfigDict):
    """The dataset the config names: a built-in loader's (``data.name``) or your function's (``data.module``), with
    ``data.kwargs``; with ``data.tuning_fraction`` > 0, its training split's tail as the evaluated split and the
    reported split unread (`istjax.data.tuning.tuning_split`). Raises ValueError naming the field and the fix."""
    import istjax.data as data_lib
    from istjax.data.tuning import tuning_split

    kwargs = dict(config.data.kwargs)
    if data_module(config):
        data = data_lib.load_module_dataset(data_module(config), **kwargs)._replace(name=str(config.data.name))
    else:
        data = data_lib.load_dataset(config.data.name, **kwargs)
    return tuning_split(data, config.data.get("tuning_fraction", 0.0))


def _check_sparse(config, dataset, model) -> None:
    """Sparse multi-label data (``Dataset.num_feature_ids``) needs a model that reads ``(id, value)`` pairs and
    scores label sets (``scores`` in the model contract), and such a model needs such data."""
    from istjax.core import contract
    from istjax.core.errors import ArgError

    sparse_model = hasattr(model, "num_features") and contract.scores(model) is not None
    if dataset.num_feature_ids is not None and not sparse_model:
        raise ArgError("name", config.model.name,
                       f"data.name={config.data.name!r} is sparse multi-label data ((feature id, value) pairs and label "
                       f"sets), which model.name={config.model.name!r} does not read;",
                       "use --config.model.name=sparse_mlp.")
    if dataset.num_feature_ids is None and sparse_model:
        raise ArgError("name", config.model.name,
                       f"model.name={config.model.name!r} reads sparse multi-label data, but data.name="
                       f"{config.data.name!r} is dense;", "use --config.data.name=xmc_synthetic or xmc_debian_deps, or "
                       "--config.data.name=xmc --config.data.kwargs.path=<your XMC folder>.")


def make_task(config: ml_collections.ConfigDict, dataset, model=None):
    """The `istjax.Task` of the config's model (``model`` when it is built already) on ``dataset`` (nothing is
    compiled: shapes come from eval_shape)."""
    import jax.numpy as jnp

    from istjax.core.task import classifier
    from istjax.models import build_model

    if model is None:
        model = build_model(config.model.name, model_fields(config), num_classes=int(dataset.num_classes),
                            module=model_module(config), num_feature_ids=dataset.num_feature_ids,
                            label_weights=dataset.label_weights, compute_dtype=config.compute_dtype)
    _check_sparse(config, dataset, model)
    if clustered(dataset.shared):
        from istjax.graph.task import cluster_classifier

        return cluster_classifier(model, dataset.shared, num_classes=int(dataset.num_classes))
    return classifier(model, jnp.asarray(dataset.train_x[:2]), example_shared=dataset.shared,
                      num_classes=int(dataset.num_classes))
