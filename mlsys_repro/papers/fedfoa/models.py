"""SSL networks in flax NNX: small conv encoders of different size, a projector of common output dimension d and
a predictor, kept as pure parameter dicts so that clients can be stacked and ``vmap``ped.

Convolutions are 3x3 'SAME' convolutions written as nine shifted slices and one matmul (im2col). The maths is the
same as ``nnx.Conv``; the reason is speed on XLA:CPU (measured in mlsys_repro/papers/fedfoa/bench.py and README.md): the
backward pass of ``lax.conv`` inside ``lax.scan`` and ``vmap`` over stacked kernels falls off the fast path
(~15x and ~4x slower), while slices and matmuls stay fast in both.

Encoders use GroupNorm (no batch statistics), so the representation of an image does not depend on its batch.
Projector and predictor heads use batch normalisation in training mode (statistics of the current batch, no
running averages), as BYOL and SimSiam do; heads are never used at evaluation time.

| arch | conv widths | representation | encoder params (RGB) | MFLOP/img fwd (16 px / 32 px) |
|---|---|---|---|---|
| ``cnn_s`` | 16-32-64 | 64 | 23.8 k | 1.4 / 5.6 |
| ``cnn_l`` | 32-64-128 | 128 | 93.6 k | 5.3 / 21 |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

Params = dict[str, Any]  # a pure nested dict of arrays (nnx.to_pure_dict of the module's Param state)

ARCHS: dict[str, tuple[int, ...]] = {"cnn_s": (16, 32, 64), "cnn_l": (32, 64, 128)}


def im2col3x3(x: jax.Array) -> jax.Array:
    """[B, H, W, C] -> [B, H, W, 9C]: the 3x3 'SAME' (zero-padded) neighbourhood of every pixel, (dy, dx, c) order."""
    _, h, w, _ = x.shape
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    return jnp.concatenate([xp[:, i:i + h, j:j + w, :] for i in range(3) for j in range(3)], axis=-1)


def max_pool2(x: jax.Array) -> jax.Array:
    """2x2 max pooling with stride 2 (H and W must be even)."""
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


class Conv3x3(nnx.Module):
    """3x3 stride-1 'SAME' convolution; ``kernel`` is the HWIO kernel flattened to [9 * in, out]."""

    def __init__(self, cin: int, cout: int, *, rngs: nnx.Rngs):
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (9 * cin, cout)))
        self.bias = nnx.Param(jnp.zeros((cout,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        return im2col3x3(x) @ self.kernel[...] + self.bias[...]


class BatchNorm(nnx.Module):
    """Batch normalisation with the statistics of the current batch (train mode only; no running averages)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        self.scale = nnx.Param(jnp.ones((dim,)))
        self.bias = nnx.Param(jnp.zeros((dim,)))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        mu = x.mean(axis=0)
        var = x.var(axis=0)
        return (x - mu) * jax.lax.rsqrt(var + self.eps) * self.scale[...] + self.bias[...]


class ConvEncoder(nnx.Module):
    """[conv3x3-GroupNorm-ReLU-maxpool] x (n-1), conv3x3-GroupNorm-ReLU, global average pool -> widths[-1] dims."""

    def __init__(self, in_channels: int, widths: tuple[int, ...], *, rngs: nnx.Rngs):
        convs, norms, c = [], [], in_channels
        for w in widths:
            convs.append(Conv3x3(c, w, rngs=rngs))
            norms.append(nnx.GroupNorm(w, num_groups=min(8, w), rngs=rngs))
            c = w
        self.convs = nnx.List(convs)
        self.norms = nnx.List(norms)

    def __call__(self, x: jax.Array) -> jax.Array:
        n = len(self.convs)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = jax.nn.relu(norm(conv(x)))
            if i < n - 1:
                x = max_pool2(x)
        return x.mean(axis=(1, 2))


class MLPHead(nnx.Module):
    """Linear - BatchNorm - ReLU - Linear (the BYOL/SimSiam projector and predictor shape)."""

    def __init__(self, din: int, hidden: int, dout: int, *, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(din, hidden, rngs=rngs)
        self.bn = BatchNorm(hidden)
        self.l2 = nnx.Linear(hidden, dout, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.bn(self.l1(x))))


class SSLNet(nnx.Module):
    """Encoder f, projector g (output dim d) and predictor q (d -> d; unused by SimCLR-like methods)."""

    def __init__(self, spec: NetSpec, *, rngs: nnx.Rngs):
        self.encoder = ConvEncoder(spec.in_channels, ARCHS[spec.arch], rngs=rngs)
        rep = ARCHS[spec.arch][-1]
        self.projector = MLPHead(rep, spec.hidden, spec.proj_dim, rngs=rngs)
        self.predictor = MLPHead(spec.proj_dim, spec.hidden, spec.proj_dim, rngs=rngs)


@dataclass(frozen=True)
class NetSpec:
    """Static description of one client architecture."""

    arch: str
    in_channels: int
    proj_dim: int
    hidden: int = 256

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown encoder arch {self.arch!r}; known: {sorted(ARCHS)}")
        if self.proj_dim < 2 or self.hidden < 1 or self.in_channels < 1:
            raise ValueError(f"bad NetSpec {self}: proj_dim >= 2, hidden >= 1 and in_channels >= 1 are required")

    @property
    def rep_dim(self) -> int:
        return ARCHS[self.arch][-1]


@dataclass(frozen=True)
class Net:
    """Pure functions of a parameter dict for one architecture (all ``vmap``-able over stacked params)."""

    spec: NetSpec
    init: Callable[[jax.Array], Params]  # key -> params
    encode: Callable[[Params, jax.Array], jax.Array]  # images [B,H,W,C] -> representation [B, rep]
    project: Callable[[Params, jax.Array], jax.Array]  # representation -> projection [B, d]
    predict: Callable[[Params, jax.Array], jax.Array]  # projection -> prediction [B, d]

    def embed(self, params: Params, x: jax.Array) -> jax.Array:
        """Images -> projector output z (the space relation matrices live in)."""
        return self.project(params, self.encode(params, x))


def make_net(spec: NetSpec) -> Net:
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: SSLNet(spec, rngs=nnx.Rngs(0))), nnx.Param)

    def init(key: jax.Array) -> Params:
        return nnx.to_pure_dict(nnx.split(SSLNet(spec, rngs=nnx.Rngs(key)), nnx.Param)[1])

    def module(p: Params) -> SSLNet:
        return nnx.merge(graphdef, p)

    return Net(
        spec=spec,
        init=init,
        encode=lambda p, x: module(p).encoder(x),
        project=lambda p, h: module(p).projector(h),
        predict=lambda p, z: module(p).predictor(z),
    )


def conv_kernels(params: Params) -> list[jax.Array]:
    """The encoder's conv kernels (what FedU/FedEMA measure divergence on, as the authors' code does)."""
    return [c["kernel"] for _, c in sorted(params["encoder"]["convs"].items())]


def num_params(tree: Any) -> int:
    return int(sum(x.size for x in jax.tree.leaves(tree)))
