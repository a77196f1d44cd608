"""Image augmentations for SSL, in JAX: random resized crop, horizontal flip, colour jitter, grayscale.

All functions are pure and work on one image ``[H, W, C]`` in [0, 1] (``vmap`` over a batch with one key per
image); :func:`two_views` does the whole SimSiam/BYOL CIFAR pipeline for a batch of uint8 images and returns two
normalised views. Parameters follow the SimSiam CIFAR-10 recipe: crop scale (0.2, 1), ratio (3/4, 4/3), flip
p = 0.5, colour jitter (0.4, 0.4, 0.4, 0.1) with p = 0.8, grayscale p = 0.2, no blur.

Differences from torchvision (ours, for fixed shapes under jit): the crop box is drawn once and clipped to the
image instead of rejection-sampled ten times; resampling is bilinear without antialiasing (for an exact 2x
downscale it equals 2x2 average pooling); jitter ops run in a fixed order; hue is a rotation of the chroma
plane in YIQ space (the usual cheap approximation of an HSV hue shift).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

_LUMA = np.array([0.299, 0.587, 0.114], np.float32)
_RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], np.float32)
_YIQ2RGB = np.linalg.inv(_RGB2YIQ).astype(np.float32)


@dataclass(frozen=True)
class AugmentSpec:
    out_size: int
    scale: tuple[float, float] = (0.2, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    gray_p: float = 0.2

    def __post_init__(self) -> None:
        if self.out_size < 1:
            raise ValueError(f"out_size must be >= 1, got {self.out_size}")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"crop scale must satisfy 0 < lo <= hi <= 1, got {self.scale}")


def interp_matrix(start: jax.Array, length: jax.Array, out: int, size: int) -> jax.Array:
    """``[out, size]`` bilinear weights that sample ``out`` evenly spaced points of ``[start, start + length)``.

    Sample ``i`` sits at ``start + (i + 0.5) length / out - 0.5`` (pixel centres, clamped to the image), so a
    full-width box with ``out == size`` is the identity and ``out == size / 2`` averages pixel pairs.
    """
    pos = start + (jnp.arange(out) + 0.5) * (length / out) - 0.5
    pos = jnp.clip(pos, 0.0, size - 1.0)
    i0 = jnp.floor(pos)
    frac = (pos - i0)[:, None]
    i0 = i0.astype(jnp.int32)[:, None]
    i1 = jnp.minimum(i0 + 1, size - 1)
    grid = jnp.arange(size)[None, :]
    return (1 - frac) * (grid == i0) + frac * (grid == i1)


def crop_resize(img: jax.Array, top: jax.Array, left: jax.Array, h: jax.Array, w: jax.Array,
                out: int, flip: jax.Array | bool = False) -> jax.Array:
    """Bilinear resample of the box (top, left, h, w) (pixel units) to ``[out, out, C]``, optionally mirrored.

    Written as two small matmuls with interpolation matrices (rather than gathers): the same numbers, and it
    compiles and runs faster on XLA:CPU under ``vmap``.
    """
    wy = interp_matrix(top, h, out, img.shape[0])
    wx = interp_matrix(left, w, out, img.shape[1])
    wx = jnp.where(flip, wx[::-1], wx)
    return jnp.einsum("oh,hwc,pw->opc", wy, img, wx)


def resize(img: jax.Array, out: int) -> jax.Array:
    """Whole image to ``[out, out, C]`` (the evaluation view)."""
    H, W = img.shape[0], img.shape[1]
    return crop_resize(img, jnp.float32(0), jnp.float32(0), jnp.float32(H), jnp.float32(W), out)


def random_resized_crop(key: jax.Array, img: jax.Array, spec: AugmentSpec, flip: jax.Array | bool = False
                        ) -> jax.Array:
    H, W = img.shape[0], img.shape[1]
    ks, kr, ky, kx = jax.random.split(key, 4)
    area = H * W * jax.random.uniform(ks, (), minval=spec.scale[0], maxval=spec.scale[1])
    logr = jax.random.uniform(kr, (), minval=math.log(spec.ratio[0]), maxval=math.log(spec.ratio[1]))
    r = jnp.exp(logr)
    w = jnp.clip(jnp.sqrt(area * r), 1.0, W)
    h = jnp.clip(jnp.sqrt(area / r), 1.0, H)
    top = jax.random.uniform(ky, ()) * (H - h)
    left = jax.random.uniform(kx, ()) * (W - w)
    return crop_resize(img, top, left, h, w, spec.out_size, flip)


def grayscale(img: jax.Array) -> jax.Array:
    if img.shape[-1] == 1:
        return img
    return jnp.broadcast_to((img @ _LUMA)[..., None], img.shape)


def colour_jitter(key: jax.Array, img: jax.Array, spec: AugmentSpec) -> jax.Array:
    """Brightness, contrast, saturation, hue (fixed order), each factor uniform in [1 - s, 1 + s] (hue: +-h)."""
    kb, kc, ks, kh = jax.random.split(key, 4)

    def factor(k, s):
        return jax.random.uniform(k, (), minval=max(0.0, 1 - s), maxval=1 + s)

    img = jnp.clip(img * factor(kb, spec.brightness), 0, 1)
    mean = grayscale(img).mean()
    img = jnp.clip((img - mean) * factor(kc, spec.contrast) + mean, 0, 1)
    if img.shape[-1] == 3:
        g = grayscale(img)
        img = jnp.clip((img - g) * factor(ks, spec.saturation) + g, 0, 1)
        theta = 2 * jnp.pi * jax.random.uniform(kh, (), minval=-spec.hue, maxval=spec.hue)
        c, s = jnp.cos(theta), jnp.sin(theta)
        rot = jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
        img = jnp.clip(img @ (_YIQ2RGB @ rot @ _RGB2YIQ).T, 0, 1)
    return img


def augment(key: jax.Array, img: jax.Array, spec: AugmentSpec) -> jax.Array:
    """One SSL view of one image in [0, 1]: crop-resize, flip, jitter (p), grayscale (p)."""
    kc, kf, kj, kjp, kg = jax.random.split(key, 5)
    x = random_resized_crop(kc, img, spec, flip=jax.random.uniform(kf) < spec.flip_p)
    x = jnp.where(jax.random.uniform(kjp) < spec.jitter_p, colour_jitter(kj, x, spec), x)
    return jnp.where(jax.random.uniform(kg) < spec.gray_p, grayscale(x), x)


def normalise(x: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    return (x - mean) / std


def two_views(key: jax.Array, images_u8: jax.Array, spec: AugmentSpec, mean: jax.Array, std: jax.Array
              ) -> tuple[jax.Array, jax.Array]:
    """Two independently augmented, normalised views of a uint8 batch ``[B, H, W, C]``."""
    x = images_u8.astype(jnp.float32) / 255.0
    k1, k2 = jax.random.split(key)
    b = x.shape[0]
    v1 = jax.vmap(augment, in_axes=(0, 0, None))(jax.random.split(k1, b), x, spec)
    v2 = jax.vmap(augment, in_axes=(0, 0, None))(jax.random.split(k2, b), x, spec)
    return normalise(v1, mean, std), normalise(v2, mean, std)


def eval_view(images_u8: jax.Array, out_size: int, mean: jax.Array, std: jax.Array) -> jax.Array:
    """The deterministic view used for relation matrices, linear probes and fine-tuning inputs."""
    x = images_u8.astype(jnp.float32) / 255.0
    if x.shape[1] != out_size or x.shape[2] != out_size:
        x = jax.vmap(resize, in_axes=(0, None))(x, out_size)
    return normalise(x, mean, std)
