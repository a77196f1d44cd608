"""The federated loop: what each method exchanges and how clients update, checked on one compiled program.

All tests share the smoke-profile shape of ``experiment=fedfoa/headline`` with a public set (synthetic images of the
same sizes; the KD path compiled in, so not the smoke run's own program), and one trainer: it compiles once per module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.checkpoint import Checkpointer
from mlsys_repro.common.repro.config import build_context, compose_run
from mlsys_repro.common.repro.trainer import num_chunks
from mlsys_repro.papers.fedfoa import relation
from mlsys_repro.papers.fedfoa.federation import (
    ConfigurationError,
    FedShape,
    bytes_per_round,
    chunked_trainer,
    knobs,
    run_train,
)
from mlsys_repro.papers.fedfoa.fedssl_runs import health, make_shape, partitions
from mlsys_repro.papers.fedfoa.models import NetSpec, make_net, num_params
from mlsys_repro.papers.fedfoa.schemas import ClientGroupConfig, FederationHardware, FedSSLParams
from tests.fixtures.dying_checkpointer import DiesAfterFirstSave, Killed


@pytest.fixture(scope="module")
def setup():
    # headline has no public set (n_public = 0); the KD path needs one, as in `hetero`
    ctx = build_context(compose_run(["experiment=fedfoa/headline", "profile=smoke", "experiment.params.n_public=64"]))
    p = ctx.params
    shape = make_shape(ctx.hardware, p, 3, kd_path=True)
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), p.n_pool // 10)
    # images whose colour depends on the class, so there is something to learn
    base = rng.integers(0, 256, (10, 1, 1, 3))
    images = np.clip(base[labels] + rng.normal(0, 40, (p.n_pool, 32, 32, 3)), 0, 255).astype(np.uint8)
    public = rng.integers(0, 256, (p.n_public, 32, 32, 3), dtype=np.uint8)
    seeds = np.arange(2)
    idx, counts, _ = partitions(labels, shape.num_clients, p.alpha, seeds, p.min_per_client)
    args = (jax.vmap(jax.random.key)(jnp.asarray(seeds)), jnp.asarray(idx), jnp.asarray(counts), jnp.asarray(images),
            jnp.asarray(public), jnp.array([0.5, 0.5, 0.5]), jnp.array([0.25, 0.25, 0.25]))
    cache = {}
    # one trainer (jitted start/advance) for the module, as the experiments share one per shape through ctx.cache
    # (CI time: each run otherwise re-traces and re-lowers the program); `again` still executes afresh
    trainers = RunCache()

    def again(method, checkpointer=None, **kw):
        return jax.block_until_ready(run_train(shape, knobs(shape, method, **kw), *args, checkpointer=checkpointer,
                                               cache=trainers))

    def run(method, **kw):
        key = (method, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = again(method, **kw)
        return cache[key]

    run.again = again
    run.args = args
    run.trainers = trainers
    return shape, counts, run


def _leaves(t):
    return [np.asarray(x) for x in jax.tree.leaves(t)]


def test_fedavg_server_holds_the_weighted_mean(setup):
    shape, counts, run = setup
    out = run("fedavg")
    w = counts / counts.sum(-1, keepdims=True)
    for g, c in zip(_leaves(out.server.global_params), _leaves(out.clients[0].params), strict=True):
        np.testing.assert_allclose(g, np.einsum("sk,sk...->s...", w, c), rtol=1e-4, atol=1e-6)
    assert not bool(np.asarray(out.server.has_rel).any())  # nothing relational was exchanged


def test_local_exchanges_nothing(setup):
    shape, counts, run = setup
    loc, avg = run("local"), run("fedavg")
    k0 = np.asarray(loc.clients[0].params["encoder"]["convs"][0]["kernel"])
    assert not np.allclose(k0[:, 0], k0[:, 1])  # one common start, then each client trained on its own shard
    assert not bool(np.asarray(loc.server.has_rel).any()) and not bool(np.asarray(loc.server.has_cons).any())
    # the server's (unused) model is still the initial one: equal across methods that do not average
    for a, b in zip(_leaves(loc.server.global_params), _leaves(run("kd").server.global_params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(_leaves(avg.server.global_params)[0], _leaves(loc.server.global_params)[0])


def test_fedfoa_server_aggregates_the_uploaded_factors(setup):
    shape, counts, run = setup
    out = run("local", foa=True, calibrate=True)
    c = out.clients[0]
    assert bool(np.asarray(out.server.has_rel).all())
    for s in range(2):
        lg, _ = relation.aggregate(c.rel[s], jnp.asarray(counts[s], jnp.float32), c.rel_ok[s], shape.rank)
        np.testing.assert_allclose(out.server.rel_g[s], lg, atol=1e-4)
    st = out.stats
    assert np.all(np.asarray(st.step_scale)[:, 0] == 1.0)  # round 0: nothing to calibrate against yet
    scale = np.asarray(st.step_scale)[:, 1:]
    assert np.all((scale >= 0.1) & (scale <= 1.0)) and np.any(scale < 1.0)
    # alignment is optimised only with foa: the local run measures but does not reduce it
    assert np.asarray(st.align_loss)[:, -1].mean() < np.asarray(run("local").stats.align_loss)[:, -1].mean()


def test_fedema_first_mixing_weight_is_the_autoscaler_target(setup):
    shape, counts, run = setup
    out = run("fedema", ema_scaler_target=0.7)
    mu = np.asarray(out.stats.ema_mu)
    np.testing.assert_allclose(mu[:, 0], 0.0)  # round 0: everyone takes the global model
    np.testing.assert_allclose(mu[:, 1], 0.7, rtol=1e-5)  # mu = min(tau / d_0 * d_0, 1)


def test_fedu_dapu_follows_the_threshold(setup):
    shape, counts, run = setup
    always = np.asarray(run("fedu", dapu_threshold=1e9).stats.dapu_global)
    never = np.asarray(run("fedu", dapu_threshold=0.0).stats.dapu_global)
    assert always.all()
    assert never[:, 0].all() and not never[:, 1:].any()


def test_fedu_with_the_relative_threshold_is_not_fedbyol(setup):
    """mu = median round-0 divergence: some clients keep their local predictor, so FedU != FedBYOL."""
    shape, counts, run = setup
    fedu, avg = run("fedu", dapu_rel=1.0), run("fedavg")
    used = np.asarray(fedu.stats.dapu_global)[:, 1:]  # downloads after round 0
    assert used.any() and not used.all()
    mu = np.asarray(fedu.clients[0].dapu_mu)
    np.testing.assert_allclose(mu, mu[:, :1] * np.ones_like(mu))  # one broadcast threshold per run
    assert not np.allclose(_leaves(fedu.clients[0].params["predictor"])[0],
                           _leaves(avg.clients[0].params["predictor"])[0])
    with pytest.raises(ConfigurationError, match="dapu_rel"):
        knobs(shape, "fedu", dapu_rel=-1.0)


def test_monitor_runs_after_every_chunk_and_survives_a_kill(setup, tmp_path):
    shape, _, run = setup
    kn = knobs(shape, "local")

    def monitor(carry):
        return {"round": jnp.broadcast_to(carry.round, (2,)).astype(jnp.float32),
                "k0": carry.clients[0].params["encoder"]["convs"][0]["kernel"][:, 0, 0, 0]}

    monitor.eval_shape = lambda c: {"round": jax.ShapeDtypeStruct((2,), jnp.float32),
                                    "k0": jax.ShapeDtypeStruct((2,), jnp.float32)}
    whole = run_train(shape, kn, *run.args, monitor=monitor, cache=run.trainers)
    chunks = num_chunks(shape.rounds)
    np.testing.assert_array_equal(np.asarray(whole.monitor["round"]),
                                  np.tile(np.arange(1, chunks + 1) * (shape.rounds // chunks), (2, 1)))
    with pytest.raises(Killed):
        run_train(shape, kn, *run.args, checkpointer=DiesAfterFirstSave(tmp_path / "m"), monitor=monitor,
                  cache=run.trainers)
    resumed = run_train(shape, kn, *run.args, checkpointer=Checkpointer(tmp_path / "m"), monitor=monitor,
                        cache=run.trainers)
    for a, b in zip(_leaves(whole.monitor), _leaves(resumed.monitor), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(whole.monitor["k0"])[:, -1],
                                  np.asarray(whole.clients[0].params["encoder"]["convs"][0]["kernel"])[:, 0, 0, 0])


def test_kd_distils_towards_a_finite_consensus(setup):
    shape, counts, run = setup
    out = run("kd")
    kd = np.asarray(out.stats.kd_loss)
    assert np.all(kd[:, 0] == 0.0) and np.all(kd[:, 1:] > 0.0)
    cons = np.asarray(out.server.consensus)  # [S, P, P]: mean cosine-similarity matrix of the public set
    assert np.all(np.isfinite(cons))
    np.testing.assert_allclose(cons, np.swapaxes(cons, 1, 2), atol=1e-5)
    np.testing.assert_allclose(np.diagonal(cons, axis1=1, axis2=2), 1.0, atol=1e-4)
    assert cons.min() >= -1 - 1e-5 and cons.max() <= 1 + 1e-5


def test_divergence_is_nonfinite_safe_and_reported(setup):
    shape, counts, run = setup
    out = run("local", foa=True, calibrate=True, lr=1e30)
    hl = health(out, np.arange(2), "fedfoa")
    assert hl.bad_steps.sum() > 0 or hl.collapsed.sum() > 0
    assert hl.messages and "seed" in hl.messages[0]
    assert np.all(np.isfinite(np.asarray(out.server.rel_g)))  # collapsed clients never poison the aggregate


def test_runs_are_deterministic(setup):
    shape, counts, run = setup
    a = run("local", foa=True, calibrate=True)
    b = run.again("local", foa=True, calibrate=True)
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    cache = RunCache()
    assert chunked_trainer(shape, cache) is chunked_trainer(shape, cache)  # one executable per shape and run
    assert chunked_trainer(shape, cache).chunks == num_chunks(shape.rounds)


def test_resume_after_a_kill_is_bit_identical(setup, tmp_path):
    shape, _, run = setup
    assert num_chunks(shape.rounds) == shape.rounds > 1  # smoke: one round per chunk, so the kill is mid-run
    whole = run("local", foa=True, calibrate=True)
    with pytest.raises(Killed):
        run.again("local", checkpointer=DiesAfterFirstSave(tmp_path / "ck"), foa=True, calibrate=True)
    ck = Checkpointer(tmp_path / "ck")
    assert ck.latest_step() == 1
    resumed = run.again("local", checkpointer=ck, foa=True, calibrate=True)
    for x, y in zip(_leaves(whole), _leaves(resumed), strict=True):
        np.testing.assert_array_equal(x, y)


def test_parameter_averaging_needs_homogeneous_models():
    hw = FederationHardware(name="mix", kind="fedssl_federation",
                            clients=[ClientGroupConfig("cnn_s", 2, 16), ClientGroupConfig("cnn_l", 2, 16)])
    shape = make_shape(hw, FedSSLParams(), 3, kd_path=True)
    for m in ("fedavg", "fedu", "fedema"):
        with pytest.raises(ConfigurationError, match="homogeneous"):
            knobs(shape, m)
    knobs(shape, "local", foa=True)
    knobs(shape, "kd")
    homog = FedShape(groups=((NetSpec("cnn_s", 3, 16), 2),))
    knobs(homog, "fedavg", backbone="simsiam")  # FedSimSiam
    with pytest.raises(ConfigurationError, match="BYOL"):
        knobs(homog, "fedema", backbone="simsiam")
    with pytest.raises(ConfigurationError, match="kd_path"):
        knobs(homog, "kd")
    with pytest.raises(ConfigurationError, match="calibrate"):
        knobs(shape, "local", calibrate=True)


def test_mismatched_projector_dims_fail_before_training():
    with pytest.raises(relation.RelationShapeError, match="projector output dimension"):
        FedShape(groups=((NetSpec("cnn_s", 3, 64), 2), (NetSpec("cnn_l", 3, 32), 2)))


def test_bytes_per_round_are_exact():
    s = NetSpec("cnn_s", 3, 64)
    small = FedShape(groups=((s, 2),), rank=16, kd_path=True)
    large = FedShape(groups=((NetSpec("cnn_l", 3, 64), 2),), rank=16, kd_path=True)
    full = num_params(jax.eval_shape(make_net(s).init, jax.random.key(0)))
    assert bytes_per_round(small, "fedavg", False)["up"] == 4 * full
    assert bytes_per_round(small, "local", False) == {"up": 0.0, "down": 0.0}
    assert bytes_per_round(small, "local", True)["up"] == 4 * 64 * 16
    assert bytes_per_round(large, "local", True) == bytes_per_round(small, "local", True)  # model-size free
    assert bytes_per_round(small, "kd", False, num_public=100) == {"up": 4 * 100 * 64, "down": 4 * 100 * 100}
    assert bytes_per_round(small, "fedema", True)["down"] == 4 * full + 4 * 64 * 16


def test_kd_path_without_a_public_set_is_an_error(setup):
    shape, _, run = setup
    key, idx, counts, images, _, mean, std = run.args
    empty = jnp.zeros((0, 32, 32, 3), jnp.uint8)
    with pytest.raises(ConfigurationError, match="public set"):
        run_train(shape, knobs(shape, "kd"), key, idx, counts, images, empty, mean, std)
