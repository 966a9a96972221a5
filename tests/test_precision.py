"""bfloat16 compute and exchange (`istjax.core.precision`): float32 accumulation forward and backward, every family
computing in its dtype with float32 masters, rounds equal to the plain reference's rounding, float32 paths untouched,
checkpoints that keep float32 masters and resume exactly, and the refusals."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.reference import reference_round
from istjax.core import precision
from istjax.launch.config import ConfigError, default_config
from istjax.launch.config.experiment import build
from istjax.models import build_model
from istjax.models.mlp import MLP

BF16 = jnp.bfloat16
DOT = (((1,), (0,)), ((), ()))
EPS = 2.0 ** -8  # bfloat16's rounding: half an ulp of its 8 significant bits, relative


def _eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs nested in it."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def _has_bf16(jaxpr) -> bool:
    return any(getattr(v.aval, "dtype", None) == BF16 for e in _eqns(jaxpr) for v in list(e.invars) + e.outvars
               if hasattr(v, "aval"))


# ---------------------------------------------------------------------------------------------------------------
# Compute.


def test_bfloat16_matmul_accumulates_in_float32_forward_and_backward():
    """4096 ones summed: a bfloat16 accumulator stops at 256 (257 is not a bfloat16), float32 gets 4096 exactly; so
    do both gradients, each a sum over 4096 terms."""
    ones_row, ones_col = jnp.ones((1, 4096), BF16), jnp.ones((4096, 1), BF16)
    assert float(precision.dot_general(ones_row, ones_col, DOT)[0, 0]) == 4096.0
    assert float(jnp.dot(ones_row, ones_col)[0, 0]) == 4096.0  # XLA's own bfloat16 dot converts to float32 too

    def loss(x, w):
        return jnp.sum(precision.dot_general(x, w, DOT).astype(jnp.float32))

    gx, gw = jax.grad(loss, argnums=(0, 1))(jnp.ones((4096, 8), BF16), jnp.ones((8, 4096), BF16))
    assert gx.dtype == gw.dtype == BF16
    assert float(gx[0, 0]) == 4096.0 and float(gw[0, 0]) == 4096.0  # dx sums over w's 4096 columns, dw over rows


def test_bfloat16_matmul_matches_float32_to_its_rounding_and_takes_the_fast_form():
    kx, kw = jax.random.split(jax.random.key(0))
    x, w = jax.random.normal(kx, (32, 64)), jax.random.normal(kw, (64, 16))
    xb, wb = x.astype(BF16), w.astype(BF16)
    exact = xb.astype(jnp.float32) @ wb.astype(jnp.float32)
    got = precision.dot_general(xb, wb, DOT)
    np.testing.assert_allclose(np.asarray(got, np.float32), exact, rtol=2 * EPS, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(precision.einsum("ij,jk->ik", xb, wb)), np.asarray(got))
    # The form XLA's CPU runs on its bfloat16 kernels: bfloat16 operands, a float32 result, forward and backward.
    text = jax.jit(jax.grad(lambda a, b: jnp.sum(precision.dot_general(a, b, DOT).astype(jnp.float32)),
                            argnums=0)).lower(xb, wb).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert dots and all("xbf16" in line and "xf32>" in line.split("->")[-1] for line in dots), dots
    # float32 operands: lax.dot_general itself, bit for bit.
    np.testing.assert_array_equal(precision.dot_general(x, w, DOT), jax.lax.dot_general(x, w, DOT))


def _example(name):
    """``(model name, fields, example x, shared, classes)`` of a small model of every family."""
    from istjax.graph.graph import Graph

    images = jnp.ones((4, 8, 8, 3))
    senders, receivers = jnp.array([0, 1, 2, 3]), jnp.array([1, 2, 3, 0])
    graph = Graph(nodes=jnp.ones((4, 5)), senders=senders, receivers=receivers,
                  node_mask=jnp.ones(4, bool), edge_mask=jnp.ones(4, bool))
    sparse = jnp.stack([jnp.array([[0.0, 1.0, 2.0]] * 4), jnp.full((4, 3), 0.5)], axis=-1)
    return {
        "mlp": ({"hidden": (16,)}, jnp.ones((4, 10)), None, 3),
        "cnn": ({"widths": (4, 8), "blocks": (1, 1)}, images, None, 3),
        "resnet": ({"stage_sizes": (1, 1), "widths": (4, 8)}, images, None, 3),
        "vgg": ({"features": ((4,), (8,)), "hidden": (8,)}, images, None, 3),
        "depth_resnet": ({"stage_sizes": (2, 2), "widths": (4, 8)}, images, None, 3),
        "gcn": ({"hidden": (8,), "layer_norm": True}, jnp.arange(4), {"graph": graph}, 3),
        "graphsage": ({"hidden": (8,)}, jnp.arange(4), {"graph": graph}, 3),
        "transformer": ({"num_layers": 1, "embed_dim": 16, "num_heads": 2, "mlp_dim": 16, "context": 8,
                         "positions": "rotary"}, jnp.zeros((2, 8), jnp.int32), None, 11),
        "sparse_mlp": ({"hidden": (8,), "num_features": 5}, sparse, None, 6),
    }[name]


FAMILIES = ("mlp", "cnn", "resnet", "vgg", "depth_resnet", "gcn", "graphsage", "transformer", "sparse_mlp")


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_computes_in_its_dtype_with_float32_parameters_and_loss(name):
    fields, x, shared, classes = _example(name)
    out = {}
    for dtype in ("float32", "bfloat16"):
        model = build_model(name, fields, num_classes=classes, compute_dtype=dtype)
        variables = model.init(jax.random.key(0), x, *(() if shared is None else (shared,)), train=False)
        params = variables["params"]
        assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}

        def loss(p):
            logits = model.apply({**variables, "params": p}, x, *(() if shared is None else (shared,)), train=False)
            return jnp.mean(logits.astype(jnp.float32) ** 2), logits

        jaxpr = jax.make_jaxpr(jax.grad(loss, has_aux=True))(params)
        grads, logits = jax.grad(loss, has_aux=True)(params)
        assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
        out[dtype] = (logits, jaxpr)
    low_products = [e for e in _eqns(out["bfloat16"][1].jaxpr) if e.primitive.name in ("dot_general",
                    "conv_general_dilated") and all(v.aval.dtype == BF16 for v in e.invars)]
    assert low_products, f"{name}: no matmul or convolution of bfloat16 operands"
    assert not _has_bf16(out["float32"][1].jaxpr), f"{name}: bfloat16 in the float32 model's program"
    assert out["bfloat16"][0].dtype == BF16
    np.testing.assert_allclose(np.asarray(out["bfloat16"][0], np.float32), np.asarray(out["float32"][0]),
                               rtol=0.1, atol=0.1)


def test_a_model_without_a_dtype_field_is_refused_bfloat16(monkeypatch):
    import flax.linen as nn

    class Plain(nn.Module):
        num_classes: int = 3

        def partition_rules(self):
            return {}

        def subnet(self, units):
            return self

        @nn.compact
        def __call__(self, x, train=True):
            return nn.Dense(self.num_classes)(x)

    monkeypatch.setitem(istjax.models.MODELS._entries, "plain_no_dtype", None)  # removed again after the test
    istjax.models.register_model("plain_no_dtype", Plain)
    assert build_model("plain_no_dtype", {}, num_classes=3).num_classes == 3  # float32 needs nothing
    with pytest.raises(ValueError, match="has no field dtype.*add a field `dtype"):
        build_model("plain_no_dtype", {}, num_classes=3, compute_dtype="bfloat16")


# ---------------------------------------------------------------------------------------------------------------
# Exchange: rounds against the plain reference.


W, K, B, D, C = 2, 2, 16, 12, 4


def _task(dtype="float32"):
    model = MLP(hidden=(16, 16), num_classes=C, use_bias=True, batch_norm=False, output_batch_norm=False,
                dtype=dtype)
    return istjax.classifier(model, jnp.zeros((B, D)), MLP.rules(2), num_classes=C)


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.normal(size=(W, K, B, D)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}


def _make(name, task, lr=0.2, **wire):
    opt = optax.sgd(lr)
    return {"ist": lambda: istjax.ist(task, opt, num_workers=W, local_steps=K, **wire),
            "data_parallel": lambda: istjax.data_parallel(task, opt, num_workers=W, local_steps=K, **wire),
            "local_sgd": lambda: istjax.local_sgd(task, opt, num_workers=W, local_steps=K, **wire),
            "diloco": lambda: istjax.diloco(task, opt, num_workers=W, local_steps=K, **wire)}[name]()


def _close(a, b, rtol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd", "diloco"])
@pytest.mark.parametrize("values", ["delta", "params"])
def test_bfloat16_exchange_round_equals_the_reference_round(name, values):
    alg = _make(name, _task(), exchange_dtype="bfloat16", exchange_values=values)
    state = alg.init(jax.random.key(3))
    fast, _ = alg.round(state, _batches())
    slow = reference_round(alg, state, _batches())
    _close(fast.params, slow.params, 4 * EPS)  # a value on a rounding boundary may land one ulp apart
    # ...and the rounding happened: float32 exchange ends elsewhere by far more than float32's own noise.
    exact, _ = _make(name, _task()).round(state, _batches())
    gap = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(fast.params),
                                                             jax.tree.leaves(exact.params)))
    assert gap > 1e-4, gap


@pytest.mark.parametrize("name", ["ist", "local_sgd"])
def test_bfloat16_compute_round_equals_the_reference_round(name):
    alg = _make(name, _task("bfloat16"), exchange_dtype="bfloat16")
    state = alg.init(jax.random.key(4))
    fast, _ = alg.round(state, _batches(1))
    slow = reference_round(alg, state, _batches(1))
    _close(fast.params, slow.params, 8 * EPS)


@pytest.mark.parametrize("name", ["ist", "local_sgd"])
def test_delta_keeps_the_float32_master_and_params_rounds_it(name):
    """With nothing learned (lr 0) a worker's change is 0: sending its change leaves the float32 master bit for bit;
    sending its values writes the master's bfloat16 rounding over every weight some worker held (IST: not the
    blocks of a hidden-to-hidden kernel between two workers' units, which nobody held)."""
    task = _task()
    state = _make(name, task).init(jax.random.key(5))
    exact, rounded = state.params, jax.tree.map(lambda v: v.astype(BF16).astype(jnp.float32), state.params)
    new = {values: _make(name, task, lr=0.0, exchange_dtype="bfloat16", exchange_values=values).round(
        state, _batches())[0].params for values in ("delta", "params")}
    for a, b in zip(jax.tree.leaves(new["delta"]), jax.tree.leaves(exact)):
        np.testing.assert_array_equal(a, b)
    for a, b, r in zip(jax.tree.leaves(new["params"]), jax.tree.leaves(exact), jax.tree.leaves(rounded)):
        assert bool(jnp.all((a == r) | (a == b)))
    np.testing.assert_array_equal(new["params"]["dense_0"]["kernel"], rounded["dense_0"]["kernel"])  # all dealt
    assert bool(jnp.any(new["params"]["dense_0"]["kernel"] != exact["dense_0"]["kernel"]))


@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd"])
def test_float32_programs_carry_no_bfloat16_and_bfloat16_ones_do(name):
    """float32 (the default) is the round as it always was: nothing rounded, no bfloat16 value in its program."""
    state = _make(name, _task()).init(jax.random.key(0))
    plain = jax.make_jaxpr(_make(name, _task()).round)(state, _batches())
    assert not _has_bf16(plain.jaxpr)
    low = jax.make_jaxpr(_make(name, _task(), exchange_dtype="bfloat16").round)(state, _batches())
    assert _has_bf16(low.jaxpr)


def test_analytic_bytes_halve_with_a_bfloat16_exchange():
    for name in ("ist", "data_parallel", "local_sgd", "diloco"):
        full, half = _make(name, _task()).comm, _make(name, _task(), exchange_dtype="bfloat16").comm
        assert (half.sent * 2, half.received * 2) == (full.sent, full.received), name


# ---------------------------------------------------------------------------------------------------------------
# Refusals, config, checkpoints.


def test_dtype_names_that_do_not_exist_are_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"exchange_dtype='half'.*\['float32', 'bfloat16'\]"):
        _make("ist", _task(), exchange_dtype="half")
    with pytest.raises(ValueError, match=r"exchange_values='grads'.*\['delta', 'params'\]"):
        _make("local_sgd", _task(), exchange_dtype="bfloat16", exchange_values="grads")
    with pytest.raises(ValueError, match=r"compute_dtype='fp16'.*\['float32', 'bfloat16'\]"):
        build_model("mlp", {}, num_classes=3, compute_dtype="fp16")
    with pytest.raises(ValueError, match="set as a model field; pass compute_dtype"):
        build_model("mlp", {"dtype": "bfloat16"}, num_classes=3)
    config = default_config()
    config.compute_dtype, config.exchange_dtype, config.exchange_values = "float16", "bf16", "both"
    with pytest.raises(ConfigError) as e:
        build(config)
    text = str(e.value)
    for field in ("compute_dtype='float16'", "exchange_dtype='bf16'", "exchange_values='both'",
                  "['float32', 'bfloat16']", "['delta', 'params']"):
        assert field in text, text


def test_checkpoints_keep_float32_masters_and_resume_exactly(tmp_path):
    from istjax.launch.driver import restore_run, train_and_evaluate

    def config(rounds):
        c = default_config()
        c.compute_dtype = c.exchange_dtype = "bfloat16"
        c.num_rounds, c.eval_every, c.checkpoint_every, c.progress = rounds, 2, 2, False
        c.model.hidden = (32,)
        return c

    train_and_evaluate(config(4), str(tmp_path / "whole"))
    train_and_evaluate(config(2), str(tmp_path / "parts"))
    train_and_evaluate(config(4), str(tmp_path / "parts"), resume=True)
    whole, resumed = (restore_run(tmp_path / d)[2] for d in ("whole", "parts"))
    for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(resumed.params)):
        assert a.dtype == jnp.float32
        np.testing.assert_array_equal(a, b)
    rows = [json.loads(line) for line in (tmp_path / "parts" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows][-1] == 4


def test_devices_runtime_and_resist_honour_both_dtypes():
    """The devices runtime (4 fake CPU devices) computes what simulate computes under bfloat16 compute and exchange;
    ResIST passes the exchange on and rounds like IST."""
    sim = _make("ist", _task("bfloat16"), exchange_dtype="bfloat16")
    dev = istjax.ist(_task("bfloat16"), optax.sgd(0.2), num_workers=W, local_steps=K, exchange_dtype="bfloat16",
                     backend="devices")
    state = sim.init(jax.random.key(6))
    _close(dev.round(state, _batches(2))[0].params, sim.round(state, _batches(2))[0].params, 2 * EPS)

    from istjax.models.resist import DepthResNet

    model = DepthResNet(stage_sizes=(3,), widths=(4,), num_classes=C, image_shape=(2, 2, 3), dtype="bfloat16")
    task = istjax.classifier(model, jnp.zeros((B, D)), num_classes=C)
    alg = istjax.resist(task, optax.sgd(0.1), num_workers=W, local_steps=K, exchange_dtype="bfloat16",
                        exchange_values="params")
    assert alg.wire == precision.Wire("bfloat16", "params") and alg.name == "resist"
    state = alg.init(jax.random.key(7))
    new, _ = alg.round(state, _batches(3))
    for leaf in jax.tree.leaves(new.params):  # written from what workers sent: every value a bfloat16 value
        assert leaf.dtype == jnp.float32
    dealt = new.params["stage0_blocks"]
    for leaf in jax.tree.leaves(dealt):
        np.testing.assert_array_equal(leaf, leaf.astype(BF16).astype(jnp.float32))
