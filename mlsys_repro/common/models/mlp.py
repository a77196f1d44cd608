"""One multilayer perceptron for every paper that needs a plain stack of dense layers.

``MLP(sizes, rngs)`` is ``len(sizes) - 1`` :class:`flax.nnx.Linear` layers (``sizes[0] -> sizes[1] -> ...``) kept in
``self.layers``, with ``activation`` between them and, with ``activate_last``, after the last one too;
``final_scale`` multiplies the last layer's initial kernel (a small value starts a policy head near uniform).
The image classifiers with a fixed architecture (``mlsys_repro.common.models.small``) are separate: they take an image
shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, sizes: Sequence[int], rngs: nnx.Rngs, *, activation: Callable[[jax.Array], jax.Array] =
                 jax.nn.relu, activate_last: bool = False, final_scale: float = 1.0):
        if len(sizes) < 2:
            raise ValueError(f"an MLP needs at least an input and an output size, got {tuple(sizes)}")
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:], strict=True)])
        self.activation = activation
        self.activate_last = activate_last
        if final_scale != 1.0:
            last = self.layers[-1]
            last.kernel.set_value(last.kernel.get_value() * final_scale)

    def __call__(self, x: jax.Array) -> jax.Array:
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < n - 1 or self.activate_last:
                x = self.activation(x)
        return x


__all__ = ["MLP"]
