"""Surrogate extraction: the server trains a copy of the target on the (public input, upload) pairs it receives.

Every round of an FD protocol the server receives the target's upload on the round's public batch (hard labels for
LabelAvg, probabilities for DS-FL, logits for FedMD): over ``R`` rounds that is ``R x P`` labelled examples for free,
without a single extra query (:func:`mlsys_repro.papers.labelavg.fd.make_train` records them with ``record=``).
The server fits a model of the target's architecture to them (soft cross-entropy toward the upload read as a
distribution: one-hot labels, the probabilities, or the softmax of the logits) and then inverts the surrogate with
exact gradients (``attack.make_attack``, attacker ``surrogate``: the same generator, prior and search subspace as
the other attackers).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import optax

from mlsys_repro.common.fl.clients import distill, init_opt, init_params, make_federation
from mlsys_repro.papers.labelavg.attack import VIEW
from mlsys_repro.papers.labelavg.models import REGISTRY


def transcript_targets(method: str, seen: jax.Array, num_classes: int) -> jax.Array:
    """The server's recorded view of uploads (labels ``[..., n]`` or scores ``[..., n, C]``) as soft targets
    ``[..., n, C]``: one-hot labels (LabelAvg), probabilities as sent (DS-FL), softmax of logits (FedMD)."""
    m = VIEW[method]
    if m == "labelavg":
        return jax.nn.one_hot(seen, num_classes)
    if m == "dsfl":
        return seen
    return jax.nn.softmax(seen, axis=-1)


def make_surrogate(arch: str, in_shape: tuple[int, int, int], num_classes: int, *, steps: int, batch_size: int,
                   lr: float) -> tuple[Callable, Callable]:
    """``(apply, train)`` for a surrogate of architecture ``arch``.

    ``train(key, x [N, ...], targets [N, C]) -> params`` is pure (``vmap`` it over seeds): a fresh model (the server
    does not know the client's initialisation), ``steps`` Adam steps of soft cross-entropy on minibatches of
    ``batch_size`` drawn with replacement from the ``N`` recorded pairs.
    """
    fed = make_federation([arch], in_shape, num_classes, REGISTRY)
    g = fed.groups[0]
    tx = optax.adam(lr)

    def train(key: jax.Array, x: jax.Array, targets: jax.Array):
        k_init, k_fit = jax.random.split(key)
        (params,) = init_params(fed, k_init)  # [1, ...]
        params, _, _ = distill(g.apply, tx, params, init_opt(tx, params), k_fit, x, targets[None], steps=steps,
                               batch_size=batch_size)
        return jax.tree.map(lambda a: a[0], params)

    return g.apply, train


def agreement(apply_a: Callable, params_a, apply_b: Callable, params_b, x: jax.Array) -> jax.Array:
    """Share of the inputs ``x`` on which two models give the same top-1 label."""
    return (apply_a(params_a, x).argmax(-1) == apply_b(params_b, x).argmax(-1)).mean()
