"""Client architectures: the shared :data:`common.models.small.MODELS` plus one CPU-cheap convolutional net.

``conv_s2`` (two stride-2 3x3 convolutions, 8 and 16 channels, then a linear layer; 8,010 parameters on MNIST)
gives the heterogeneous federations a convolutional member at a fraction of LeNet-5's cost: on 2 CPU cores a
vmapped LeNet-5 step over 10 clients costs ~10x a vmapped MLP step, which the default profile cannot afford.
"""

from __future__ import annotations

import jax
from flax import nnx

from common.models.small import MODELS


class ConvS2(nnx.Module):
    def __init__(self, in_shape: tuple[int, int, int], num_classes: int, *, rngs: nnx.Rngs,
                 widths: tuple[int, int] = (8, 16)):
        h, w, c = in_shape
        self.c1 = nnx.Conv(c, widths[0], (3, 3), strides=(2, 2), padding="SAME", rngs=rngs)
        self.c2 = nnx.Conv(widths[0], widths[1], (3, 3), strides=(2, 2), padding="SAME", rngs=rngs)
        self.out = nnx.Linear(widths[1] * ((h + 3) // 4) * ((w + 3) // 4), num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jax.nn.relu(self.c2(jax.nn.relu(self.c1(x))))
        return self.out(x.reshape(x.shape[0], -1))


REGISTRY: dict[str, type[nnx.Module]] = {**MODELS, "conv_s2": ConvS2}
