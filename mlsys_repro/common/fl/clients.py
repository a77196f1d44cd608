"""Federated clients as stacked parameters: one pytree per architecture group, leading axis = client.

A :class:`Federation` assigns each of ``K`` clients an architecture by name, from
:data:`mlsys_repro.common.models.small.MODELS` or from a caller's registry of flax NNX classes with the same constructor
``(in_shape, num_classes, *, rngs)``; clients that share an architecture form a :class:`ClientGroup` whose parameters
are stacked along axis 0, so one ``vmap`` trains the whole group in a single step (heterogeneous federations run one
group after the other, inside the same ``jit``). Everything here is a pure function of arrays and can live inside
``lax.scan``:

* :func:`init_params` -- per-group stacked parameters from one PRNG key (``vmap``-able over seeds);
* :func:`local_train` -- ``steps`` minibatch steps on each client's private indices;
* :func:`distill` -- ``steps`` minibatch steps of soft-target cross-entropy on a shared public batch;
* :func:`predict` / :func:`evaluate` -- logits and accuracy of every client of a group.

Minibatches are drawn uniformly *with replacement* from the client's own indices (fixed shapes for any split);
``steps * batch_size / count`` is the number of local epochs. Per-client data never leaves these functions: the
server side of a protocol sees only what :mod:`mlsys_repro.common.fl.comm` records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mlsys_repro.common.models.small import MODELS, cross_entropy

Params = nnx.State
Apply = Callable[[Params, jax.Array], jax.Array]


@dataclass(frozen=True)
class ClientGroup:
    """Clients sharing one architecture: ``apply(params_of_one_client, x) -> logits``."""

    arch: str
    client_ids: tuple[int, ...]
    apply: Apply
    graphdef: nnx.GraphDef
    model_cls: type[nnx.Module]

    @property
    def size(self) -> int:
        return len(self.client_ids)


@dataclass(frozen=True)
class Federation:
    """``K`` clients grouped by architecture (groups ordered by their first client)."""

    groups: tuple[ClientGroup, ...]
    archs: tuple[str, ...]
    in_shape: tuple[int, int, int]
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.archs)

    @property
    def homogeneous(self) -> bool:
        return len(self.groups) == 1

    def _order(self) -> np.ndarray:
        ids = np.concatenate([np.asarray(g.client_ids) for g in self.groups])
        return np.argsort(ids)

    def scatter(self, per_group: Sequence[jax.Array]) -> jax.Array:
        """Per-group arrays ``[k_g, ...]`` -> one ``[K, ...]`` array in client order."""
        if len(per_group) != len(self.groups):
            raise ValueError(f"{len(per_group)} arrays for {len(self.groups)} groups")
        return jnp.concatenate(list(per_group), axis=0)[self._order()]

    def gather(self, per_client: jax.Array) -> list[jax.Array]:
        """A ``[K, ...]`` array in client order -> the per-group slices ``[k_g, ...]``."""
        if per_client.shape[0] != self.num_clients:
            raise ValueError(f"leading axis {per_client.shape[0]} != {self.num_clients} clients")
        return [per_client[np.asarray(g.client_ids)] for g in self.groups]


def _graphdef(cls: type[nnx.Module], in_shape: tuple[int, int, int], num_classes: int) -> nnx.GraphDef:
    abstract = nnx.eval_shape(lambda: cls(tuple(in_shape), num_classes, rngs=nnx.Rngs(0)))
    return nnx.split(abstract, nnx.Param)[0]


def make_federation(archs: Sequence[str], in_shape: Sequence[int], num_classes: int = 10,
                    registry: Mapping[str, type[nnx.Module]] | None = None) -> Federation:
    """A federation whose client ``k`` uses architecture ``archs[k]``.

    Names are looked up in ``registry`` (default :data:`mlsys_repro.common.models.small.MODELS`); every class must be a
    stateless-apart-from-``nnx.Param`` NNX module built as ``cls(in_shape, num_classes, rngs=...)``.
    """
    registry = MODELS if registry is None else registry
    archs = tuple(str(a) for a in archs)
    if not archs:
        raise ValueError("a federation needs at least one client")
    unknown = sorted(set(archs) - set(registry))
    if unknown:
        raise ValueError(f"unknown architectures {unknown}; known: {sorted(registry)}")
    in_shape = tuple(int(s) for s in in_shape)
    if len(in_shape) != 3:
        raise ValueError(f"in_shape must be (H, W, C), got {in_shape}")
    groups = []
    for arch in dict.fromkeys(archs):
        gd = _graphdef(registry[arch], in_shape, num_classes)

        def apply(p: Params, x: jax.Array, gd=gd) -> jax.Array:
            return nnx.merge(gd, p)(x)

        ids = tuple(k for k, a in enumerate(archs) if a == arch)
        groups.append(ClientGroup(arch, ids, apply, gd, registry[arch]))
    return Federation(tuple(groups), archs, in_shape, num_classes)  # type: ignore[arg-type]


def init_params(fed: Federation, key: jax.Array) -> tuple[Params, ...]:
    """Independent initialisations for every client: per group, a pytree with leading axis ``k_g``.

    A pure function of ``key`` (``jit``/``vmap`` friendly): client ``k`` is initialised from
    ``fold_in(key, k)`` whatever group it is in.
    """
    out = []
    for g in fed.groups:
        def one(k, cls=g.model_cls):
            m = cls(fed.in_shape, fed.num_classes, rngs=nnx.Rngs(k))
            return nnx.split(m, nnx.Param)[1]

        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.asarray(g.client_ids))
        out.append(jax.vmap(one)(keys))
    return tuple(out)


def broadcast(params: Params, k: int) -> Params:
    """``k`` copies of one parameter pytree, stacked along a new leading axis."""
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *a.shape)), params)


def soft_cross_entropy(logits: jax.Array, targets: jax.Array, temperature: float = 1.0) -> jax.Array:
    """Mean over rows of ``-sum_c t_c log softmax(logits / T)_c``, scaled by ``T**2`` (Hinton et al., 2015).

    ``targets`` are probability rows (they need not be one-hot). Equal to KL(t || softmax(z/T)) up to the
    targets' entropy, which does not depend on the student.
    """
    logp = jax.nn.log_softmax(logits / temperature, axis=-1)
    return -(targets * logp).sum(-1).mean() * temperature**2


def _sgd(loss: Callable, tx: optax.GradientTransformation, params: Params, opt_state, key: jax.Array,
         steps: int, sample: Callable[[jax.Array], tuple]):
    """``steps`` optimiser steps on ``loss(params, *sample(key_t))``; returns params, state, mean loss."""

    def step(carry, k):
        p, o = carry
        l, g = jax.value_and_grad(loss)(p, *sample(k))
        u, o = tx.update(g, o, p)
        return (optax.apply_updates(p, u), o), l

    (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), jax.random.split(key, steps))
    return params, opt_state, losses.mean()


def init_opt(tx: optax.GradientTransformation, params: Params):
    """Optimiser state for stacked parameters (one state per client)."""
    return jax.vmap(tx.init)(params)


def local_train(apply: Apply, tx: optax.GradientTransformation, params: Params, opt_state, key: jax.Array,
                x: jax.Array, y: jax.Array, idx: jax.Array, counts: jax.Array, *, steps: int,
                batch_size: int):
    """Supervised local training of every client of a group, in one vmapped ``lax.scan``.

    Args:
      apply: the group's ``apply``; params/opt_state: stacked ``[k, ...]``.
      key: one key (split per client).
      x, y: the whole training split ``[N, ...]`` / ``[N]`` (shared, not copied per client).
      idx, counts: ``[k, M]`` / ``[k]`` from :func:`mlsys_repro.common.fl.partition.pad_partitions`; client ``i``
        samples only ``idx[i, :counts[i]]``.
    Returns:
      ``(params, opt_state, mean_loss [k])``.
    """

    def one(p, o, k, ix, n):
        def sample(kk):
            j = ix[jax.random.randint(kk, (batch_size,), 0, n)]
            return x[j], y[j]

        return _sgd(lambda q, xb, yb: cross_entropy(apply(q, xb), yb), tx, p, o, k, steps, sample)

    keys = jax.random.split(key, idx.shape[0])
    return jax.vmap(one)(params, opt_state, keys, idx, counts)


def distill(apply: Apply, tx: optax.GradientTransformation, params: Params, opt_state, key: jax.Array,
            x: jax.Array, targets: jax.Array, *, steps: int, batch_size: int, temperature: float = 1.0,
            loss: Callable[[jax.Array, jax.Array], jax.Array] | None = None):
    """Every client of a group fits ``targets`` on the public inputs ``x`` ``[P, ...]``.

    ``targets`` is ``[P, C]`` (the same consensus for all clients) or ``[k, P, C]`` (one per client, e.g. a
    consensus that leaves the client's own vote out). ``loss(logits, targets)`` defaults to
    :func:`soft_cross_entropy` at ``temperature`` (targets are probabilities); pass e.g. an L1 loss to regress
    logits (FedMD's digest step). Returns ``(params, opt_state, mean_loss [k])``.
    """
    if loss is None:
        def loss(z, t):
            return soft_cross_entropy(z, t, temperature)

    k = jax.tree.leaves(params)[0].shape[0]
    per_client = targets.ndim == 3
    tgt = targets if per_client else jnp.broadcast_to(targets, (k, *targets.shape))

    def one(p, o, kk, t):
        def sample(ks):
            j = jax.random.randint(ks, (batch_size,), 0, x.shape[0])
            return x[j], t[j]

        return _sgd(lambda q, xb, tb: loss(apply(q, xb), tb), tx, p, o, kk, steps, sample)

    return jax.vmap(one)(params, opt_state, jax.random.split(key, k), tgt)


def predict(apply: Apply, params: Params, x: jax.Array, chunk: int | None = None) -> jax.Array:
    """Logits ``[k, n, C]`` of every client of a group on ``x`` ``[n, ...]`` (in chunks of ``chunk`` rows)."""
    f = jax.vmap(apply, in_axes=(0, None))
    if chunk is None or x.shape[0] <= chunk:
        return f(params, x)
    n = x.shape[0]
    pad = (-n) % chunk
    xs = jnp.concatenate([x, jnp.zeros((pad, *x.shape[1:]), x.dtype)]).reshape(-1, chunk, *x.shape[1:])
    out = jax.lax.map(lambda xb: f(params, xb), xs)  # [n_chunks, k, chunk, C]
    return jnp.moveaxis(out, 0, 1).reshape(out.shape[1], -1, out.shape[-1])[:, :n]


def evaluate(apply: Apply, params: Params, x: jax.Array, y: jax.Array, chunk: int | None = 1000) -> jax.Array:
    """Top-1 accuracy ``[k]`` of every client of a group on ``(x, y)``."""
    return (predict(apply, params, x, chunk).argmax(-1) == y[None]).mean(-1)
