"""The nested config: five sections naming a registry entry and its options; the flat fields of earlier versions
refused with the nested name (config file, command line, a ConfigDict handed to `validate`) and read from an old
``config.json`` so old runs still resume, evaluate and plot."""

import json

import ml_collections
import pytest

from istjax.launch import cli
from istjax.launch import config as config_lib
from istjax.launch import driver

# An old (flat) config.json, as istjax wrote it before the sections.
OLD_FLAT = {
    "name": "old", "algorithm": "ist", "backend": "simulate", "mpi_mode": "parameter_server", "dataset": "digits",
    "dataset_kwargs": {"test_size": 400}, "sampler": "overlapping", "sampler_args": {"min_units": 3, "num_owners": 1,
    "weights": [], "fractions": []}, "group_samplers": {"hidden_0": "uniform"}, "optimizer_state": "carry",
    "model_state": "carry", "resist_min_depth": 0, "resist_test_scale": True, "sharding": "shared", "augment": False,
    "augment_pad": 4, "graph_batches": "full", "num_clusters": 16, "clusters_per_step": 1, "cluster_method": "metis",
    "model": {"name": "mlp", "hidden": [16], "batch_norm": True, "output_batch_norm": True}, "num_workers": 2,
    "num_rounds": 2, "seed": 5,
}


def test_every_section_names_its_registry_entry():
    c = config_lib.default_config()
    for section in ("algorithm", "sampler", "model", "data", "runtime"):
        assert isinstance(c[section], ml_collections.ConfigDict) and isinstance(c[section].name, str), section
    # No field of the default config keeps a flat name of an earlier version.
    assert not any(config_lib.renamed(k) for k in config_lib.flat_dict(config_lib.to_dict(c)))


@pytest.mark.parametrize("old,new", [
    ("backend", "runtime.name"), ("mpi_mode", "runtime.mode"), ("dataset", "data.name"),
    ("dataset_kwargs.num_train", "data.kwargs.num_train"), ("sampler_args.num_owners", "sampler.num_owners"),
    ("group_samplers.hidden_0", "sampler.groups.hidden_0"), ("resist_min_depth", "algorithm.min_depth"),
    ("model_state", "algorithm.model_state"), ("graph_batches", "data.graph_batches"),
    ("algorithm.name", None), ("sampler.groups.x", None), ("num_workers", None),
])
def test_renamed_maps_every_flat_field(old, new):
    assert config_lib.renamed(old) == new


def test_an_old_flat_override_is_refused_with_the_nested_name():
    with pytest.raises(config_lib.ConfigError) as e:
        cli.parse_train_args(["istjax", "--config.backend=mpi", "--config.sampler_args.num_owners=2",
                              "--config.group_samplers.hidden_0=overlapping", "--config.num_workerz=2"])
    problems = e.value.problems
    assert len(problems) == 4, problems
    assert "'backend' is now 'runtime.name'; use --config.runtime.name=mpi" in problems[0]
    assert "use --config.sampler.num_owners=2" in problems[1]
    assert "use --config.sampler.groups.hidden_0=overlapping" in problems[2]
    assert "unknown config field (did you mean 'num_workers'?)" in problems[3]


def test_a_plain_value_for_a_section_is_refused_before_parsing():
    with pytest.raises(config_lib.ConfigError, match=r"'algorithm' is a section of the config, not a value; set one "
                                                     r"of its fields, e.g. --config.algorithm.name=resist"):
        cli.parse_train_args(["istjax", "--config.algorithm=resist"])


def test_an_old_config_file_is_refused_with_the_nested_name(tmp_path):
    # A section given a plain value fails as the file loads; a flat field the file adds fails the check that follows.
    for line, words in [('c.algorithm = "resist"', "'algorithm' is now 'algorithm.name': write config.algorithm.name"),
                        ('c.backend = "mpi"', "'backend' is now 'runtime.name'; set --config.runtime.name=mpi")]:
        path = tmp_path / "old.py"
        path.write_text("from istjax.launch.config import default_config\n\n\ndef get_config():\n"
                        f"    c = default_config()\n    {line}\n    return c\n")
        with pytest.raises(config_lib.ConfigError, match=words):
            config_lib.validate(cli.parse_train_args(["istjax", f"--config={path}"])[0], load_data=False)


def test_a_config_dict_with_flat_fields_is_refused_naming_each():
    c = config_lib.default_config()
    with c.unlocked():
        c.backend = "mpi"
        c.dataset_kwargs = ml_collections.ConfigDict({"num_train": 10})
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.validate(c, load_data=False)
    assert e.value.problems == [
        "backend='mpi': the flat field 'backend' is now 'runtime.name'; set --config.runtime.name=mpi (or "
        "config.runtime.name = 'mpi' in a config file).",
        "dataset_kwargs.num_train=10: the flat field 'dataset_kwargs.num_train' is now 'data.kwargs.num_train'; set "
        "--config.data.kwargs.num_train=10 (or config.data.kwargs.num_train = 10 in a config file)."]


def test_an_old_flat_config_json_reads_into_the_sections():
    c = config_lib.from_dict(OLD_FLAT)
    assert (c.algorithm.name, c.runtime.name, c.runtime.mode, c.data.name) == ("ist", "simulate",
                                                                               "parameter_server", "digits")
    assert dict(c.data.kwargs) == {"test_size": 400} and dict(c.sampler.groups) == {"hidden_0": "uniform"}
    assert (c.sampler.name, c.sampler.min_units, c.algorithm.optimizer_state, c.data.sharding) == (
        "overlapping", 3, "carry", "shared")
    assert c.model.hidden == (16,) and c.seed == 5
    config_lib.validate(c)  # a whole, valid config: nothing flat is left in it
    # It is the config written today, field for field.
    assert config_lib.from_dict(config_lib.to_dict(c)) == c
    # Compared under the nested names, the old file and today's config differ only in fields the old file lacks.
    diffs = config_lib.differences(OLD_FLAT, config_lib.to_dict(c))
    # (its top-level fields, and data.module, runtime.memory_limit, DiLoCo's outer optimizer, the loss split, the
    # nested sampler's shuffle, the tuning split, the federated server's fields and clients section, ADMM's rho,
    # dynamic averaging's delta, codistillation's fields, the concept drift, the compressed exchange and the
    # straggler, added since)
    added = ("data.module:", "runtime.memory_limit:", "algorithm.outer_learning_rate:", "algorithm.outer_momentum:",
             "runtime.loss_split:", "algorithm.recompute_batches:", "sampler.shuffle:", "data.tuning_fraction:",
             "algorithm.server_optimizer:", "algorithm.server_learning_rate:", "algorithm.server_momentum:",
             "algorithm.prox_mu:", "clients.", "algorithm.rho:", "algorithm.delta:",
             "algorithm.groups:", "algorithm.distill_weight:", "algorithm.teacher_every:", "algorithm.burn_in:",
             "data.drift_round:", "data.drift_seed:", "algorithm.compression", "runtime.slow_")
    assert diffs and all(": '<absent>' -> " in d and ("." not in d.split(":")[0] or d.startswith(added))
                         for d in diffs), diffs


def test_an_old_run_resumes_and_evaluates(tmp_path):
    """A run directory whose config.json is flat (an earlier version) still resumes from the command line and
    evaluates: the flat file is read through RENAMED, and the resume check compares under the nested names."""
    run = tmp_path / "run"
    c = config_lib.from_dict(OLD_FLAT)
    c.progress, c.eval_every, c.checkpoint_every, c.eval_train_examples = False, 1, 1, 256
    driver.train_and_evaluate(c, run)
    old = dict(OLD_FLAT, progress=False, eval_every=1, checkpoint_every=1, eval_train_examples=256)
    full = config_lib.to_dict(c)
    old.update({k: v for k, v in full.items() if k not in config_lib.RENAMED and not isinstance(v, dict)})
    (run / "config.json").write_text(json.dumps(old))  # as an earlier version wrote it
    assert cli.main(["istjax", "train", f"--workdir={run}", "--resume", "--config.num_rounds=3"]) == 0
    assert json.loads((run / "summary.json").read_text())["rounds"] == 3
    assert driver.evaluate_run(run)["test_accuracy"] > 0
