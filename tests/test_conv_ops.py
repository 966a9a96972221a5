"""The CPU-friendly convolution (`istjax.models.conv_ops`) and the worker maps of `istjax.runtimes.base.map_workers`.

The convolution's custom VJP must give the gradients of `jax.lax.conv_general_dilated` for every stride, padding,
kernel size and spatial rank it claims (a property test over them), inside `lax.scan` too, and pass every other
call through unchanged. The worker maps must give the vmapped round's numbers, choose one after another only for
non-communicating conv steps on CPU, and refuse a sequential map for data parallel.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.models import ResNet
from istjax.models.conv_ops import conv_general_dilated
from istjax.runtimes import base

DN2 = ("NHWC", "HWIO", "NHWC")


def _grads(conv, x, k, strides, padding, dn):
    def f(x, k):
        return jnp.sum(jnp.sin(conv(x, k, strides, padding, dimension_numbers=dn)))
    return jax.grad(f, (0, 1))(x, k)


@pytest.mark.parametrize("size,kernel,stride,padding", [
    (s, k, st, p) for s, k, st, p in itertools.product(
        (5, 8, 11), (1, 2, 3), (1, 2, 3), ("SAME", "VALID", ((1, 2), (0, 1)), ((0, 0), (2, 0))))
    if k <= s])
def test_gradients_equal_lax(size, kernel, stride, padding):
    rng = np.random.default_rng(size * 100 + kernel * 10 + stride)
    x = jnp.asarray(rng.standard_normal((2, size, size + 1, 3)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((kernel, kernel, 3, 4)), jnp.float32)
    want = _grads(jax.lax.conv_general_dilated, x, k, (stride, stride), padding, DN2)
    got = _grads(conv_general_dilated, x, k, (stride, stride), padding, DN2)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rank,dn", [(1, ("NWC", "WIO", "NWC")), (3, ("NHWDC", "HWDIO", "NHWDC"))])
def test_other_spatial_ranks(rank, dn):
    rng = np.random.default_rng(rank)
    x = jnp.asarray(rng.standard_normal((2,) + (6,) * rank + (3,)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3,) * rank + (3, 2)), jnp.float32)
    strides = (2,) + (1,) * (rank - 1)
    want = _grads(jax.lax.conv_general_dilated, x, k, strides, "SAME", dn)
    got = _grads(conv_general_dilated, x, k, strides, "SAME", dn)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_inside_scan_and_the_hlo_is_canonical():
    """Inside lax.scan (where XLA:CPU does not canonicalise) the gradients are the same and every convolution in
    the compiled loop body has the canonical labels b01f_01io->b01f."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, 8, 8, 3)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3, 3, 3, 4)), jnp.float32)

    def scanned(conv):
        def body(c, _):
            return c, _grads(conv, x, c, (2, 2), "SAME", DN2)
        return jax.jit(lambda k: jax.lax.scan(body, k, None, length=2)[1])

    want, got = scanned(jax.lax.conv_general_dilated)(k), scanned(conv_general_dilated)(k)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    hlo = scanned(conv_general_dilated).lower(k).compile().as_text()
    labels = [line.split("dim_labels=")[1].split(",")[0] for line in hlo.splitlines() if "dim_labels=" in line]
    assert labels and all(lab == "b01f_01io->b01f" for lab in labels), labels


def test_other_calls_pass_through():
    """NCHW (lax's default), input dilation, kernel dilation and feature groups go to lax unchanged."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((2, 4, 7, 7)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((6, 4, 3, 3)), jnp.float32)
    k_grouped = jnp.asarray(rng.standard_normal((6, 2, 3, 3)), jnp.float32)
    for kernel, kwargs in ((k, {}), (k, {"rhs_dilation": (2, 2)}), (k, {"lhs_dilation": (2, 1)}),
                           (k_grouped, {"feature_group_count": 2})):
        pad = ((1, 1), (1, 1))
        want = jax.lax.conv_general_dilated(x, kernel, (1, 1), pad, **kwargs)
        got = conv_general_dilated(x, kernel, (1, 1), pad, **kwargs)
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------------------------
# worker maps


def _resnet_task():
    model = ResNet(stage_sizes=(1, 1), widths=(8, 16), width_multiplier=1.0, num_classes=3)
    return istjax.classifier(model, jnp.zeros((2, 8, 8, 3)), num_classes=3)


def _batches(W, K, B=2):
    rng = np.random.default_rng(0)
    return {"x": jnp.asarray(rng.standard_normal((W, K, B, 8, 8, 3)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, 3, (W, K, B)), jnp.int32)}


@pytest.mark.slow
def test_sequential_and_vmapped_rounds_agree():
    task = _resnet_task()
    W, K = 2, 2
    states = {}
    for worker_map in ("vmap", "sequential", "auto"):
        alg = istjax.ist(task, optax.sgd(0.1, momentum=0.9), num_workers=W, local_steps=K, worker_map=worker_map)
        state = alg.init(jax.random.key(0))
        state, _ = alg.round(state, _batches(W, K))
        states[worker_map] = state
    for name in ("sequential", "auto"):
        for a, b in zip(jax.tree.leaves(states["vmap"].params), jax.tree.leaves(states[name].params)):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


@pytest.mark.slow
def test_auto_picks_sequential_only_for_non_communicating_conv_steps_on_cpu():
    task = _resnet_task()
    W, K = 2, 1
    ist = istjax.ist(task, optax.sgd(0.1), num_workers=W, local_steps=K, worker_map="vmap")
    workers, _ = ist.distribute(ist.init(jax.random.key(0)))
    one = lambda t: jax.tree.map(lambda x: x[0], t)  # noqa: E731
    assert base._has_convolution(ist.local, one(workers), one(_batches(W, K)), None)
    mlp = istjax.classifier(istjax.models.MLP(hidden=(8,), num_classes=3), jnp.zeros((2, 4)), num_classes=3)
    ist_mlp = istjax.ist(mlp, optax.sgd(0.1), num_workers=W, local_steps=K)
    w_mlp, _ = ist_mlp.distribute(ist_mlp.init(jax.random.key(0)))
    b_mlp = {"x": jnp.zeros((K, 2, 4)), "y": jnp.zeros((K, 2), jnp.int32)}
    assert not base._has_convolution(ist_mlp.local, one(w_mlp), b_mlp, None)
    dp = istjax.data_parallel(task, optax.sgd(0.1), num_workers=W, local_steps=K)
    assert base.communicates(dp) and not base.communicates(ist)


def test_worker_map_errors():
    task = _resnet_task()
    with pytest.raises(ValueError, match="worker_map='bogus'"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1, worker_map="bogus")
    dp = istjax.data_parallel(task, optax.sgd(0.1), num_workers=2, local_steps=1)
    with pytest.raises(ValueError, match="do not communicate"):
        base.map_workers(dp.local, 2, worker_map="sequential", communicates=base.communicates(dp))
