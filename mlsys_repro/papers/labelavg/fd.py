"""One federated run of any method: ``make_train(fed, policy, sched, C) -> train(key, idx, counts, data)``.

The whole protocol -- warm-up, then ``sched.rounds`` rounds -- is one ``lax.scan`` under one ``jit``; seeds are
``vmap``ped over ``(key, idx, counts)`` (the Dirichlet split differs per seed, the data arrays are shared).

Round of an FD method (``order=train_first``; FedMD's ``distill_first`` moves the local update to the end):

1. the server draws the round's public batch (P of the public indices) and broadcasts the indices;
2. every client trains ``local_steps`` on its private pool (one vmapped step per architecture group);
3. every client scores the public batch and uploads :func:`methods.client_upload` (logits / soft / hard labels);
4. the server decodes the uploads, aggregates and broadcasts the result;
5. every client distils on the public batch toward :func:`methods.client_targets`.

FedAvg / FedDF: local update, upload parameters, (per-architecture) averaging, FedDF's server-side ensemble
distillation on the public batch, download of the group model (client optimiser states are reset).

References (no communication): ``local`` trains ``local_steps`` per round on the client's own pool; ``central``
does the same on the pooled private data of all clients (an upper bound a federation could approach).

Budgets are step-matched: before round 1 every method trains ``warmup_steps`` on its private pool (FedMD's
labelled-public phase, ``pretrain_public_steps``, comes on top, and only in the ``fedmd`` policy); every round
then has ``local_steps`` private steps (+ ``distill_steps`` public steps for the FD methods).

Every payload goes through a :class:`mlsys_repro.common.fl.comm.Ledger`; :func:`traffic` traces one round with
``jax.eval_shape`` and returns its exact messages, so the byte counts are those of the code that runs.

``record=k`` (FD methods) also returns the server's transcript of client ``k``: each round's public indices and
the server's decoded view of ``k``'s upload on them (what a surrogate-extraction attacker trains on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mlsys_repro.common.fl.aggregate import fedavg
from mlsys_repro.common.fl.clients import (
    Federation,
    broadcast,
    distill,
    evaluate,
    init_opt,
    init_params,
    local_train,
    predict,
)
from mlsys_repro.common.fl.comm import Ledger
from mlsys_repro.papers.labelavg import methods as M
from mlsys_repro.papers.labelavg.schemas import FDPolicy, FDSchedule

Data = dict[str, jax.Array]  # x_train, y_train (private pools index into these), x_pub, y_pub, x_test, y_test


def _tx(lr: float) -> optax.GradientTransformation:
    return optax.adam(lr)


def _position(fed: Federation, client: int) -> tuple[int, int]:
    """(group, position in the group) of ``client``."""
    for gi, g in enumerate(fed.groups):
        if client in g.client_ids:
            return gi, g.client_ids.index(client)
    raise ValueError(f"client {client} not in the federation (0..{fed.num_clients - 1})")


def make_round(fed: Federation, policy: FDPolicy, sched: FDSchedule, num_classes: int, record: int | None = None
               ) -> Callable:
    """``round_fn(ledger, params, opts, key, data, idx, counts) -> (params, opts, seen)`` for one protocol round.

    ``seen`` is ``{}``, or with ``record=k`` (FD methods only) ``{"idx": [P], "view": [P] or [P, C]}``: the round's
    public indices and the server's decoded view of client ``k``'s upload on them.
    """
    tx = _tx(sched.lr)
    method = policy.method
    K, P, C = fed.num_clients, sched.public_batch, num_classes
    everyone = range(K)
    if record is not None and method not in M.FD_METHODS:
        raise ValueError(f"record= needs an FD method {M.FD_METHODS}, got {method!r}")
    rec = _position(fed, record) if record is not None else None

    def local(params, opts, key, data, idx, counts, steps):
        out_p, out_o = [], []
        for g, p, o, kk in zip(fed.groups, params, opts, jax.random.split(key, len(fed.groups)), strict=True):
            ids = np.asarray(g.client_ids)
            p, o, _ = local_train(g.apply, tx, p, o, kk, data["x_train"], data["y_train"], idx[ids], counts[ids],
                                  steps=steps, batch_size=sched.batch_size)
            out_p.append(p)
            out_o.append(o)
        return tuple(out_p), tuple(out_o)

    def fd_round(ledger, params, opts, key, data, idx, counts):
        k_pub, k_loc, k_dis = jax.random.split(key, 3)
        pub = jax.random.permutation(k_pub, data["x_pub"].shape[0])[:P].astype(jnp.int32)
        pub = ledger.down("public_indices", everyone, pub, per_client=False)
        xp = data["x_pub"][pub]
        if policy.order == "train_first":
            params, opts = local(params, opts, k_loc, data, idx, counts, sched.local_steps)
        uploads = [ledger.up(M.UPLOAD_KIND[method], g.client_ids, M.client_upload(method, predict(g.apply, p, xp), C))
                   for g, p in zip(fed.groups, params, strict=True)]
        seen = {} if rec is None else {"idx": pub, "view": M.server_decode(method, uploads[rec[0]], P, C)[rec[1]]}
        down = server(uploads)
        down = ledger.down(M.DOWNLOAD_KIND[method], everyone, down, per_client=False)
        targets = M.client_targets(method, down, P, K, C, epsilon=policy.epsilon, rule=policy.smoothing_rule)
        loss = M.l1_logits if method == "fedmd" else None
        new_p, new_o = [], []
        for g, p, o, kk in zip(fed.groups, params, opts, jax.random.split(k_dis, len(fed.groups)), strict=True):
            p, o, _ = distill(g.apply, tx, p, o, kk, xp, targets, steps=sched.distill_steps,
                              batch_size=sched.batch_size, temperature=policy.temperature, loss=loss)
            new_p.append(p)
            new_o.append(o)
        params, opts = tuple(new_p), tuple(new_o)
        if policy.order == "distill_first":
            params, opts = local(params, opts, k_loc, data, idx, counts, sched.local_steps)
        return params, opts, seen

    def server(uploads: list[jax.Array]) -> jax.Array:
        """The FD server: sees the uploaded payloads and nothing else."""
        decoded = jnp.concatenate([M.server_decode(method, u, P, C) for u in uploads], axis=0)
        return M.server_aggregate(method, decoded, C, era_temperature=policy.era_temperature)

    def param_round(ledger, params, opts, key, data, idx, counts):
        k_pub, k_loc, k_srv = jax.random.split(key, 3)
        params, _ = local(params, opts, k_loc, data, idx, counts, sched.local_steps)
        received = [ledger.up("params", g.client_ids, p) for g, p in zip(fed.groups, params, strict=True)]
        weights = [counts[np.asarray(g.client_ids)] for g in fed.groups]
        models = [fedavg(p, w) for p, w in zip(received, weights, strict=True)]
        if method == "feddf" and policy.server_steps > 0:
            xp = data["x_pub"][jax.random.permutation(k_pub, data["x_pub"].shape[0])[:P]]
            ens = jnp.concatenate([predict(g.apply, p, xp) for g, p in zip(fed.groups, received, strict=True)])
            soft = jax.nn.softmax(ens.mean(0) / policy.server_temperature, axis=-1)
            stx = _tx(policy.server_lr)
            distilled = []
            for g, m, kk in zip(fed.groups, models, jax.random.split(k_srv, len(fed.groups)), strict=True):
                m1 = broadcast(m, 1)
                m1, _, _ = distill(g.apply, stx, m1, init_opt(stx, m1), kk, xp, soft, steps=policy.server_steps,
                                   batch_size=sched.batch_size, temperature=policy.server_temperature)
                distilled.append(jax.tree.map(lambda a: a[0], m1))
            models = distilled
        new_p = tuple(broadcast(ledger.down("params", g.client_ids, m, per_client=False), g.size)
                      for g, m in zip(fed.groups, models, strict=True))
        return new_p, tuple(init_opt(tx, p) for p in new_p), {}

    def reference_round(ledger, params, opts, key, data, idx, counts):
        return (*local(params, opts, key, data, idx, counts, sched.local_steps), {})

    if method in M.FD_METHODS:
        return fd_round
    return param_round if method in M.PARAM_METHODS else reference_round


def pooled(idx: jax.Array, counts: jax.Array, num_private: int) -> tuple[jax.Array, jax.Array]:
    """Every client's pool replaced by all ``num_private`` private samples (the ``central`` reference)."""
    k, m = idx.shape
    if m < num_private:
        raise ValueError(f"idx has {m} columns, fewer than the {num_private} private samples to pool")
    full = jnp.broadcast_to(jnp.arange(m, dtype=idx.dtype) % num_private, (k, m))
    return full, jnp.full_like(counts, num_private)


def make_train(fed: Federation, policy: FDPolicy, sched: FDSchedule, num_classes: int, record: int | None = None
               ) -> Callable:
    """``train(key, idx [K, M], counts [K], data) -> dict`` (pure; ``jit``/``vmap`` over the first three).

    Returns ``acc [K]`` (final test accuracy per client), ``curve [rounds]`` (mean client accuracy on the first
    ``curve_n_test`` test examples after each round) and ``params`` (per-group stacked final parameters); with
    ``record=k`` also ``seen`` = ``{"idx": [rounds, P], "view": [rounds, P(, C)]}``, the server's transcript of
    client ``k``'s uploads (see :func:`make_round`).
    """
    tx = _tx(sched.lr)
    round_fn = make_round(fed, policy, sched, num_classes, record)
    param_sharing = policy.method in M.PARAM_METHODS

    def local(params, opts, key, x, y, idx, counts, steps):
        out = [local_train(g.apply, tx, p, o, kk, x, y, idx[np.asarray(g.client_ids)],
                           counts[np.asarray(g.client_ids)], steps=steps, batch_size=sched.batch_size)
               for g, p, o, kk in zip(fed.groups, params, opts, jax.random.split(key, len(fed.groups)), strict=True)]
        return tuple(o[0] for o in out), tuple(o[1] for o in out)

    def mean_acc(params, x, y):
        return jnp.concatenate([evaluate(g.apply, p, x, y) for g, p in zip(fed.groups, params, strict=True)])

    def train(key: jax.Array, idx: jax.Array, counts: jax.Array, data: Data) -> dict[str, Any]:
        if policy.method == "central":
            idx, counts = pooled(idx, counts, data["x_train"].shape[0])
        k_init, k_pre, k_warm, k_rounds = jax.random.split(key, 4)
        params = init_params(fed, k_init)
        if param_sharing:  # one common initial model per architecture
            params = tuple(broadcast(jax.tree.map(lambda a: a[0], p), g.size) for g, p in zip(fed.groups, params,
                                                                                                strict=True))
        opts = tuple(init_opt(tx, p) for p in params)
        if policy.pretrain_public_steps > 0:  # FedMD transfer learning, 1: the labelled public set
            n_pub = data["x_pub"].shape[0]
            pidx = jnp.broadcast_to(jnp.arange(n_pub, dtype=jnp.int32), (fed.num_clients, n_pub))
            params, opts = local(params, opts, k_pre, data["x_pub"], data["y_pub"], pidx,
                                 jnp.full((fed.num_clients,), n_pub, jnp.int32), policy.pretrain_public_steps)
        if sched.warmup_steps > 0:  # every method (FedMD's transfer learning, 2: the private data)
            params, opts = local(params, opts, k_warm, data["x_train"], data["y_train"], idx, counts,
                                 sched.warmup_steps)

        xc, yc = data["x_test"][: sched.curve_n_test], data["y_test"][: sched.curve_n_test]

        def body(carry, k):
            p, o = carry
            p, o, seen = round_fn(Ledger(), p, o, k, data, idx, counts)
            return (p, o), (mean_acc(p, xc, yc).mean(), seen)

        (params, opts), (curve, seen) = jax.lax.scan(body, (params, opts), jax.random.split(k_rounds, sched.rounds))
        acc = fed.scatter([evaluate(g.apply, p, data["x_test"], data["y_test"]) for g, p in
                           zip(fed.groups, params, strict=True)])
        out = {"acc": acc, "curve": curve, "params": params}
        if record is not None:
            out["seen"] = seen
        return out

    return train


def traffic(fed: Federation, policy: FDPolicy, sched: FDSchedule, num_classes: int, data_shapes: Data,
            num_private: int) -> Ledger:
    """The exact messages of one round of this configuration (nothing is computed: ``jax.eval_shape``)."""
    round_fn = make_round(fed, policy, sched, num_classes)
    tx = _tx(sched.lr)

    def one(ledger, key):
        params = init_params(fed, key)
        opts = tuple(init_opt(tx, p) for p in params)
        idx = jnp.zeros((fed.num_clients, num_private), jnp.int32)
        counts = jnp.ones((fed.num_clients,), jnp.int32)
        data = {k: jnp.zeros(v.shape, v.dtype) for k, v in data_shapes.items()}
        return round_fn(ledger, params, opts, key, data, idx, counts)[:2]

    return Ledger.trace(one, jax.random.key(0))
