"""Tensor parallel (`istjax.algorithms.tensor`): the vocabulary-parallel loss and scores against the whole logits'
(`istjax.xmc.loss`), a round of P shards simulated with ``vmap`` against plain full-model training, the refusals,
and the mpiexec -n 2 run (`tests/mpi/tensor_parallel.py`) against single-process training."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms import tensor as tp
from istjax.core.errors import ArgError
from istjax.core.state import WORKERS
from istjax.models import SparseMLP
from istjax.xmc import loss as xmc_loss
from conftest import FAST_COMPILE

ROOT = pathlib.Path(__file__).resolve().parents[1]
MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"


def _labels(rng, b=6, c=12, width=4):
    """``[B, L]`` label sets padded with -1 (one point with none)."""
    out = -np.ones((b, width), np.int32)
    for i in range(1, b):
        k = rng.integers(1, width + 1)
        out[i, :k] = rng.choice(c, size=k, replace=False)
    return jnp.asarray(out)


def _shards(logits_BxC, p):
    """``[P, B, C / P]``: the label blocks of the whole logits."""
    b, c = logits_BxC.shape
    return jnp.transpose(logits_BxC.reshape(b, p, c // p), (1, 0, 2))


@pytest.mark.parametrize("loss", ["softmax", "bce"])
@pytest.mark.parametrize("p", [2, 3])
def test_vocab_parallel_loss_and_gradient_equal_the_whole_logits(loss, p):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(6, 12)) * 3, jnp.float32)
    labels = _labels(rng)
    width = 12 // p

    def shard_loss(z_Bxc):
        d = tp.differentiable(tp.lax_collectives(p))
        first = jax.lax.axis_index(WORKERS) * width
        return tp.sharded_multilabel_loss(z_Bxc, labels, first, d, 12, loss)

    values, grads = jax.vmap(jax.value_and_grad(shard_loss), axis_name=WORKERS)(_shards(logits, p))
    want, want_grad = jax.value_and_grad(lambda z: xmc_loss.multilabel_loss(z, labels, loss))(logits)
    np.testing.assert_allclose(values, np.full(p, want), rtol=1e-6)
    np.testing.assert_allclose(grads, _shards(want_grad, p), rtol=1e-5, atol=1e-7)


def test_sharded_scores_equal_the_whole_logits_ties_included():
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.integers(0, 3, size=(6, 12)), jnp.float32)  # many ties: lower ids win
    labels = _labels(rng)
    p = 2

    weights = xmc_loss.LabelWeights(rng.uniform(1.0, 5.0, size=12))

    def shard_scores(z_Bxc):
        first = jax.lax.axis_index(WORKERS) * 6
        return tp.sharded_scores(z_Bxc, labels, first, tp.lax_collectives(p), 12, "softmax", weights)

    values, aux = jax.vmap(shard_scores, axis_name=WORKERS)(_shards(logits, p))
    want, want_aux = xmc_loss.scores(logits, labels, "softmax", weights)
    assert "psp_at_5_numerator" in want_aux
    np.testing.assert_allclose(values, np.full(p, want), rtol=1e-6)
    assert set(aux) == set(want_aux)
    for k, v in want_aux.items():
        np.testing.assert_allclose(aux[k], np.full(p, v), rtol=1e-6, err_msg=k)


def test_cut_and_join_are_inverse():
    tree = {"a": jnp.arange(24.0).reshape(2, 12), "rows": jnp.arange(24.0).reshape(6, 4), "b": jnp.arange(6.0)}
    axes = {"a": 1, "rows": 0, "b": tp.WHOLE}
    shards = jax.vmap(lambda i: tp.cut(tree, axes, i, 3))(jnp.arange(3))
    assert shards["a"].shape == (3, 2, 4) and shards["rows"].shape == (3, 2, 4) and shards["b"].shape == (3, 6)
    np.testing.assert_array_equal(shards["rows"][1], tree["rows"][2:4])
    joined = tp.join(shards, axes)
    for k in tree:
        np.testing.assert_array_equal(joined[k], tree[k])


def _task(hidden=8, classes=6, features=12, loss="softmax"):
    model = SparseMLP(hidden=(hidden,), num_classes=classes, num_features=features, loss=loss)
    return istjax.classifier(model, jnp.zeros((2, 5, 2), jnp.float32), num_classes=classes)


def test_a_shards_fresh_state_is_its_cut_of_the_whole_fresh_state():
    """`TensorPieces.init` (what each MPI rank runs) builds the shard's optimizer state from its own parameters,
    never the whole model's, and equals cutting the whole fresh state."""
    import optax

    alg = tp.tensor_parallel_pieces(_task(), optax.adam(1e-2), num_workers=2, local_steps=2, batch_size=4)
    whole = alg.init(jax.random.key(3))
    for index in range(2):
        want, got = alg.tensor.cut(whole, index), alg.tensor.init(jax.random.key(3), index)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves((got.params, got.opt_state, got.key)),
                        jax.tree.leaves((want.params, want.opt_state, want.key))):
            a, b = (jax.random.key_data(a), jax.random.key_data(b)) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) \
                else (a, b)
            np.testing.assert_array_equal(a, b)


def _batches(rng, w=2, k=3, b=4, features=12, classes=6):
    x = np.zeros((w, k, b, 5, 2), np.float32)
    x[..., 0] = rng.integers(0, features, size=(w, k, b, 5))
    x[..., 1] = rng.normal(size=(w, k, b, 5))
    y = np.stack([np.asarray(_labels(rng, b=w * k * b, c=classes, width=3))]).reshape(w, k, b, 3)
    return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def full_model_round(task, optimizer, state, batches):
    """The oracle: K optax steps of the whole model, each on all W workers' rows of the round (worker-major)."""
    loss = task.train_loss(None)
    params, opt_state = state.params, state.opt_state
    for k in range(batches["y"].shape[1]):
        batch = jax.tree.map(lambda v, k=k: v[:, k].reshape((-1,) + v.shape[3:]), batches)
        grads = jax.grad(lambda prm, batch=batch: loss(prm, {}, batch)[0])(params)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts
            updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return params, opt_state


def _mlp_task(hidden=8, classes=6, features=7):
    model = istjax.models.MLP(hidden=(hidden,), num_classes=classes, batch_norm=False, output_batch_norm=False,
                              use_bias=True)
    return istjax.classifier(model, jnp.zeros((2, features), jnp.float32), num_classes=classes)


def _mlp_batches(rng, w=2, k=3, b=4, features=7, classes=6):
    return {"x": jnp.asarray(rng.normal(size=(w, k, b, features)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, classes, size=(w, k, b)), jnp.int32)}


def _deep_mlp_task(classes=6, features=7):
    """Three hidden layers, BatchNorm on the units and on the logits: Megatron's pairs (hidden_0 and hidden_2 cut,
    hidden_1 whole), the last layer row-split. No biases (as the paper's): a bias before BatchNorm has a zero
    gradient, whose rounding noise Adam would blow up to full steps."""
    model = istjax.models.MLP(hidden=(8, 6, 4), num_classes=classes)
    return istjax.classifier(model, jnp.zeros((2, features), jnp.float32), num_classes=classes)


def _deep_sparse_task():
    """Two hidden layers: the bag by columns, the second layer by rows (an all-reduce), the labels in blocks."""
    model = SparseMLP(hidden=(8, 6), num_classes=6, num_features=12)
    return istjax.classifier(model, jnp.zeros((2, 5, 2), jnp.float32), num_classes=6)


def _transformer_task(dtype="float32"):
    model = istjax.models.Transformer(num_classes=11, num_layers=2, embed_dim=8, num_heads=2, mlp_dim=12, context=5,
                                      dtype=dtype)
    return istjax.classifier(model, jnp.zeros((2, 5), jnp.int32), num_classes=11)


def _text_batches(rng, w=2, k=3, b=4, t=5, vocab=11):
    ids = rng.integers(0, vocab, size=(w, k, b, t + 1))
    return {"x": jnp.asarray(ids[..., :-1], jnp.int32), "y": jnp.asarray(ids[..., 1:], jnp.int32)}


MODELS = {"sparse_mlp": (_task, _batches), "mlp": (_mlp_task, _mlp_batches),
          "mlp_depth3_batchnorm": (_deep_mlp_task, _mlp_batches),
          "sparse_mlp_depth2": (_deep_sparse_task, _batches), "transformer": (_transformer_task, _text_batches)}


# Every family with SGD, the one-layer ones and the transformer with Adam too in the default run; the rest with Adam
# (a few seconds of compiling each) among the slow tests.
_ROUNDS = [(m, o) for m in MODELS for o in ("sgd", "adam")]
_QUICK = {("sparse_mlp", "adam"), ("mlp", "adam"), ("transformer", "adam")}
# The SGD rounds of the two slowest to compile, which their Adam rounds cover in the default run (84 s and 46 s).
_EXHAUSTIVE = {("transformer", "sgd"), ("sparse_mlp", "sgd")}


def _round_marks(m, o):
    if (m, o) in _EXHAUSTIVE:
        return (pytest.mark.slow, pytest.mark.exhaustive)
    return () if o == "sgd" or (m, o) in _QUICK else pytest.mark.slow


@pytest.mark.parametrize("model,optimizer", [pytest.param(m, o, id=f"{o}-{m}", marks=_round_marks(m, o))
                                             for m, o in _ROUNDS])
def test_a_round_of_simulated_shards_equals_full_model_training(optimizer, model):
    optimizer = {"sgd": optax.sgd(0.5), "adam": optax.adam(0.05)}[optimizer]
    make_task, make_batches = MODELS[model]
    task, p = make_task(), 2
    alg = tp.tensor_parallel_pieces(task, optimizer, num_workers=p, local_steps=3, batch_size=4)
    state = alg.init(jax.random.key(0))
    batches = make_batches(np.random.default_rng(2))
    workers, plan = alg.distribute(state)
    trained, metrics = jax.vmap(alg.local, in_axes=(0, None), axis_name=WORKERS)(workers, batches)
    got = alg.collect(state, trained, plan)
    want_params, want_opt = full_model_round(task, optimizer, state, batches)
    for a, b in zip(jax.tree.leaves((got.params, got.opt_state)), jax.tree.leaves((want_params, want_opt))):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert metrics["loss"].shape == (p, 3) and int(got.round) == 1
    # The evaluation from the shards equals the task's of the whole model, with the task's metric names.
    test = jax.tree.map(lambda v: v[0, 0], make_batches(np.random.default_rng(3), b=32))  # BatchNorm: 32 or more
    shard = jax.vmap(lambda w: alg.tensor.evaluate(tp.lax_collectives(p), w.params, {}, test), axis_name=WORKERS)
    got_loss, got_aux = shard(trained)
    want_loss, want_aux = task.evaluate(want_params, {}, test)
    assert set(got_aux) == set(want_aux)
    np.testing.assert_allclose(got_loss, np.full(p, want_loss), rtol=2e-5)
    for k, v in want_aux.items():
        np.testing.assert_allclose(got_aux[k], np.full(p, v), rtol=2e-5, err_msg=k)


def test_step_bytes_are_two_activation_matrices_a_step():
    b, h, p = 256, 512, 2
    got = tp.step_bytes(b, h, p)
    assert got.received == 4 * (2 * b * h + 3 * b) and got.sent == 4 * (b * h // p + b * h + 3 * b)
    # The bytes read from the traced step of a one-hidden-layer SparseMLP are the formula's.
    assert tp.traced_step_bytes(_task(hidden=h), p, b) == got


def test_transformer_step_moves_one_all_reduce_per_branch_each_way():
    """Every block's attention and feed-forward: the [B, T, D] partial sums all-reduced forward, and the gradient
    of each branch's input summed backward (Megatron's f and g); nothing else crosses."""
    task, p, b = _transformer_task(), 2, 4
    activation = 4 * b * 5 * 8  # [B, T, D] float32
    want = 2 * 2 * 2 * activation  # 2 layers x 2 branches x (forward + backward), in and out alike
    assert tp.traced_step_bytes(task, p, b) == (want, want)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp_depth3_batchnorm", pytest.param("transformer", marks=pytest.mark.exhaustive)])
def test_bfloat16_compute_under_tensor_parallel_is_within_its_rounding(model):
    """The model computing in bfloat16 (float32 accumulation, activations summed in float32): the shards' loss and
    joined gradients equal the whole bfloat16 model's within bfloat16's rounding (the shards add partial sums in
    another order), and differ from the float32 ones (it did round)."""
    make_task, make_batches = MODELS[model]
    if model == "transformer":
        low = _transformer_task("bfloat16")
    else:
        low = istjax.classifier(make_task().module.clone(dtype="bfloat16"), jnp.zeros((2, 7), jnp.float32),
                                num_classes=6)
    task, p = make_task(), 2
    batch = jax.tree.map(lambda v: v[0, 0], make_batches(np.random.default_rng(7), b=8))
    params = task.init(jax.random.key(1))
    exact = jax.value_and_grad(lambda prm: task.train_loss(None)(prm, {}, batch)[0])(params)
    want = jax.value_and_grad(lambda prm: low.train_loss(None)(prm, {}, batch)[0])(params)
    alg = tp.tensor_parallel_pieces(low, optax.sgd(0.1), num_workers=p, local_steps=1, batch_size=4)
    split = tp._split(low, p)
    shards = jax.vmap(lambda i: tp.cut(params, split.axes, i, p))(jnp.arange(p))
    loss = tp._shard_loss(low, split)

    def per_shard(prm):  # one shard a device: XLA:CPU's bfloat16 dots have no batched (vmapped) form
        value, grad = jax.value_and_grad(lambda q: loss(tp.differentiable(tp.lax_collectives(p)), q, batch))(
            jax.tree.map(lambda v: v[0], prm))
        return value[None], jax.tree.map(lambda v: v[None], grad)

    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:p]), (WORKERS,))
    values, grads = jax.shard_map(per_shard, mesh=mesh, in_specs=PartitionSpec(WORKERS),
                                  out_specs=PartitionSpec(WORKERS), check_vma=False)(shards)
    np.testing.assert_allclose(values, np.full(p, want[0]), rtol=1e-2)
    assert not np.allclose(values, exact[0], rtol=1e-6)
    joined = tp.join(grads, split.axes)
    for a, b_ in zip(jax.tree.leaves(joined), jax.tree.leaves(want[1])):
        np.testing.assert_allclose(a, b_, rtol=5e-2, atol=2e-2 * float(jnp.max(jnp.abs(b_))) + 1e-6)
    assert alg.tensor.num_shards == p


def test_a_layer_the_shard_pass_cannot_cut_is_refused_naming_it():
    """A model whose tensor split names a convolution's channels: refused when the pieces are built, naming the
    layer, before anything is compiled."""
    import flax.linen as nn

    from istjax.models import tensor_forward

    class ConvNet(nn.Module):
        def partition_rules(self):
            return {"channels": "channels", "classes": None}

        def tensor_axes(self):
            return frozenset({"channels"})

        tensor_logits = tensor_forward.tensor_logits_method

        @nn.compact
        def __call__(self, x, train=False):
            init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), (None, None, None, "channels"))
            x = nn.relu(nn.Conv(4, (3, 3), kernel_init=init, use_bias=False, name="conv")(x))
            return nn.Dense(3, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                                        (None, "classes")), name="head")(
                x.reshape(x.shape[0], -1))

    task = istjax.classifier(ConvNet(), jnp.zeros((2, 4, 4, 1), jnp.float32), num_classes=3)
    with pytest.raises(ArgError, match="cannot cut Conv 'conv'"):
        tp.tensor_parallel_pieces(task, optax.sgd(0.1), num_workers=2, local_steps=1, batch_size=4)


def test_refusals_name_the_fix():
    with pytest.raises(ArgError, match="runtime.name=mpi|backend='mpi'"):
        tp.tensor_parallel(_task(), optax.sgd(0.1), num_workers=2, local_steps=1, batch_size=4, backend="simulate")
    with pytest.raises(ArgError, match="8 units of bag/.* into num_workers=3 equal blocks"):
        tp.tensor_parallel_pieces(_task(classes=6), optax.sgd(0.1), num_workers=3, local_steps=1, batch_size=4)
    cnn = istjax.models.CNN(widths=(4,), blocks=(1,), inner=((4,),), num_classes=6)  # no tensor split
    task = istjax.classifier(cnn, jnp.zeros((2, 8, 8, 1), jnp.float32), num_classes=6)
    with pytest.raises(ArgError, match="gives none"):
        tp.tensor_parallel_pieces(task, optax.sgd(0.1), num_workers=2, local_steps=1, batch_size=4)


@pytest.mark.parametrize("p", [2, 3])
def test_ist_owners_evaluated_by_label_blocks_equal_the_whole_model_and_the_partial_sums(p):
    """`istjax.algorithms.exchange.owner_evaluate` for IST's sharded SparseMLP (owners simulated with ``vmap``): the
    output layer's rows moved to label blocks and scored as tensor parallel does equal the whole model's evaluation
    and the owner pass that reduces every owner's partial logits; labels the owners do not divide fall back to the
    partial sums, and a model other than a one-hidden-layer SparseMLP is not evaluated by labels."""
    from istjax.algorithms import exchange
    from istjax.core import shard

    hidden = 6 * p  # p owners x p workers divide it
    task = _task(hidden=hidden, classes=6)
    weights = xmc_loss.LabelWeights(np.linspace(1.0, 4.0, 6))
    task = istjax.classifier(task.module.clone(label_weights=weights), jnp.zeros((2, 5, 2), jnp.float32),
                             num_classes=6)
    params = jax.tree.map(lambda v: v + 0.1, task.init(jax.random.key(4)))  # nonzero biases too
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=p, local_steps=1, sampler=istjax.stratified(num_owners=p))
    leaves = alg.subnet.spec.leaves["params"]
    sizes = dict(task.spec.group_sizes)
    layouts = [shard.Layout(p, o, p, sizes, frozenset(sizes)) for o in range(p)]
    mine = jax.tree.map(lambda *parts: jnp.stack(parts),
                        *[jax.tree.map(lay.shard, leaves, params) for lay in layouts])
    assert mine["dense_out"]["kernel"].shape == (p, hidden // p, 6) and mine["dense_out"]["bias"].shape == (p, 6)
    test = jax.tree.map(lambda v: v[0, 0], _batches(np.random.default_rng(5), b=9, classes=6))
    want_loss, want_aux = task.evaluate(params, {}, test)
    c = tp.lax_collectives(p)
    for lay in layouts:
        assert exchange.owner_evaluate(task, lay, c).func.__name__ == "by_labels"
    got_loss, got_aux = jax.vmap(lambda prm: exchange.owner_evaluate(task, layouts[0], c)(prm, {}, test),
                                 axis_name=WORKERS)(mine)
    sums = jax.vmap(lambda o, prm: task.owner.evaluate(prm, {}, test, owner=o, num_owners=p, reduce=c.all_sum),
                    axis_name=WORKERS)(jnp.arange(p), mine)
    assert set(got_aux) == set(want_aux) == set(sums[1]) and "psp_at_1_numerator" in want_aux
    for got in ((got_loss, got_aux), sums):
        np.testing.assert_allclose(got[0], np.full(p, want_loss), rtol=2e-5)
        for k, v in want_aux.items():
            np.testing.assert_allclose(got[1][k], np.full(p, v), rtol=2e-5, err_msg=k)
    odd = _task(hidden=hidden, classes=7)  # 7 labels: no equal blocks, the partial sums
    lay = shard.Layout(p, 0, p, dict(odd.spec.group_sizes), frozenset(odd.spec.group_sizes))
    assert tp.owner_evaluate(odd, lay) is None and exchange.owner_evaluate(odd, lay, c) is not None
    mlp = _mlp_task()  # whole logits in tensor parallel's split: the partial sums
    assert tp.owner_evaluate(mlp, shard.Layout(2, 0, 2, dict(mlp.spec.group_sizes), frozenset(mlp.spec.group_sizes))) \
        is None


def test_ist_owners_of_a_deeper_sparse_mlp_are_evaluated_by_label_blocks():
    """Two hidden layers: the owners' parts (rows of every kernel) moved into tensor parallel's split by one
    all-to-all per leaf whose cut differs (dense_1 by rows, held so already; the output's label blocks) and an
    all-gather where the shard holds a leaf whole (hidden_1's bias): the whole model's evaluation."""
    from istjax.algorithms import exchange
    from istjax.core import shard

    p = 2
    model = SparseMLP(hidden=(8, 4), num_classes=6, num_features=12)
    task = istjax.classifier(model, jnp.zeros((2, 5, 2), jnp.float32), num_classes=6)
    params = jax.tree.map(lambda v: v + 0.1, task.init(jax.random.key(4)))
    sizes = dict(task.spec.group_sizes)
    layouts = [shard.Layout(p, o, p, sizes, frozenset(sizes)) for o in range(p)]
    mine = jax.tree.map(lambda *parts: jnp.stack(parts),
                        *[jax.tree.map(lay.shard, task.spec.leaves, params) for lay in layouts])
    test = jax.tree.map(lambda v: v[0, 0], _batches(np.random.default_rng(5), b=9, classes=6))
    want_loss, want_aux = task.evaluate(params, {}, test)
    c = tp.lax_collectives(p)
    by_labels = exchange.owner_evaluate(task, layouts[0], c)
    assert by_labels.func.__name__ == "by_labels"
    got_loss, got_aux = jax.vmap(lambda prm: by_labels(prm, {}, test), axis_name=WORKERS)(mine)
    np.testing.assert_allclose(got_loss, np.full(p, want_loss), rtol=2e-5)
    for k, v in want_aux.items():
        np.testing.assert_allclose(got_aux[k], np.full(p, v), rtol=2e-5, err_msg=k)


@pytest.mark.slow
@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed")
@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.exhaustive)])
def test_tensor_parallel_under_mpiexec_equals_single_process_training(n):
    """mpiexec -n 2 and -n 4, every family whose split comes from the model (one-hidden-layer and two-hidden-layer
    SparseMLP, a three-layer MLP with BatchNorm, a transformer, the MLP in bfloat16): gathered params and optimizer
    state, loss and evaluation equal single-process full-model training (bfloat16: within its rounding); measured
    bytes equal the analytic (traced) ones."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count=1 {FAST_COMPILE}",
               PYTHONPATH=str(ROOT))
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, str(ROOT / "tests" / "mpi" / "tensor_parallel.py")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    for family in ("sparse_mlp sgd", "sparse_mlp adam", "sparse_mlp_depth2 sgd", "mlp_depth3 adam",
                   "transformer adam"):
        assert f"OK {family}: params == single process" in out.stdout, family
        assert f"OK {family}: evaluation == single-process evaluation" in out.stdout, family
        assert f"OK {family}: measured bytes == analytic" in out.stdout, family
    assert "OK mlp_bfloat16 sgd: params within bfloat16's rounding" in out.stdout
    assert "refused" in out.stdout


def _train(workdir, *args, mpi=True, timeout=300):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    launch = [str(MPIEXEC), "-n", "2"] if mpi else []
    cmd = [*launch, sys.executable, "-m", "istjax.launch.cli", "train",
           "--config=experiments/configs/xmc_synthetic_ist.py", "--config.eval_every=2", "--config.checkpoint_every=2",
           f"--workdir={workdir}", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [json.loads(line) for line in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed")
def test_istjax_train_tensor_parallel_resumes_and_equals_data_parallel(tmp_path):
    """``mpiexec -n 2 istjax train --config.algorithm.name=tensor_parallel --config.runtime.name=mpi``: 2 rounds,
    resumed from its per-rank checkpoints to 4, records the same test loss and P@k as single-process data parallel
    on the same batches (the same W * B examples a step), and the analytic bytes."""
    tp_args = ("--config.algorithm.name=tensor_parallel", "--config.runtime.name=mpi")
    _train(tmp_path / "tp", *tp_args, "--config.num_rounds=2")
    got = _train(tmp_path / "tp", *tp_args, "--config.num_rounds=4", "--resume")
    assert (tmp_path / "tp" / "checkpoints" / "rank_1").is_dir()
    want = _train(tmp_path / "dp", "--config.algorithm.name=data_parallel", "--config.num_rounds=4", mpi=False)
    for g, w in zip(got, want):
        assert g["round"] == w["round"]
        for key in ("test_loss", "test_precision_at_1", "test_precision_at_5", "test_ndcg_at_5", "train_loss"):
            np.testing.assert_allclose(g[key], w[key], rtol=1e-5, err_msg=key)
    step = tp.step_bytes(2 * 128, 512, 2)
    assert got[-1]["bytes_sent_per_worker"] == 10 * step.sent
    assert got[-1]["bytes_received_per_worker"] == 10 * step.received


def test_a_model_whose_tensor_split_is_refused_is_evaluated_by_partial_sums():
    """IST's sharded owners of a transformer split by depth (whose tensor split is refused) are not evaluated by
    label blocks: `owner_evaluate` gives None, so the owner pass's partial sums are used, and nothing raises."""
    from istjax.core import shard

    model = istjax.models.Transformer(num_classes=11, num_layers=2, embed_dim=8, num_heads=2, mlp_dim=12, context=5,
                                      split="depth")
    task = istjax.classifier(model, jnp.zeros((2, 5), jnp.int32), num_classes=11)
    sizes = dict(task.spec.group_sizes)
    assert tp.owner_evaluate(task, shard.Layout(2, 0, 2, sizes, frozenset(sizes))) is None
    with pytest.raises(ArgError, match="split='width'"):
        tp.tensor_parallel_pieces(task, optax.sgd(0.1), num_workers=2, local_steps=1, batch_size=4)
