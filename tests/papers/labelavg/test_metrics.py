"""PSNR / SSIM in jnp: known answers, bounds and the closest-private-image matching."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.labelavg.metrics import closest_match, membership_advantage, psnr, public_references, ssim


def test_psnr_known_answers():
    a = jnp.zeros((8, 8, 1))
    assert float(psnr(a, a + 0.1)) == pytest.approx(20.0, abs=1e-4)  # MSE 0.01
    assert float(psnr(a, a)) == 100.0  # capped
    assert float(psnr(a, a + 1.0)) == pytest.approx(0.0, abs=1e-6)


def test_ssim_of_constant_images_has_a_closed_form():
    """Zero variances: SSIM = (2ab + C1) / (a^2 + b^2 + C1)."""
    a, b, c1 = 0.2, 0.7, 0.01**2
    got = float(ssim(jnp.full((16, 16, 1), a), jnp.full((16, 16, 1), b)))
    # float32: the variances E[x^2] - mu^2 cancel only to ~1e-7, which C2 = 9e-4 turns into ~1e-4 relative
    assert got == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-3)


def test_ssim_identity_symmetry_and_monotone_in_noise():
    x = jax.random.uniform(jax.random.key(0), (28, 28, 3))
    assert float(ssim(x, x)) == pytest.approx(1.0, abs=1e-5)
    y = jnp.clip(x + 0.05 * jax.random.normal(jax.random.key(1), x.shape), 0, 1)
    z = jnp.clip(x + 0.3 * jax.random.normal(jax.random.key(2), x.shape), 0, 1)
    assert float(ssim(x, y)) == pytest.approx(float(ssim(y, x)), rel=1e-5)
    assert 1.0 > float(ssim(x, y)) > float(ssim(x, z)) > -1.0
    assert ssim(jnp.stack([x, y]), x).shape == (2,)


def test_ssim_matches_a_direct_2d_convolution():
    """The separable filter equals a full 11x11 Gaussian window (Wang et al.'s reference definition)."""
    from scipy.signal import convolve2d

    rng = np.random.default_rng(0)
    a, b = rng.uniform(size=(20, 20)), rng.uniform(size=(20, 20))
    g = np.exp(-((np.arange(11) - 5.0) ** 2) / (2 * 1.5**2))
    w = np.outer(g, g) / np.outer(g, g).sum()
    f = lambda x: convolve2d(x, w, mode="valid")
    mu_a, mu_b = f(a), f(b)
    saa, sbb, sab = f(a * a) - mu_a**2, f(b * b) - mu_b**2, f(a * b) - mu_a * mu_b
    c1, c2 = 0.01**2, 0.03**2
    ref = (((2 * mu_a * mu_b + c1) * (2 * sab + c2)) / ((mu_a**2 + mu_b**2 + c1) * (saa + sbb + c2))).mean()
    assert float(ssim(jnp.asarray(a)[..., None], jnp.asarray(b)[..., None])) == pytest.approx(ref, rel=1e-4)


def test_closest_match_respects_the_mask():
    rng = np.random.default_rng(1)
    target = rng.uniform(size=(12, 12, 1)).astype(np.float32)
    cands = rng.uniform(size=(1, 4, 12, 12, 1)).astype(np.float32)
    cands[0, 2] = target  # exact copy, but masked out
    cands[0, 1] = np.clip(target + 0.02, 0, 1)
    mask = np.array([[True, True, False, True]])
    p, s, best = closest_match(jnp.asarray(target)[None], jnp.asarray(cands), jnp.asarray(mask))
    assert int(best[0]) == 1 and float(p[0]) < 100.0 and float(s[0]) > 0.9
    p2, _, best2 = closest_match(jnp.asarray(target)[None], jnp.asarray(cands), jnp.ones((1, 4), bool))
    assert int(best2[0]) == 2 and float(p2[0]) == 100.0



def _const(v, shape=(12, 12, 1)):
    return np.full(shape, v, np.float32)


def test_membership_advantage_has_known_values_and_sign():
    """Each side keeps its best match; the advantage is their difference (dB), with the sign of the closer side."""
    recon = jnp.asarray(_const(0.0))[None]
    private = jnp.asarray(np.stack([_const(0.1), _const(0.5)]))[None]  # best: MSE 0.01 -> 20 dB
    nonmember = jnp.asarray(np.stack([_const(0.2), _const(0.3)]))[None]  # best: MSE 0.04 -> 13.98 dB
    mask = jnp.ones((1, 2), bool)
    p_priv, s_priv, _ = closest_match(recon, private, mask)
    p_non, s_non, _ = closest_match(recon, nonmember, mask)
    assert float(p_priv[0]) == pytest.approx(20.0, abs=1e-4)
    assert float(p_non[0]) == pytest.approx(10 * np.log10(1 / 0.04), abs=1e-4)
    assert float(membership_advantage(p_priv, p_non)[0]) == pytest.approx(20.0 - 10 * np.log10(25.0), abs=1e-4)
    # the other way round: closer to a non-member than to any private image -> negative
    assert float(membership_advantage(p_non, p_priv)[0]) < 0
    # a reconstruction that equals one private image: SSIM 1 and PSNR capped on the private side
    x = jax.random.uniform(jax.random.key(3), (12, 12, 1))
    priv = jnp.stack([x, jnp.clip(x + 0.3, 0, 1)])[None]
    non = jnp.stack([jnp.clip(x + 0.1, 0, 1), 1 - x])[None]
    pp, sp, _ = closest_match(x[None], priv, mask)
    pn, sn, _ = closest_match(x[None], non, mask)
    assert float(sp[0]) == pytest.approx(1.0, abs=1e-5) and float(pp[0]) == 100.0
    assert float(membership_advantage(pp, pn)[0]) > 0 and float(membership_advantage(sp, sn)[0]) > 0
    # equidistant sides (an image that carries only class information): no advantage
    mid = jnp.asarray(_const(0.5))[None]
    sym_p = jnp.asarray(np.stack([_const(0.4), _const(0.9)]))[None]
    sym_n = jnp.asarray(np.stack([_const(0.6), _const(0.0)]))[None]
    a = membership_advantage(closest_match(mid, sym_p, mask)[0], closest_match(mid, sym_n, mask)[0])
    assert float(a[0]) == pytest.approx(0.0, abs=1e-3)


def test_public_references_are_the_class_mean_and_the_most_typical_public_image():
    x = jnp.asarray(np.stack([_const(0.2), _const(0.4), _const(0.35), _const(0.9), _const(0.7)]))
    y = jnp.asarray([0, 0, 0, 1, 1])
    mean, nearest = public_references(x, y, jnp.asarray([1, 0, 0]))
    np.testing.assert_allclose(np.asarray(mean[0]), 0.8, atol=1e-6)
    np.testing.assert_allclose(np.asarray(mean[1]), (0.2 + 0.4 + 0.35) / 3, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(nearest[1]), _const(0.35))  # |0.35 - 0.3167| is the smallest
    assert float(jnp.abs(nearest[0] - 0.9).max()) < 1e-6 or float(jnp.abs(nearest[0] - 0.7).max()) < 1e-6
    # known PSNR of the mean to a class member: MSE (0.2 - 0.95 / 3)^2
    assert float(psnr(mean[1], x[0])) == pytest.approx(-10 * np.log10((0.2 - 0.95 / 3) ** 2), abs=1e-3)
