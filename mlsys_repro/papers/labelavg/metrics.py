"""Reconstruction quality in jnp: PSNR and SSIM (Wang et al., 2004), closest-image matching, and the
membership-sensitive comparison (private vs non-member images) with the no-upload public references.

Images are float ``[H, W, C]`` in ``[0, 1]`` (pixel units, data range 1). SSIM uses the reference settings:
an 11x11 Gaussian window with sigma 1.5, K1 = 0.01, K2 = 0.03, 'valid' filtering, averaged over the map and
the channels.

Membership. A reconstruction of class ``c`` is scored against the target's private images of class ``c`` and
against an equal number of same-class **non-member** images (never in any client); each side keeps its best match.
Taking the best of ``n`` candidates grows with ``n``, so both sides get the same ``n`` and the *membership
advantage* ``best(private) - best(non-member)`` is zero in expectation for an image that carries only class
information (e.g. the public class mean), and positive only if the reconstruction is closer to the private data
than to other images of its class.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

K1, K2, WIN, SIGMA = 0.01, 0.03, 11, 1.5


def psnr(a: jax.Array, b: jax.Array) -> jax.Array:
    """``10 log10(1 / MSE)`` in dB for images in [0, 1] (capped at 100 dB for identical images)."""
    mse = jnp.mean((a - b) ** 2, axis=(-3, -2, -1))
    return jnp.minimum(10.0 * jnp.log10(1.0 / jnp.maximum(mse, 1e-10)), 100.0)


def _gauss1d(size: int = WIN, sigma: float = SIGMA) -> jax.Array:
    x = jnp.arange(size, dtype=jnp.float32) - (size - 1) / 2
    g = jnp.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _filter(x: jax.Array) -> jax.Array:
    """Separable Gaussian filter, 'valid' borders: ``[..., H, W, C] -> [..., H-10, W-10, C]``."""
    g = _gauss1d()
    h, w = x.shape[-3], x.shape[-2]
    rows = sum(g[i] * x[..., i: h - WIN + 1 + i, :, :] for i in range(WIN))
    return sum(g[i] * rows[..., :, i: w - WIN + 1 + i, :] for i in range(WIN))


def ssim(a: jax.Array, b: jax.Array) -> jax.Array:
    """Mean SSIM of ``a`` and ``b`` ``[..., H, W, C]`` (broadcasting over leading axes); 1 for equal images."""
    c1, c2 = K1**2, K2**2
    a, b = jnp.broadcast_arrays(a, b)
    mu_a, mu_b = _filter(a), _filter(b)
    s_aa = _filter(a * a) - mu_a**2
    s_bb = _filter(b * b) - mu_b**2
    s_ab = _filter(a * b) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * s_ab + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (s_aa + s_bb + c2)
    return (num / den).mean(axis=(-3, -2, -1))


def closest_match(recon: jax.Array, candidates: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Best PSNR and best SSIM of each reconstruction against its own candidate set.

    Args:
      recon: ``[B, H, W, C]`` reconstructions.
      candidates: ``[B, N, H, W, C]`` private images of each reconstruction's class (padded).
      mask: ``[B, N]`` which candidates are real.
    Returns:
      ``(psnr [B], ssim [B], argmax_psnr [B])``: the maxima over real candidates (each metric's own closest).
    """
    p = jax.vmap(lambda r, c: psnr(r[None], c))(recon, candidates)
    s = jax.vmap(lambda r, c: ssim(r[None], c))(recon, candidates)
    p = jnp.where(mask, p, -jnp.inf)
    s = jnp.where(mask, s, -jnp.inf)
    return p.max(-1), s.max(-1), p.argmax(-1)


def membership_advantage(private_score: jax.Array, nonmember_score: jax.Array) -> jax.Array:
    """Best match to the private images minus best match to as many same-class non-member images (per image).

    Positive: the reconstruction is closer to the target's private data than to other images of its class
    (membership-specific leakage); zero in expectation for an image that carries class information only.
    """
    return private_score - nonmember_score


def public_references(x_pub: jax.Array, y_pub: jax.Array, classes: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The no-upload references for each slot's class: the public class mean and the public image nearest to it.

    Args:
      x_pub: ``[N, H, W, C]`` public images (pixel units); y_pub: ``[N]`` their labels.
      classes: ``[B]`` the class of each slot.
    Returns:
      ``(mean [B, H, W, C], nearest [B, H, W, C])``: the mean public image of the class, and the real public image
      of the class with the smallest squared distance to that mean (the most typical one).
    """
    num_classes = int(max(int(y_pub.max()), int(classes.max()))) + 1
    onehot = jax.nn.one_hot(y_pub, num_classes)  # [N, K]
    n = onehot.sum(0)
    means = jnp.einsum("nk,nhwc->khwc", onehot, x_pub) / jnp.maximum(n, 1)[:, None, None, None]
    d = ((x_pub[None] - means[:, None]) ** 2).sum((-3, -2, -1))  # [K, N]
    d = jnp.where(onehot.T > 0, d, jnp.inf)
    nearest = x_pub[d.argmin(-1)]
    return means[classes], nearest[classes]
