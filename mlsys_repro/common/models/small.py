"""Small image classifiers in flax NNX, shared by the papers that train real models on MNIST / CIFAR-10.

All models are stateless apart from their parameters (no BatchNorm running statistics), so a model splits into
``(graphdef, params)`` and :func:`pure` gives an ``apply(params, x)`` function that can be ``vmap``ped over stacked
parameters (one set per worker or client) and differentiated with ``jax.grad``.

Inputs are float32 ``[B, H, W, C]`` (see :func:`mlsys_repro.common.models.data.normalise`); outputs are logits
``[B, classes]``.

| name | layers | params (MNIST / CIFAR) |
|---|---|---|
| ``mlp`` | flatten, 200-200 ReLU, linear | 199,210 / 656,810 |
| ``lenet`` | conv5x5(6, same)-pool-conv5x5(16)-pool, 120-84 ReLU, linear (LeNet-5) | 61,706 / 83,126 |
| ``cnn`` | conv3x3(32)-pool-conv3x3(64)-pool, 128 ReLU, linear | 421,642 / 545,098 |
| ``convnet`` | 3 x [conv3x3(c)-GroupNorm-ReLU-pool], c = 32, 64, 128; global pool; linear | 94,410 / 94,986 |
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx


def _pool(x: jax.Array) -> jax.Array:
    return nnx.max_pool(x, window_shape=(2, 2), strides=(2, 2))


class MLP(nnx.Module):
    def __init__(self, in_shape: tuple[int, int, int], num_classes: int, *, rngs: nnx.Rngs, hidden: int = 200):
        d = in_shape[0] * in_shape[1] * in_shape[2]
        self.l1 = nnx.Linear(d, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        return self.out(jax.nn.relu(self.l2(jax.nn.relu(self.l1(x)))))


class LeNet(nnx.Module):
    def __init__(self, in_shape: tuple[int, int, int], num_classes: int, *, rngs: nnx.Rngs):
        h, w, c = in_shape
        self.c1 = nnx.Conv(c, 6, (5, 5), padding="SAME", rngs=rngs)
        self.c2 = nnx.Conv(6, 16, (5, 5), padding="VALID", rngs=rngs)
        hh, ww = (h // 2 - 4) // 2, (w // 2 - 4) // 2
        self.f1 = nnx.Linear(16 * hh * ww, 120, rngs=rngs)
        self.f2 = nnx.Linear(120, 84, rngs=rngs)
        self.out = nnx.Linear(84, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = _pool(jax.nn.relu(self.c1(x)))
        x = _pool(jax.nn.relu(self.c2(x)))
        x = x.reshape(x.shape[0], -1)
        return self.out(jax.nn.relu(self.f2(jax.nn.relu(self.f1(x)))))


class CNN(nnx.Module):
    def __init__(self, in_shape: tuple[int, int, int], num_classes: int, *, rngs: nnx.Rngs):
        h, w, c = in_shape
        self.c1 = nnx.Conv(c, 32, (3, 3), padding="SAME", rngs=rngs)
        self.c2 = nnx.Conv(32, 64, (3, 3), padding="SAME", rngs=rngs)
        self.f1 = nnx.Linear(64 * (h // 4) * (w // 4), 128, rngs=rngs)
        self.out = nnx.Linear(128, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = _pool(jax.nn.relu(self.c1(x)))
        x = _pool(jax.nn.relu(self.c2(x)))
        x = x.reshape(x.shape[0], -1)
        return self.out(jax.nn.relu(self.f1(x)))


class ConvNet(nnx.Module):
    """Three conv blocks with GroupNorm (no running statistics) and global average pooling."""

    def __init__(self, in_shape: tuple[int, int, int], num_classes: int, *, rngs: nnx.Rngs,
                 widths: tuple[int, ...] = (32, 64, 128)):
        c = in_shape[2]
        convs, norms = [], []
        for w in widths:
            convs.append(nnx.Conv(c, w, (3, 3), padding="SAME", rngs=rngs))
            norms.append(nnx.GroupNorm(w, num_groups=min(8, w), rngs=rngs))
            c = w
        self.convs = nnx.List(convs)
        self.norms = nnx.List(norms)
        self.out = nnx.Linear(c, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = _pool(jax.nn.relu(norm(conv(x))))
        return self.out(x.mean(axis=(1, 2)))


MODELS: dict[str, type[nnx.Module]] = {"mlp": MLP, "lenet": LeNet, "cnn": CNN, "convnet": ConvNet}


def make_model(name: str, in_shape: tuple[int, int, int], num_classes: int = 10, *, seed: int = 0,
               **kw) -> nnx.Module:
    """Build model ``name`` for inputs of shape ``in_shape`` (H, W, C), initialised from ``seed``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    return MODELS[name](tuple(in_shape), num_classes, rngs=nnx.Rngs(seed), **kw)


def pure(model: nnx.Module) -> tuple[Callable[[nnx.State, jax.Array], jax.Array], nnx.State]:
    """``(apply, params)`` with ``apply(params, x) -> logits`` a pure function of the parameter pytree."""
    graphdef, params = nnx.split(model, nnx.Param)

    def apply(p: nnx.State, x: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, p)(x)

    return apply, params


def init_params(name: str, in_shape: tuple[int, int, int], num_classes: int, seed: int) -> nnx.State:
    return pure(make_model(name, in_shape, num_classes, seed=seed))[1]


def num_params(params) -> int:
    return int(sum(x.size for x in jax.tree.leaves(params)))


def per_example_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy of each example, ``[B, C]`` logits and ``[B]`` integer labels -> ``[B]``."""
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy with integer labels."""
    return per_example_cross_entropy(logits, labels).mean()


def accuracy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return (logits.argmax(-1) == labels).mean()
