"""mlsys_repro.common.fl: partitions (invariants, skew, bad input), stacked vmapped clients, FedAvg, byte-exact
ledger."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.fl.aggregate import fedavg
from mlsys_repro.common.fl.clients import (
    distill,
    evaluate,
    init_opt,
    init_params,
    local_train,
    make_federation,
    predict,
    soft_cross_entropy,
)
from mlsys_repro.common.fl.comm import KINDS, Ledger, bits_for, check_uint, nbytes, pack_uint, packed_size, unpack_uint
from mlsys_repro.common.fl.partition import (
    dirichlet_partition,
    iid_partition,
    label_histogram,
    pad_partitions,
    split_public,
)

LABELS = np.repeat(np.arange(10), 100)  # 1000 examples, 100 per class

# ------------------------------------------------------------------------------------------- partition


@given(k=st.integers(1, 30), alpha=st.sampled_from([0.05, 0.1, 0.5, 1.0, 10.0, None]), seed=st.integers(0, 99))
@settings(max_examples=40, deadline=None)
def test_partition_is_a_disjoint_cover(k, alpha, seed):
    parts = dirichlet_partition(LABELS, k, alpha, seed=seed)
    assert len(parts) == k and all(p.size >= 1 for p in parts)
    allidx = np.concatenate(parts)
    assert allidx.size == LABELS.size and np.array_equal(np.sort(allidx), np.arange(LABELS.size))


def test_partition_is_deterministic_and_seeded():
    a = dirichlet_partition(LABELS, 10, 0.5, seed=3)
    b = dirichlet_partition(LABELS, 10, 0.5, seed=3)
    c = dirichlet_partition(LABELS, 10, 0.5, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def _classes_per_client(alpha, seeds=range(5)):
    """Mean number of classes that make up 90 % of a client's data."""
    out = []
    for s in seeds:
        h = label_histogram(LABELS, dirichlet_partition(LABELS, 10, alpha, seed=s))
        share = np.sort(h, axis=1)[:, ::-1].cumsum(1) / h.sum(1, keepdims=True)
        out.append((share < 0.9).sum(1).mean() + 1)
    return float(np.mean(out))


def test_smaller_alpha_is_more_skewed():
    c01, c05, c1, iid = (_classes_per_client(a) for a in (0.1, 0.5, 1.0, None))
    assert c01 < c05 < c1 < iid
    assert c01 < 3.0 and iid == pytest.approx(9.0, abs=0.6)


def test_iid_is_balanced():
    sizes = [p.size for p in iid_partition(1000, 7, seed=0)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1000


@pytest.mark.parametrize("alpha", [0, -1.0, float("nan"), float("-inf")])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha must be > 0"):
        dirichlet_partition(LABELS, 5, alpha)


def test_more_clients_than_samples():
    with pytest.raises(ValueError, match="more clients"):
        dirichlet_partition(np.array([0, 1, 2]), 4, 0.5)
    with pytest.raises(ValueError, match="more clients"):
        iid_partition(3, 4)


@pytest.mark.parametrize("labels, msg", [
    (np.array([0, 1, 10]), "outside"), (np.array([0, -1, 2]), "outside"), (np.array([0.5, 1.0]), "integers"),
    (np.zeros((2, 2), int), "1-d"), (np.array([], int), "empty"),
])
def test_bad_labels(labels, msg):
    with pytest.raises(ValueError, match=msg):
        dirichlet_partition(labels, 1, 0.5, num_classes=10)


def test_min_per_client_unreachable_is_a_clear_error():
    with pytest.raises(ValueError, match="no Dirichlet"):
        dirichlet_partition(LABELS, 50, 0.01, min_per_client=20, max_tries=5)


def test_split_public_is_disjoint_and_stratified():
    priv, pub = split_public(LABELS, 200, seed=1)
    assert pub.size == 200 and priv.size == 800 and np.intersect1d(priv, pub).size == 0
    assert np.array_equal(np.bincount(LABELS[pub], minlength=10), np.full(10, 20))
    with pytest.raises(ValueError, match="n_public"):
        split_public(LABELS, 1000)


def test_pad_partitions():
    idx, n = pad_partitions([np.array([4, 5, 6]), np.array([9])], size=5)
    assert idx.shape == (2, 5) and list(n) == [3, 1]
    assert list(idx[0, :3]) == [4, 5, 6] and list(idx[1]) == [9] * 5
    with pytest.raises(ValueError, match="smaller"):
        pad_partitions([np.arange(6)], size=5)
    with pytest.raises(ValueError, match="no examples"):
        pad_partitions([np.arange(3), np.array([], int)])


# ------------------------------------------------------------------------------------------- clients

SHAPE = (12, 12, 1)


def _toy(n=400, seed=0):
    """Linearly separable toy images: class c lights up row c (rows 0-3)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n).astype(np.int32)
    x = rng.normal(0, 0.3, (n, *SHAPE)).astype(np.float32)
    x[np.arange(n), y * 3, :, 0] += 2.0
    return jnp.asarray(x), jnp.asarray(y)


def test_federation_groups_and_scatter_gather():
    fed = make_federation(["mlp", "lenet", "mlp", "lenet", "lenet"], SHAPE, 4)
    assert [g.arch for g in fed.groups] == ["mlp", "lenet"]
    assert fed.groups[0].client_ids == (0, 2) and fed.groups[1].client_ids == (1, 3, 4)
    per_client = jnp.arange(5) * 10
    parts = fed.gather(per_client)
    assert [list(p) for p in parts] == [[0, 20], [10, 30, 40]]
    assert list(fed.scatter(parts)) == list(per_client)
    with pytest.raises(ValueError, match="unknown architectures"):
        make_federation(["mlp", "resnet"], SHAPE)


def test_federation_with_a_custom_registry():
    from flax import nnx

    class Linear(nnx.Module):
        def __init__(self, in_shape, num_classes, *, rngs):
            self.l = nnx.Linear(int(np.prod(in_shape)), num_classes, rngs=rngs)

        def __call__(self, x):
            return self.l(x.reshape(x.shape[0], -1))

    fed = make_federation(["lin", "lin"], SHAPE, 4, registry={"lin": Linear})
    (params,) = init_params(fed, jax.random.key(0))
    assert predict(fed.groups[0].apply, params, jnp.zeros((3, *SHAPE))).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="unknown architectures"):
        make_federation(["mlp"], SHAPE, 4, registry={"lin": Linear})


def test_init_is_per_client_and_pure():
    fed = make_federation(["mlp", "lenet", "mlp"], SHAPE, 4)
    p1 = init_params(fed, jax.random.key(0))
    p2 = jax.jit(lambda k: init_params(fed, k))(jax.random.key(0))
    assert all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2), strict=True))
    w = max(jax.tree.leaves(p1[0]), key=lambda a: a.ndim)  # a kernel, not a zero-initialised bias
    assert w.shape[0] == 2 and not np.allclose(w[0], w[1])
    seeds = jax.vmap(lambda k: init_params(fed, k))(jax.random.split(jax.random.key(1), 3))
    assert jax.tree.leaves(seeds[0])[0].shape[:2] == (3, 2)


def test_local_train_uses_only_each_clients_own_data():
    """Client 0 holds only class 2, client 1 only class 0: each learns to predict its class everywhere."""
    x, y = _toy()
    fed = make_federation(["mlp", "mlp"], SHAPE, 4)
    (params,) = init_params(fed, jax.random.key(0))
    tx = optax.adam(1e-2)
    idx, counts = pad_partitions([np.flatnonzero(np.asarray(y) == 2), np.flatnonzero(np.asarray(y) == 0)])
    apply = fed.groups[0].apply
    params, _, loss = jax.jit(lambda p, o: local_train(apply, tx, p, o, jax.random.key(1), x, y, idx, counts,
                                                        steps=30, batch_size=16))(params, init_opt(tx, params))
    assert loss.shape == (2,)
    pred = predict(apply, params, x).argmax(-1)
    assert float((pred[0] == 2).mean()) > 0.95 and float((pred[1] == 0).mean()) > 0.95


def test_vmapped_group_equals_clients_trained_alone():
    x, y = _toy()
    fed = make_federation(["lenet", "lenet"], SHAPE, 4)
    (params,) = init_params(fed, jax.random.key(0))
    tx = optax.sgd(0.05)
    idx, counts = pad_partitions(iid_partition(400, 2, seed=0))
    apply = fed.groups[0].apply
    key = jax.random.key(5)
    both, _, _ = local_train(apply, tx, params, init_opt(tx, params), key, x, y, idx, counts, steps=5,
                             batch_size=8)
    k1 = jax.random.split(key, 2)[1]
    one = jax.tree.map(lambda a: a[1:], params)
    alone, _, _ = jax.vmap(lambda p, o, kk, ix, n: _one_client(apply, tx, p, o, kk, x, y, ix, n))(
        one, init_opt(tx, one), k1[None], idx[1:], counts[1:])
    for a, b in zip(jax.tree.leaves(both), jax.tree.leaves(alone), strict=True):
        np.testing.assert_allclose(a[1], b[0], rtol=1e-5, atol=1e-6)


def _one_client(apply, tx, p, o, k, x, y, ix, n):
    """Reference: the same sampling and SGD steps, written out for one client."""
    def step(c, kk):
        p, o = c
        j = ix[jax.random.randint(kk, (8,), 0, n)]
        g = jax.grad(lambda q: -jnp.take_along_axis(jax.nn.log_softmax(apply(q, x[j])), y[j][:, None], 1).mean())(p)
        u, o = tx.update(g, o, p)
        return (optax.apply_updates(p, u), o), None

    (p, o), _ = jax.lax.scan(step, (p, o), jax.random.split(k, 5))
    return p, o, 0.0


def test_distill_fits_the_targets():
    x, _ = _toy(200)
    fed = make_federation(["mlp", "mlp", "mlp"], SHAPE, 4)
    (params,) = init_params(fed, jax.random.key(0))
    tx = optax.adam(1e-2)
    targets = jax.nn.one_hot(jnp.full((200,), 3), 4) * 0.9 + 0.025
    apply = fed.groups[0].apply
    before = soft_cross_entropy(predict(apply, params, x), targets)
    params, _, _ = distill(apply, tx, params, init_opt(tx, params), jax.random.key(1), x, targets, steps=40,
                           batch_size=32, temperature=1.0)
    after = soft_cross_entropy(predict(apply, params, x), targets)
    assert after < before and float((predict(apply, params, x).argmax(-1) == 3).mean()) > 0.99
    per_client = jnp.stack([targets, targets, jnp.roll(targets, 1, axis=-1)])
    params, _, _ = distill(apply, tx, params, init_opt(tx, params), jax.random.key(2), x, per_client, steps=60,
                           batch_size=32)
    pred = predict(apply, params, x).argmax(-1)
    assert float((pred[2] == 0).mean()) > 0.95 and float((pred[0] == 3).mean()) > 0.95
    # a regression loss on logits (FedMD's digest): the clients' logits approach the target logits
    tgt_logits = jnp.zeros((200, 4)).at[:, 1].set(5.0)
    l1 = lambda z, t: jnp.abs(z - t).mean()
    params, _, _ = distill(apply, tx, params, init_opt(tx, params), jax.random.key(3), x, tgt_logits, steps=80,
                           batch_size=32, loss=l1)
    assert float(jnp.abs(predict(apply, params, x) - tgt_logits).mean()) < 0.5


def test_soft_cross_entropy_known_answer():
    logits = jnp.array([[0.0, 0.0]])
    assert float(soft_cross_entropy(logits, jnp.array([[1.0, 0.0]]))) == pytest.approx(np.log(2))
    assert float(soft_cross_entropy(logits * 2, jnp.array([[0.5, 0.5]]), temperature=2.0)) == pytest.approx(
        4 * np.log(2))


def test_predict_chunked_matches_and_evaluate():
    x, y = _toy(250)
    fed = make_federation(["mlp", "mlp"], SHAPE, 4)
    (params,) = init_params(fed, jax.random.key(0))
    apply = fed.groups[0].apply
    np.testing.assert_allclose(predict(apply, params, x, chunk=64), predict(apply, params, x), rtol=1e-5,
                               atol=1e-5)
    acc = evaluate(apply, params, x, y, chunk=100)
    ref = (predict(apply, params, x).argmax(-1) == y).mean(-1)
    np.testing.assert_allclose(acc, ref)


def test_fedavg_weighted_mean():
    stacked = {"w": jnp.array([[1.0, 2.0], [3.0, 6.0]]), "b": jnp.array([0.0, 4.0])}
    avg = fedavg(stacked, jnp.array([3.0, 1.0]))
    np.testing.assert_allclose(avg["w"], [1.5, 3.0])
    np.testing.assert_allclose(avg["b"], 1.0)
    np.testing.assert_allclose(fedavg(stacked)["b"], 2.0)
    with pytest.raises(ValueError, match="weights"):
        fedavg(stacked, jnp.ones(3))


# ------------------------------------------------------------------------------------------- comm


@given(bits=st.integers(1, 12), data=st.data())
@settings(max_examples=12, deadline=None)
def test_pack_roundtrip_and_size(bits, data):
    n = data.draw(st.integers(1, 70))
    vals = np.array(data.draw(st.lists(st.integers(0, 2**bits - 1), min_size=n, max_size=n)), np.int32)
    packed = pack_uint(jnp.asarray(vals), bits)
    assert packed.dtype == jnp.uint8 and packed.shape == (packed_size(n, bits),)
    np.testing.assert_array_equal(unpack_uint(packed, n, bits), vals)


def test_pack_batched_and_bits_for():
    vals = jnp.array([[9, 0, 3], [1, 2, 7]])
    np.testing.assert_array_equal(unpack_uint(pack_uint(vals, 4), 3, 4), vals)
    assert [bits_for(c) for c in (1, 2, 10, 16, 17, 100)] == [1, 1, 4, 4, 5, 7]
    with pytest.raises(ValueError, match="outside"):
        check_uint(np.array([3, 16]), 4)


def test_ledger_exact_bytes_and_kinds():
    led = Ledger()
    logits = jnp.zeros((3, 50, 10), jnp.float32)
    out = led.up("logits", [0, 1, 2], logits)
    assert out is logits
    led.down("consensus", [0, 1, 2], jnp.zeros((50, 10), jnp.float32), per_client=False)
    led.round = 1
    led.up("hard_labels", [0, 1, 2], pack_uint(jnp.zeros((3, 50), jnp.int32), 4))
    assert led.bytes("up", "logits", client=1) == 50 * 10 * 4
    assert led.bytes("down") == 3 * 50 * 10 * 4
    assert led.bytes("up", "hard_labels") == 3 * 25
    assert led.kinds("up") == {"logits", "hard_labels"}
    assert led.per_client_round("up") == (3 * 2000 + 3 * 25) / (3 * 2)
    with pytest.raises(ValueError, match="unknown payload kind"):
        led.up("gradients", [0], jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="leading axis"):
        led.up("logits", [0, 1], jnp.zeros((3, 2)))
    assert "params" in KINDS and nbytes({"a": jnp.zeros((2, 3), jnp.int8), "b": jnp.zeros(4)}) == 6 + 16


def test_ledger_trace_counts_without_computing():
    def round_fn(ledger, params, x):
        logits = ledger.up("logits", range(4), jnp.einsum("kd,nd->kn", params, x)[..., None].repeat(10, -1))
        return ledger.down("consensus", range(4), logits.mean(0), per_client=False)

    led = Ledger.trace(round_fn, jax.ShapeDtypeStruct((4, 8), jnp.float32), jax.ShapeDtypeStruct((30, 8),
                                                                                                 jnp.float32))
    assert led.bytes("up") == 4 * 30 * 10 * 4 and led.bytes("down") == 4 * 30 * 10 * 4
    rep = led.repeat(5)
    assert rep.rounds() == list(range(5)) and rep.per_client_round("up") == 30 * 10 * 4
