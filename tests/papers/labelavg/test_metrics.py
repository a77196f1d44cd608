"""PSNR / SSIM in jnp: known answers, bounds and the closest-private-image matching."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.labelavg.metrics import closest_match, psnr, ssim


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

