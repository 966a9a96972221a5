"""Run configurations: every field `istjax.launch.driver.train_and_evaluate` reads, its default, its schema check,
and what it builds.

A configuration is an ml_collections `ConfigDict` (the Flax-examples convention): experiment files under
``experiments/configs/`` define ``get_config()``, start from `default_config()` and override a few fields; the
command line overrides any field with ``--config.FIELD=VALUE``. This package's ``__init__`` is itself a valid config
file (it has `get_config`), which is how ``istjax train`` without ``--config`` finds the default study from any
directory.

The modules, by what they do:

* `istjax.launch.config.fields`: the sections and fields, their defaults and meaning (`default_config`).
* `istjax.launch.config.migrate`: the flat names of earlier versions and where each now lives.
* `istjax.launch.config.files`: a run's ``config.json`` read back, compared, resumed.
* `istjax.launch.config.check`: the schema (unknown fields, names, types and ranges).
* `istjax.launch.config.target`: the run's one target (``target_accuracy`` or ``target_loss``) and whether an
  evaluation reached it, for the stop (``stop_at_target``) and the summary alike.
* `istjax.launch.config.federated`: a federated algorithm's clients (the ``clients`` section): the split, the
  sampler and their batches, whose K is the algorithm's ``local_steps``.
* `istjax.launch.config.parts` and `istjax.launch.config.experiment`: the pieces a config names, made once by the library
  calls they stand for; a refusal the library makes is reported under the config field that set it
  (`istjax.launch.config.collect`)::

    >>> import istjax.launch.config as cfg
    >>> c = cfg.default_config()
    >>> c.num_workers, c.model.hidden = 3, (100,)
    >>> cfg.build(c)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ConfigError: model.hidden=(100,) with num_workers=3 and sampler.name='uniform': neuron group 'hidden_0' has 100 ...
"""

from typing import Optional

import ml_collections

from istjax.algorithms import ALGORITHMS
from istjax.core.partition import SAMPLERS
from istjax.data.cluster_batches import FULL_GRAPH, GRAPH_BATCHES
from istjax.launch.config.experiment import Experiment, batch_fn_for, build, option_fields, own_rows
from istjax.launch.config.check import check
from istjax.launch.config.fields import (MODEL_KEYS, OPTIMIZERS, RUN_CONTROL_FIELDS, ConfigError, close_matches,
                                         data_module, default_config, flat_dict, get_field, model_fields, model_module,
                                         to_dict, use_model)
from istjax.launch.config.files import differences, from_dict, load_run_config, read_run_config, run_control_fields
from istjax.launch.config.migrate import OPEN_SECTIONS, RENAMED, renamed, upgrade_dict
from istjax.launch.config.parts import (load_config_data, make_optimizer, make_sampler, make_task, record_sources,
                                        schedule_rounds)

__all__ = ["ALGORITHMS", "SAMPLERS", "OPTIMIZERS", "RUN_CONTROL_FIELDS", "GRAPH_BATCHES", "FULL_GRAPH", "ConfigError",
           "Experiment", "default_config", "get_config", "check", "validate", "build", "own_rows", "batch_fn_for",
           "option_fields", "make_optimizer", "schedule_rounds", "run_control_fields", "make_sampler", "make_task",
           "record_sources", "load_config_data", "to_dict", "flat_dict", "from_dict", "load_run_config",
           "read_run_config", "differences", "close_matches", "RENAMED", "OPEN_SECTIONS", "MODEL_KEYS", "use_model",
           "model_fields", "model_module", "data_module", "renamed", "upgrade_dict", "get_field"]


def get_config(arg: Optional[str] = None) -> ml_collections.ConfigDict:
    """Config-file entry point (``--config=.../istjax/launch/config/__init__.py``): the default study."""
    del arg
    return default_config()


def validate(config: ml_collections.ConfigDict, *, load_data: bool = True):
    """Checks ``config`` before anything compiles, raising `ConfigError` with every problem: with ``load_data``
    (default) by building it (`build`, which loads the data and makes every piece), returning the dataset it trains
    on; without, only its schema (`check`), returning None."""
    if not load_data:
        check(config)
        return None
    return build(config).dataset
