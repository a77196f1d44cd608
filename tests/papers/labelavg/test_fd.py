"""The federated protocols: exactly what crosses the client/server boundary per method, and that runs learn."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mlsys_repro.common.fl.clients import make_federation
from mlsys_repro.common.fl.comm import bits_for, packed_size
from mlsys_repro.common.fl.partition import dirichlet_partition, pad_partitions
from mlsys_repro.common.models.small import num_params
from mlsys_repro.papers.labelavg import fd as FD
from mlsys_repro.papers.labelavg import methods as M
from mlsys_repro.papers.labelavg.experiments import last_quarter_gain, plateaued
from mlsys_repro.papers.labelavg.fd import make_round, make_train, pooled, traffic
from mlsys_repro.papers.labelavg.models import REGISTRY
from mlsys_repro.papers.labelavg.schemas import FDPolicy, FDSchedule

SHAPE, C, K = (12, 12, 1), 4, 4
SCHED = FDSchedule(n_train=500, n_public=100, n_test=100, public_batch=40, rounds=3, local_steps=15,
                   distill_steps=8, batch_size=16, lr=3e-3, curve_n_test=50, min_per_client=5)


def toy_data(seed=0):
    """Separable 4-class images (class c brightens rows 3c..3c+2); private pool, public set and test set."""
    rng = np.random.default_rng(seed)

    def make(n):
        y = rng.integers(0, C, n).astype(np.int32)
        x = rng.normal(0, 0.5, (n, *SHAPE)).astype(np.float32)
        for r in range(3):
            x[np.arange(n), 3 * y + r, :, 0] += 1.5
        return jnp.asarray(x), jnp.asarray(y)

    (xt, yt), (xp, yp), (xs, ys) = make(400), make(100), make(100)
    return {"x_train": xt, "y_train": yt, "x_pub": xp, "y_pub": yp, "x_test": xs, "y_test": ys}


def policy(method, **kw):
    order = "distill_first" if method == "fedmd" else "train_first"
    return FDPolicy(name=method, method=method, order=order, server_steps=5 if method == "feddf" else 0, **kw)


FEDMD_LABELLED = dict(pretrain_public_steps=7)


def fed_for(method):
    archs = ["mlp"] * K if method == "fedavg" else ["mlp", "conv_s2"] * (K // 2)
    return make_federation(archs, SHAPE, C, REGISTRY)


def shapes(data):
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in data.items()}


@pytest.mark.parametrize("method", M.METHODS)
def test_what_crosses_the_boundary(method):
    """Payload kinds and exact bytes per client per round; FD servers never receive parameters or private data."""
    fed = fed_for(method)
    led = traffic(fed, policy(method), SCHED, C, shapes(toy_data()), 400)
    P = SCHED.public_batch
    up = {m.kind for m in led.select("up")}
    down = {m.kind for m in led.select("down")}
    assert "private_data" not in up | down
    per_client_up = {c: led.bytes("up", client=c) for c in range(K)}
    if method in M.FD_METHODS:
        assert "params" not in up and up == {M.UPLOAD_KIND[method]}
        expect = packed_size(P, bits_for(C)) if method == "labelavg" else P * C * 4
        assert set(per_client_up.values()) == {expect}
        votes = packed_size(P * C, bits_for(K + 1))
        assert led.bytes("down", client=0) == P * 4 + (votes if method == "labelavg" else P * C * 4)
        assert down == {"public_indices", M.DOWNLOAD_KIND[method]}
    elif method in M.REFERENCE_METHODS:
        assert up == down == set() and led.per_client_round("up") == led.per_client_round("down") == 0
    else:
        assert up == down == {"params"}
        sizes = {g.arch: 4 * num_params(REGISTRY[g.arch](SHAPE, C, rngs=nnx.Rngs(0)))
                 for g in fed.groups}
        for g in fed.groups:
            for c in g.client_ids:
                assert per_client_up[c] == sizes[g.arch] == led.bytes("down", client=c)


def test_hard_labels_are_64x_smaller_than_logits_for_4_classes():
    data = shapes(toy_data())
    la = traffic(fed_for("labelavg"), policy("labelavg"), SCHED, C, data, 400)
    md = traffic(fed_for("fedmd"), policy("fedmd"), SCHED, C, data, 400)
    # 4 classes: 2 bits vs 4 x 32 bits per public sample -> 64x
    assert md.per_client_round("up") / la.per_client_round("up") == 64


@pytest.mark.parametrize("method", M.FD_METHODS)
def test_server_sees_only_the_decoded_uploads(method, monkeypatch):
    seen = []
    real = M.server_aggregate

    def spy(m, decoded, num_classes, **kw):
        seen.append((decoded.shape, str(decoded.dtype)))
        return real(m, decoded, num_classes, **kw)

    monkeypatch.setattr(M, "server_aggregate", spy)
    fed = fed_for(method)
    traffic(fed, policy(method), SCHED, C, shapes(toy_data()), 400)
    P = SCHED.public_batch
    assert seen == [((K, P), "int32")] if method == "labelavg" else seen == [((K, P, C), "float32")]


def _splits(data, seeds, alpha=0.5):
    y = np.asarray(data["y_train"])
    pads = [pad_partitions(dirichlet_partition(y, K, alpha, seed=s, min_per_client=5), size=y.size) for s in seeds]
    return jnp.asarray(np.stack([p[0] for p in pads])), jnp.asarray(np.stack([p[1] for p in pads]))


def test_labelavg_run_learns_and_vmaps_over_seeds():
    data = toy_data()
    fed = fed_for("labelavg")
    idx, counts = _splits(data, [0, 1])
    train = jax.jit(jax.vmap(make_train(fed, policy("labelavg"), SCHED, C), in_axes=(0, 0, 0, None)))
    out = train(jnp.stack([jax.random.key(0), jax.random.key(1)]), idx, counts, data)
    assert out["acc"].shape == (2, K) and out["curve"].shape == (2, SCHED.rounds)
    assert np.isfinite(np.asarray(out["curve"])).all()
    assert float(out["acc"].mean()) > 0.8  # far above chance (0.25) on the separable toy task
    leaf = jax.tree.leaves(out["params"])[0]
    assert not np.allclose(leaf[0], leaf[1])  # seeds differ (the toy task is solved by both, so compare weights)


@pytest.mark.parametrize("method", M.PARAM_METHODS)
def test_parameter_methods_end_with_one_model_per_architecture(method):
    data = toy_data()
    fed = fed_for(method)
    idx, counts = _splits(data, [3])
    out = jax.jit(make_train(fed, policy(method), SCHED, C))(jax.random.key(3), idx[0], counts[0], data)
    for p in out["params"]:
        for leaf in jax.tree.leaves(p):
            np.testing.assert_array_equal(leaf[0], leaf[-1])  # every client holds the downloaded group model
    assert float(out["acc"].mean()) > 0.6


def test_round_rejects_nothing_silently():
    with pytest.raises(ValueError, match="method must be"):
        FDPolicy(name="x", method="fedprox")
    with pytest.raises(ValueError, match="public_batch"):
        FDSchedule(n_train=100, n_public=10, public_batch=20)
    assert callable(make_round(fed_for("dsfl"), policy("dsfl"), SCHED, C))


@pytest.mark.parametrize("method", M.METHODS)
def test_every_method_gets_the_same_private_step_budget(method, monkeypatch):
    """Warm-up and per-round private steps are the schedule's, for every method; only FedMD's own policy adds
    labelled public steps (its published protocol), and ``fedmd`` without them is information-matched."""
    calls = []
    real = FD.local_train

    def spy(apply, tx, params, opt, key, x, y, idx, counts, *, steps, batch_size):
        calls.append(("public" if x.shape[0] == 100 else "private", steps))
        return real(apply, tx, params, opt, key, x, y, idx, counts, steps=steps, batch_size=batch_size)

    monkeypatch.setattr(FD, "local_train", spy)
    sched = FDSchedule(**{**SCHED.__dict__, "warmup_steps": 11})
    data = toy_data()
    idx, counts = _splits(data, [0])
    for pol in [policy(method)] + ([policy(method, **FEDMD_LABELLED)] if method == "fedmd" else []):
        calls.clear()
        jax.eval_shape(make_train(fed_for(method), pol, sched, C), jax.random.key(0), idx[0], counts[0], data)
        groups = len(fed_for(method).groups)
        expect = [("private", 11)] * groups + [("private", SCHED.local_steps)] * groups  # warm-up, one round
        if pol.pretrain_public_steps:
            expect = [("public", 7)] * groups + expect
        assert calls == expect


def test_central_reference_pools_every_private_sample_and_beats_local_on_skewed_splits():
    idx = jnp.asarray([[3, 1, 0, 0], [2, 0, 0, 0]], jnp.int32)
    full, n = pooled(idx, jnp.asarray([2, 1], jnp.int32), 4)
    np.testing.assert_array_equal(full, [[0, 1, 2, 3], [0, 1, 2, 3]])
    np.testing.assert_array_equal(n, [4, 4])
    with pytest.raises(ValueError, match="fewer than"):
        pooled(idx, jnp.asarray([2, 1], jnp.int32), 5)
    data = toy_data()
    idx, counts = _splits(data, [0], alpha=0.05)  # nearly one class per client
    acc = {m: float(jax.jit(make_train(fed_for(m), policy(m), SCHED, C))(jax.random.key(0), idx[0], counts[0],
                                                                          data)["acc"].mean())
           for m in ("local", "central")}
    assert acc["central"] > 0.9 and acc["central"] > acc["local"] + 0.2


def test_plateau_gate_known_answers():
    rising = np.tile(np.linspace(0.5, 0.9, 12), (3, 1))  # +0.036 per round: +0.109 over the last 3 rounds
    flat = np.tile(np.r_[np.linspace(0.5, 0.9, 8), [0.9, 0.905, 0.91, 0.915]], (3, 1))
    np.testing.assert_allclose(last_quarter_gain(rising[0]), 0.4 * 3 / 11)
    assert not plateaued(rising) and plateaued(flat)
    assert plateaued(flat[:, ::-1] * 0 + np.linspace(0.9, 0.8, 12))  # falling curves have stopped improving
    noisy = flat + np.array([[0.03], [-0.03], [0.0]]) * (np.arange(12) == 11)  # seed noise cancels in the mean
    assert plateaued(noisy)
    with pytest.raises(ValueError, match="rounds >= 2"):
        plateaued(np.zeros((3, 1)))


@pytest.mark.parametrize("method", M.FD_METHODS)
def test_recorded_transcript_is_what_the_server_decodes(method, monkeypatch):
    """``record=k``: each round's public indices and the server's decoded view of client k's upload (no more)."""
    seen_by_server = []
    real = M.server_aggregate

    def spy(m, decoded, num_classes, **kw):  # inside the jitted scan: the callback hands each round's array out
        jax.debug.callback(lambda d: seen_by_server.append(np.asarray(d)), decoded, ordered=True)
        return real(m, decoded, num_classes, **kw)

    monkeypatch.setattr(M, "server_aggregate", spy)
    fed = fed_for(method)  # groups: mlp clients [0, 2], conv clients [1, 3]; the server concatenates by group
    data = toy_data()
    idx, counts = _splits(data, [0])
    # one compile (CI time): the whole run, one record per round
    out = jax.jit(make_train(fed, policy(method), SCHED, C, record=2))(jax.random.key(0), idx[0], counts[0], data)
    view = np.asarray(out["seen"]["view"])
    P = SCHED.public_batch
    assert len(seen_by_server) == SCHED.rounds
    for r in range(SCHED.rounds):
        np.testing.assert_array_equal(view[r], seen_by_server[r][1])  # client 2 = group 0, position 1
    assert out["seen"]["idx"].shape == (SCHED.rounds, P)
    assert view.shape == ((SCHED.rounds, P) if method == "labelavg" else (SCHED.rounds, P, C))
    if method == "dsfl":
        np.testing.assert_allclose(view.sum(-1), 1.0, rtol=1e-5)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="FD method"):
        make_round(fed_for("fedavg"), policy("fedavg"), SCHED, C, record=0)
    assert "seen" not in jax.eval_shape(make_train(fed, policy(method), SCHED, C), jax.random.key(0), idx[0],
                                        counts[0], data)
