"""L-Attack: query delivery through the public batch, the estimators, black-box access only, that it works; the
white-box reference in the black-box attackers' subspace; surrogate extraction."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.labelavg.attack import (
    AttackSetup,
    deliver,
    directions,
    extract,
    make_attack,
    make_attacks,
    make_view,
    sign_gradient,
    subspace_project,
    view_labels,
    view_loss,
    zo_gradient,
)
from mlsys_repro.papers.labelavg.schemas import AttackConfig
from mlsys_repro.papers.labelavg.surrogate import agreement, make_surrogate, transcript_targets

SHAPE, C = (6, 6, 1), 3
W = jax.random.normal(jax.random.key(42), (36, C)) * 0.5


def apply_t(w, x):
    """A toy 'client model': linear logits."""
    return x.reshape(x.shape[0], -1) @ w


def test_deliver_hides_queries_and_extract_reads_them_back():
    pub = jnp.arange(100 * 36, dtype=jnp.float32).reshape(100, *SHAPE)
    q = -jnp.ones((8, *SHAPE)) * jnp.arange(1, 9)[:, None, None, None]
    batch, pos = deliver(jax.random.key(0), pub, q, 0.2)
    assert batch.shape[0] == 40 and len(set(np.asarray(pos).tolist())) == 8
    np.testing.assert_array_equal(extract(batch, pos), q)
    assert int((batch.reshape(40, -1)[:, 0] >= 0).sum()) == 32  # the rest are real public samples
    with pytest.raises(ValueError, match="public rows"):
        deliver(jax.random.key(0), pub[:10], q, 0.2)


@pytest.mark.parametrize("method", ["labelavg", "dsfl", "fedmd", "feddf"])
def test_answers_through_the_public_batch_equal_direct_answers(method):
    """Each row of an upload depends only on its own input, so hidden queries get their own answers."""
    view = make_view(method, apply_t, C)
    pub = jax.random.normal(jax.random.key(1), (50, *SHAPE))
    q = jax.random.normal(jax.random.key(2), (5, *SHAPE))
    batch, pos = deliver(jax.random.key(3), pub, q, 0.25)
    np.testing.assert_allclose(extract(view(W, batch), pos), view(W, q), rtol=1e-5, atol=1e-5)  # float reassociation
    out = view(W, q)
    if method == "labelavg":
        assert out.dtype == jnp.int32 and out.shape == (5,)  # the server only ever sees labels
    else:
        assert out.shape == (5, C)


def test_zo_gradient_estimates_a_linear_gradient():
    a = jax.random.normal(jax.random.key(0), (2, 36))
    loss = lambda q: (q.reshape(2, -1, 36) * a[:, None]).sum(-1).reshape(-1)
    x = jnp.zeros((2, *SHAPE))
    g = zo_gradient(loss, x, jax.random.key(1), q=4000, mu=1e-2).reshape(2, 36)
    cos = (g * a).sum(-1) / (jnp.linalg.norm(g, axis=-1) * jnp.linalg.norm(a, axis=-1))
    assert (np.asarray(cos) > 0.9).all()


def test_zo_on_hard_labels_is_zero_away_from_boundaries():
    """The plain L-Attack sees a piecewise-constant 0-1 loss: its finite differences vanish."""
    view = make_view("labelavg", apply_t, C)
    x = 5.0 * jnp.sign(W[:, 0]).reshape(1, *SHAPE)  # deep inside class 0
    y = jnp.array([1])
    g = zo_gradient(lambda q: view_loss("labelavg", view(W, q), jnp.repeat(y, q.shape[0])), x, jax.random.key(0),
                    q=50, mu=1e-3)
    assert float(jnp.abs(g).max()) == 0.0


def test_sign_gradient_points_toward_the_target_class():
    """The smoothed-sign estimator moves a point across the decision boundary using labels only."""
    view = make_view("labelavg", apply_t, C)
    x = jnp.zeros((1, *SHAPE))
    target = jnp.array([2])
    hit = lambda q: view_labels("labelavg", view(W, q)) == jnp.repeat(target, q.shape[0])
    for i in range(30):
        x = x - 0.5 * sign_gradient(hit, x, jax.random.key(i), q=64, delta=1.0)
    assert int(view(W, x)[0]) == 2


def _cfg(**kw):
    base = dict(images_per_class=2, latent_dim=8, steps=150, directions=10, lr=1e-2, tv_weight=0.0, l2_weight=0.0,
                min_class_count=1)
    return AttackConfig(**{**base, **kw})


def _setup(method, attacker, **kw):
    return AttackSetup(method, attacker, SHAPE, C, (0.0,), (1.0,), _cfg(**kw))


@pytest.mark.parametrize("attacker", ["zo", "whitebox"])
def test_attack_on_logits_makes_the_target_agree(attacker):
    atk = jax.jit(make_attack(_setup("fedmd", attacker), apply_t))
    _, ys, rate0 = jax.jit(make_attack(_setup("fedmd", "init"), apply_t))(jax.random.key(0), W)
    x, ys, rate = atk(jax.random.key(0), W)
    assert x.shape == (6, *SHAPE) and ys.tolist() == [0, 0, 1, 1, 2, 2]
    assert float(rate.mean()) == 1.0 and float(rate0.mean()) < 1.0


def test_repeated_attacks_are_independent_runs_of_the_single_attack():
    """Repeats sample the same attack (own generator, codes, directions, full budget each); they pool no queries."""
    keys = jax.random.split(jax.random.key(0), (2, 3))
    params = jnp.stack([W, -W])  # one target per seed
    # whitebox: exact gradients, so batched and single runs agree to float rounding; zo divides differences of
    # losses by mu = 1e-3, which turns the batched program's different rounding into ~1e-3 of a pixel on average
    for attacker, atol in (("whitebox", 1e-5), ("zo", 3e-3)):
        setup = _setup("fedmd", attacker, steps=5)
        x, ys, rate = make_attacks(setup, apply_t)(keys, params)
        assert x.shape == (2, 3, 6, *SHAPE) and rate.shape == (2, 3, 6) and ys.tolist() == [0, 0, 1, 1, 2, 2]
        one = jax.jit(make_attack(setup, apply_t))
        for s in range(2):
            for r in range(3):
                xs, _, _ = one(keys[s, r], params[s])
                assert float(jnp.abs(x[s, r] - xs).mean()) < atol, attacker
        assert float(jnp.abs(x[0, 0] - x[0, 1]).max()) > 0.05  # the repeats are different attacks
    with pytest.raises(ValueError, match="repeats"):
        _cfg(repeats=0)


def test_black_box_attackers_never_differentiate_the_client_model():
    """The client model is a host callback without derivatives: zo and sign run, whitebox cannot."""
    w_np = np.asarray(W)

    def opaque(_, x):
        spec = jax.ShapeDtypeStruct((x.shape[0], C), jnp.float32)
        return jax.pure_callback(lambda xx: (np.asarray(xx).reshape(xx.shape[0], -1) @ w_np).astype(np.float32),
                                 spec, x)

    for attacker in ("zo", "sign"):
        x, _, rate = make_attack(_setup("fedmd", attacker, steps=3), opaque)(jax.random.key(0), W)
        assert np.isfinite(np.asarray(x)).all()
    with pytest.raises(Exception, match="(?i)pure_callback|differentiat|jvp"):
        make_attack(_setup("fedmd", "whitebox", steps=3), opaque)(jax.random.key(0), W)


def test_queries_and_rounds_accounting():
    s = _setup("labelavg", "zo", steps=100, directions=9, images_per_class=2, query_fraction=0.2)
    assert s.queries_per_step == 6 * 10
    assert s.rounds_needed(public_batch=300) == int(np.ceil(6 * 10 * 100 / 60))
    assert _setup("labelavg", "whitebox").queries_per_step == 0


def test_low_resolution_directions_are_smooth_and_full_resolution_is_plain_gaussian():
    """``res`` draws directions on a coarse grid (AutoZOOM): neighbouring pixels then move together."""
    key = jax.random.key(0)
    full = directions(key, 2, 3, (28, 28, 1), res=0)
    low = directions(key, 2, 3, (28, 28, 1), res=7)
    assert full.shape == low.shape == (2, 3, 784)
    np.testing.assert_array_equal(directions(key, 2, 3, (6, 6, 1), res=7), directions(key, 2, 3, (6, 6, 1), res=0))

    def neighbour_corr(u):
        img = np.asarray(u).reshape(-1, 28, 28)
        a, b = img[:, :, :-1].ravel(), img[:, :, 1:].ravel()
        return np.corrcoef(a, b)[0, 1]

    assert neighbour_corr(low) > 0.8 and abs(neighbour_corr(full)) < 0.1


# ---------------------------------------------------------------- the white-box reference in the black-box subspace
SHAPE12, RES = (12, 12, 1), 3
W12 = jax.random.normal(jax.random.key(7), (144, C)) * 0.3


def _basis(shape, res):
    """The upsampling operator U [H*W, res*res] of ``directions`` (bilinear, one channel)."""
    eye = jnp.eye(res * res).reshape(res * res, res, res, 1)
    return np.asarray(jax.image.resize(eye, (res * res, *shape), method="bilinear").reshape(res * res, -1)).T


def test_projected_gradient_lies_in_the_subspace_and_is_the_zo_expectation():
    u = _basis(SHAPE12, RES)
    g = jax.random.normal(jax.random.key(0), (2, *SHAPE12))
    pg = np.asarray(subspace_project(g, RES)).reshape(2, -1)
    coef, *_ = np.linalg.lstsq(u, pg.T, rcond=None)
    np.testing.assert_allclose(u @ coef, pg.T, atol=1e-4)  # in the range of U
    np.testing.assert_allclose(pg.T, u @ (u.T @ np.asarray(g).reshape(2, -1).T), rtol=1e-4, atol=1e-5)  # = U U^T g
    # the zo estimator with the same low-resolution directions estimates exactly this projection
    a = np.asarray(g).reshape(2, -1)
    loss = lambda q: (q.reshape(2, -1, 144) * a[:, None]).sum(-1).reshape(-1)
    est = np.asarray(zo_gradient(loss, jnp.zeros((2, *SHAPE12)), jax.random.key(1), q=20000, mu=1e-2, res=RES))
    est = est.reshape(2, -1)
    cos = (est * pg).sum(-1) / (np.linalg.norm(est, axis=-1) * np.linalg.norm(pg, axis=-1))
    assert (cos > 0.95).all()
    np.testing.assert_array_equal(subspace_project(g, 0), g)  # full resolution: the plain gradient
    np.testing.assert_array_equal(subspace_project(g, 12), g)


def _objective(x, w, ys, cfg):
    """What every attacker minimises: mean cross-entropy of the target + the image prior (normalised units)."""
    logits = apply_t(w, x)
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), ys[:, None], -1).mean()
    tv = jnp.abs(jnp.diff(x, axis=-3)).mean() + jnp.abs(jnp.diff(x, axis=-2)).mean()
    return float(ce + cfg.tv_weight * tv + cfg.l2_weight * jnp.mean(x**2))


def test_whitebox_reaches_at_least_the_black_box_objective_on_a_linear_model():
    """Same generator, prior, subspace, steps and keys: exact projected gradients end at least as low as the zo
    estimate, on average over 16 independent attacks (within the budget, before either has converged; once both
    converge they tie up to the optimiser's noise)."""
    cfg = _cfg(steps=20, directions=10, lr=1e-2, tv_weight=0.05, l2_weight=1e-3, direction_res=RES,
               images_per_class=1)
    keys = jax.random.split(jax.random.key(0), (1, 16))
    res = {}
    for attacker in ("zo", "whitebox", "init"):
        setup = AttackSetup("fedmd", attacker, SHAPE12, C, (0.0,), (1.0,), cfg)
        x, ys, _ = make_attacks(setup, apply_t)(keys, W12[None])
        res[attacker] = np.mean([_objective(x[0, k], W12, ys, cfg) for k in range(16)])
    assert res["whitebox"] <= res["zo"] < res["init"], res


# ---------------------------------------------------------------- surrogate extraction
def _separable(n, key):
    """Inputs whose labels are the linear target's argmax: a separable task by construction."""
    x = jax.random.normal(key, (n, *SHAPE))
    return x, apply_t(W, x).argmax(-1)


def test_surrogate_trained_on_hard_labels_agrees_with_the_target():
    x, y = _separable(600, jax.random.key(0))
    targets = transcript_targets("labelavg", y, C)
    np.testing.assert_array_equal(np.asarray(targets.sum(-1)), 1.0)
    apply_s, train = make_surrogate("mlp", SHAPE, C, steps=300, batch_size=32, lr=3e-3)
    params = jax.jit(train)(jax.random.key(1), x, targets)
    x_new, _ = _separable(500, jax.random.key(2))  # held out
    agree = float(agreement(apply_s, params, apply_t, W, x_new))
    assert agree > 0.85, agree
    # vmapped over seeds, and its inversion makes the real target agree more often than the untrained generator
    ps = jax.jit(jax.vmap(train, in_axes=(0, None, None)))(jax.random.split(jax.random.key(3), 2), x, targets)
    keys = jax.random.split(jax.random.key(4), (2, 2))
    setup = _setup("labelavg", "surrogate", steps=100, lr=1e-2)
    _, _, rate = make_attacks(setup, apply_t, apply_s)(keys, jnp.stack([W, W]), ps)
    _, _, rate0 = make_attacks(_setup("labelavg", "init"), apply_t)(keys, jnp.stack([W, W]))
    assert float(rate.mean()) > float(rate0.mean()) + 0.3
    assert setup.queries_per_step == 0  # the transcript is free: no queries
    with pytest.raises(ValueError, match="grad_apply"):
        make_attack(setup, apply_t)


def test_transcript_targets_per_upload():
    logits = jnp.asarray([[2.0, 0.0, -1.0]])
    np.testing.assert_allclose(transcript_targets("fedmd", logits, C), jax.nn.softmax(logits), rtol=1e-6)
    probs = jax.nn.softmax(logits)
    np.testing.assert_array_equal(transcript_targets("dsfl", probs, C), probs)
    np.testing.assert_array_equal(transcript_targets("labelavg", jnp.asarray([2]), C), [[0.0, 0.0, 1.0]])
