"""The federated methods compared: what each client uploads, how the server aggregates, what clients distil on.

=============  ====================  ===============================================  =========================
method         client -> server      server                                           client distils on
=============  ====================  ===============================================  =========================
``labelavg``   hard labels, packed   per-sample vote counts ``c_j`` (packed)          voting-smoothed labels
               ceil(log2 C) bits                                                      (:func:`vote_targets`)
``dsfl``       softmax outputs f32   ERA: ``softmax(mean_k p_k / T_era)``             ERA targets (soft CE)
``fedmd``      logits f32            consensus = ``mean_k z_k``                       L1 to consensus logits
``feddf``      parameters            FedAvg per architecture, then server-side        (receives group model)
                                     distillation toward the clients' mean logits
``fedavg``     parameters            weighted parameter mean                          (receives global model)
``local``      nothing               -- (reference: local-only training)              --
``central``    (all private data)    -- (reference: every client trains on the        --
                                     pooled private data, an upper bound)
=============  ====================  ===============================================  =========================

Everything here is pure jnp; payloads carry a leading client axis ``[k, ...]`` (one architecture group).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mlsys_repro.common.fl.comm import bits_for, pack_uint, unpack_uint

FD_METHODS = ("labelavg", "dsfl", "fedmd")
PARAM_METHODS = ("feddf", "fedavg")
REFERENCE_METHODS = ("local", "central")  # no communication; the lower and upper references of a federation
METHODS = FD_METHODS + PARAM_METHODS + REFERENCE_METHODS
UPLOAD_KIND = {"labelavg": "hard_labels", "dsfl": "soft_labels", "fedmd": "logits", "feddf": "params",
               "fedavg": "params"}
DOWNLOAD_KIND = {"labelavg": "label_votes", "dsfl": "consensus", "fedmd": "consensus", "feddf": "params",
                 "fedavg": "params"}
SMOOTHING_RULES = ("vote_share", "majority")


def client_upload(method: str, logits: jax.Array, num_classes: int) -> jax.Array:
    """The payload a client sends for its ``logits [k, P, C]`` on the round's public batch (FD methods)."""
    if method == "labelavg":
        return pack_uint(logits.argmax(-1), bits_for(num_classes))  # uint8 [k, ceil(P*b/8)]
    if method == "dsfl":
        return jax.nn.softmax(logits, axis=-1)
    if method == "fedmd":
        return logits
    raise ValueError(f"{method!r} does not upload outputs (FD methods: {FD_METHODS})")


def server_decode(method: str, payload: jax.Array, n: int, num_classes: int) -> jax.Array:
    """What the server reads from one upload: labels ``[k, n]`` (labelavg) or ``[k, n, C]`` scores."""
    if method == "labelavg":
        return unpack_uint(payload, n, bits_for(num_classes))
    return payload


def vote_counts(labels: jax.Array, num_classes: int) -> jax.Array:
    """``c[j, c] = #{clients voting c on sample j}`` from hard labels ``[K, n]``."""
    return jax.nn.one_hot(labels, num_classes, dtype=jnp.int32).sum(0)


def vote_targets(counts: jax.Array, num_voters: int, epsilon: float, rule: str = "vote_share") -> jax.Array:
    """Voting-based label smoothing: soft targets ``[n, C]`` from vote counts ``[n, C]``.

    ``vote_share`` (default): ``(1 - eps) * c / K + eps / C`` -- the vote histogram, mixed with uniform
    label smoothing. ``majority``: ``(1 - eps) * onehot(argmax c) + eps * c / K`` -- the majority label, with the
    smoothing mass spread according to the votes instead of uniformly. Rows sum to one either way.
    """
    c = counts.astype(jnp.float32)
    num_classes = c.shape[-1]
    share = c / num_voters
    if rule == "vote_share":
        return (1.0 - epsilon) * share + epsilon / num_classes
    if rule == "majority":
        return (1.0 - epsilon) * jax.nn.one_hot(c.argmax(-1), num_classes) + epsilon * share
    raise ValueError(f"unknown smoothing rule {rule!r}; known: {SMOOTHING_RULES}")


def era(probs: jax.Array, temperature: float) -> jax.Array:
    """DS-FL entropy-reduction aggregation: ``softmax(mean_k p_k / T)`` over probability uploads ``[K, n, C]``."""
    return jax.nn.softmax(probs.mean(0) / temperature, axis=-1)


def server_aggregate(method: str, decoded: jax.Array, num_classes: int, *, era_temperature: float = 0.1
                     ) -> jax.Array:
    """The download payload from all clients' decoded uploads (``[K, n]`` labels or ``[K, n, C]`` scores)."""
    if method == "labelavg":
        k = decoded.shape[0]
        counts = vote_counts(decoded, num_classes)
        return pack_uint(counts.reshape(-1), bits_for(k + 1))  # uint8 [ceil(n*C*b/8)]
    if method == "dsfl":
        return era(decoded, era_temperature)
    if method == "fedmd":
        return decoded.mean(0)
    raise ValueError(f"{method!r} has no output aggregation")


def client_targets(method: str, download: jax.Array, n: int, num_clients: int, num_classes: int, *,
                   epsilon: float = 0.1, rule: str = "vote_share") -> jax.Array:
    """What clients distil toward, rebuilt from the download: probabilities, or logits for FedMD."""
    if method == "labelavg":
        counts = unpack_uint(download, n * num_classes, bits_for(num_clients + 1)).reshape(n, num_classes)
        return vote_targets(counts, num_clients, epsilon, rule)
    return download


def l1_logits(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """FedMD's digest loss: mean absolute error between the client's logits and the consensus logits."""
    return jnp.abs(logits - targets).mean()
