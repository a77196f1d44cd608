"""What crosses the client/server boundary, in exact bytes, and compact wire encodings for labels.

A protocol passes every payload through a :class:`Ledger` (``ledger.up(kind, client_ids, payload)`` /
``ledger.down(...)``), which returns the payload unchanged and records one :class:`Message` per client with its
kind, shape, dtype and exact byte count. Because only shapes and dtypes are read, recording also works on
tracers: calling a jitted round once under :meth:`Ledger.trace` (``jax.eval_shape``) yields the exact per-round
traffic of that code, so accounting and computation cannot drift apart.

Payload kinds (:data:`KINDS`) name what a message *is*, so tests can assert e.g. that a federated-distillation
server never receives ``params`` or ``private_data``. A payload with a leading client axis ``[k, ...]`` is split
evenly among the ``k`` clients; a broadcast (``per_client=False``) is charged in full to every receiver.

Label codecs: :func:`pack_uint` / :func:`unpack_uint` store integers in ``bits`` bits each (``jnp.packbits``);
hard labels of ``C`` classes need :func:`bits_for` ``(C) = ceil(log2 C)`` bits.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

KINDS = {
    "logits": "real-valued class scores on public inputs",
    "soft_labels": "probability vectors on public inputs",
    "hard_labels": "packed class indices on public inputs",
    "label_votes": "packed per-class vote counts on public inputs",
    "consensus": "aggregated soft targets on public inputs",
    "params": "model parameters",
    "public_inputs": "inputs the server asks clients to score (public samples or injected queries)",
    "public_indices": "indices of the public samples to score this round",
    "private_data": "raw private examples or their labels (must never be sent)",
}
DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class Message:
    """One payload between the server and one client."""

    direction: str  # "up" = client -> server, "down" = server -> client
    kind: str
    client: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    round: int = 0


def nbytes(tree: Any) -> int:
    """Exact bytes of every array leaf of ``tree`` (arrays, tracers or ``ShapeDtypeStruct``)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(f"payload leaf {type(leaf).__name__} has no shape/dtype; send arrays only")
        total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return total


@dataclass
class Ledger:
    """Every message of a run; ``round`` is set by the protocol (``ledger.round = r``) or by :meth:`repeat`."""

    messages: list[Message] = field(default_factory=list)
    round: int = 0

    def record(self, direction: str, kind: str, clients: Iterable[int], payload: Any, *,
               per_client: bool = True) -> Any:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if kind not in KINDS:
            raise ValueError(f"unknown payload kind {kind!r}; known: {sorted(KINDS)}")
        clients = [int(c) for c in clients]
        if not clients:
            raise ValueError("a message needs at least one client")
        leaves = jax.tree.leaves(payload)
        total = nbytes(payload)
        if per_client:
            for leaf in leaves:
                if not leaf.shape or leaf.shape[0] != len(clients):
                    raise ValueError(f"{kind}: per-client payload needs leading axis {len(clients)}, got "
                                     f"{tuple(leaf.shape)}")
            each, shape = total // len(clients), tuple(leaves[0].shape[1:])
        else:
            each, shape = total, tuple(leaves[0].shape)
        dtype = ",".join(sorted({str(np.dtype(leaf.dtype)) for leaf in leaves}))
        for c in clients:
            self.messages.append(Message(direction, kind, c, each, shape, dtype, self.round))
        return payload

    def up(self, kind: str, clients: Iterable[int], payload: Any, **kw) -> Any:
        """Client(s) -> server; returns ``payload`` so it can wrap the value in place."""
        return self.record("up", kind, clients, payload, **kw)

    def down(self, kind: str, clients: Iterable[int], payload: Any, **kw) -> Any:
        """Server -> client(s); ``per_client=False`` for a broadcast charged in full to each receiver."""
        return self.record("down", kind, clients, payload, **kw)

    # ------------------------------------------------------------------------------------------ queries

    def select(self, direction: str | None = None, kind: str | None = None, client: int | None = None,
               round: int | None = None) -> list[Message]:
        return [m for m in self.messages
                if (direction is None or m.direction == direction) and (kind is None or m.kind == kind)
                and (client is None or m.client == client) and (round is None or m.round == round)]

    def bytes(self, direction: str | None = None, kind: str | None = None, client: int | None = None,
              round: int | None = None) -> int:
        return sum(m.nbytes for m in self.select(direction, kind, client, round))

    def kinds(self, direction: str | None = None) -> set[str]:
        return {m.kind for m in self.select(direction)}

    def rounds(self) -> list[int]:
        return sorted({m.round for m in self.messages})

    def per_client_round(self, direction: str, kind: str | None = None) -> float:
        """Mean bytes per client per round in ``direction`` (0 if nothing was sent)."""
        msgs = self.select(direction, kind)
        if not msgs:
            return 0.0
        clients = {m.client for m in self.messages}
        return sum(m.nbytes for m in msgs) / (len(clients) * len(self.rounds()))

    def by_kind(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = defaultdict(int)
        for m in self.messages:
            out[(m.direction, m.kind)] += m.nbytes
        return dict(out)

    def repeat(self, rounds: int) -> Ledger:
        """The messages of this (one-round) ledger as if sent in each of ``rounds`` rounds."""
        return Ledger([Message(m.direction, m.kind, m.client, m.nbytes, m.shape, m.dtype, r)
                       for r in range(rounds) for m in self.messages])

    @classmethod
    def trace(cls, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Ledger:
        """The messages ``fn(ledger, *args)`` records, found with ``jax.eval_shape`` (nothing is computed)."""
        ledger = cls()
        jax.eval_shape(lambda *a: fn(ledger, *a, **kwargs), *args)
        return ledger


def bits_for(num_values: int) -> int:
    """Bits needed to store one of ``num_values`` distinct integers (at least 1)."""
    if num_values < 1:
        raise ValueError(f"num_values must be >= 1, got {num_values}")
    return max(1, math.ceil(math.log2(num_values)))


def packed_size(n: int, bits: int) -> int:
    """Bytes that ``n`` integers of ``bits`` bits occupy when packed."""
    return (n * bits + 7) // 8


def pack_uint(values: jax.Array, bits: int) -> jax.Array:
    """Pack non-negative integers ``values [..., n]`` (each < 2**bits) into ``uint8 [..., ceil(n*bits/8)]``.

    Bits are stored most-significant first; jit/vmap friendly. Values outside ``[0, 2**bits)`` are not
    representable: check them before packing (:func:`check_uint`), since a traced function cannot raise.
    """
    if not 1 <= bits <= 16:
        raise ValueError(f"bits must be in [1, 16], got {bits}")
    v = jnp.asarray(values).astype(jnp.uint32)
    shifts = jnp.arange(bits - 1, -1, -1, dtype=jnp.uint32)
    b = ((v[..., None] >> shifts) & 1).astype(jnp.uint8)  # [..., n, bits]
    flat = b.reshape(*b.shape[:-2], -1)
    return jnp.packbits(flat, axis=-1)


def unpack_uint(packed: jax.Array, n: int, bits: int) -> jax.Array:
    """Inverse of :func:`pack_uint`: ``int32 [..., n]``."""
    flat = jnp.unpackbits(jnp.asarray(packed, jnp.uint8), axis=-1)[..., : n * bits]
    b = flat.reshape(*flat.shape[:-1], n, bits).astype(jnp.int32)
    return (b << jnp.arange(bits - 1, -1, -1, dtype=jnp.int32)).sum(-1)


def check_uint(values: np.ndarray, bits: int) -> None:
    """Raise ValueError unless every value fits in ``bits`` unsigned bits (host-side guard for :func:`pack_uint`)."""
    v = np.asarray(values)
    bad = np.flatnonzero((v < 0) | (v >= 2**bits))
    if bad.size:
        raise ValueError(f"{bad.size} values outside [0, {2**bits}); first: {v.reshape(-1)[bad[0]]}")
