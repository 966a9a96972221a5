"""`istjax.data.clients.capped` and ``clients.max_examples``: a split's clients bounded, a seeded subset of a bigger
client kept, the rest held by none; the config field reaches the run's K."""

import numpy as np
import pytest

from istjax.core.errors import ArgError
from istjax.data import clients as cl


def _split():
    return cl.by_group(np.repeat([0, 1, 2], [3, 10, 25]))  # clients of 3, 10 and 25 examples


def test_capped_keeps_a_seeded_subset_of_each_bigger_client():
    split = _split()
    out = cl.capped(split, 8, seed=0)
    assert out.sizes.tolist() == [3, 8, 8]
    for before, after in zip(split.indices, out.indices):
        assert set(after.tolist()) <= set(before.tolist())
    np.testing.assert_array_equal(out.indices[0], split.indices[0])  # a small client keeps all of its own
    assert out.params == {"num_groups": 3, "max_examples": 8} and out.names == split.names
    assert "19 held by none"  # 2 of client 1, 17 of client 2 in out.describe()
    again, other = cl.capped(split, 8, seed=0), cl.capped(split, 8, seed=1)
    assert again.digest() == out.digest() and other.digest() != out.digest()
    assert cl.capped(split, 25, seed=0) is split  # no client over the cap: the split itself


@pytest.mark.parametrize("cap", [0, -1, 2.5, True])
def test_capped_refuses_a_cap_that_is_not_a_positive_integer(cap):
    with pytest.raises(ArgError, match="max_examples"):
        cl.capped(_split(), cap, seed=0)


FEDAVG = ["istjax", "--config.algorithm.name=fedavg", "--config.clients.split=dirichlet", "--config.clients.alpha=0.1",
          "--config.clients.num_clients=20", "--config.clients.fraction=0.2", "--config.num_workers=4",
          "--config.clients.batch_size=10", "--config.model.hidden=(16,)"]


def test_max_examples_bounds_every_client_and_k_from_the_command_line():
    from istjax.launch import config as config_lib
    from istjax.launch.args import parse_train_args

    free = config_lib.build(parse_train_args(FEDAVG)[0])
    bound = config_lib.build(parse_train_args([*FEDAVG, "--config.clients.max_examples=30"])[0])
    assert int(free.clients.split.sizes.max()) > 30  # Dirichlet(0.1) over digits: some client holds more
    assert bound.clients.split.sizes.max() == 30 and bound.clients.local_steps == 3 < free.clients.local_steps
    assert bound.clients.split.digest() == clients_capped(free.clients.split).digest()
    assert bound.clients.to_record()["split"]["params"]["max_examples"] == 30


def clients_capped(split):
    return cl.capped(split, 30, seed=0)


@pytest.mark.parametrize("value", ["-3"])  # a non-integer fails at the flag parser, naming the flag
def test_a_bad_max_examples_is_refused_naming_the_field(value, tmp_path, capsys):
    from istjax.launch import cli

    flags = [f for f in FEDAVG[1:]] + [f"--config.clients.max_examples={value}", "--config.progress=False"]
    assert cli.main(["istjax", "train", *flags, f"--workdir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "clients.max_examples" in err and "--config.clients.max_examples=64" in err, err
