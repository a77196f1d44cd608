"""BCube(n, k): a server-centric multi-interface topology, and BML's hierarchical all-reduce over it.

Topology (Guo et al., SIGCOMM 2009). ``n ** (k + 1)`` servers, each with ``k + 1`` NICs; server ``s`` has digits
``d_l = (s // n**l) % n`` for levels ``l = 0..k``. NIC ``l`` of every server plugs into a level-``l`` switch that
connects the ``n`` servers differing from it only in digit ``l`` (its level-``l`` *group*). Two servers talk
directly only through a shared switch; BCube(3, 1) is 9 servers with 2 NICs and 6 three-port switches.
BCube(N, 0) is one switch with one NIC per server: a non-blocking single-NIC fabric (what a Fat-Tree gives).

BML (Wang et al., NeurIPS 2018) aggregates gradients over BCube with every server a worker and an aggregator:
the flat gradient is cut into ``k + 1`` parts, part ``j`` is reduce-scattered level by level in the order
``j, j + 1, ..., j + k (mod k + 1)`` (in each stage the ``n`` members of a group exchange ``(n - 1) / n`` of
the current block and sum), then all-gathered in the reverse order. Each part starts on a different level, so
all ``k + 1`` NICs are busy in every stage. Per-device code for ``jax.shard_map`` over :func:`mesh`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax

from mlsys_repro.common.collectives.mesh import make_mesh
from mlsys_repro.common.quant import sketch


@dataclass(frozen=True)
class BCube:
    """BCube(n, k) addressing and routing (pure Python, no JAX)."""

    n: int
    k: int

    def __post_init__(self) -> None:
        if self.n < 2 or self.k < 0:
            raise ValueError(f"BCube needs n >= 2 and k >= 0, got n={self.n}, k={self.k}")

    @property
    def num_servers(self) -> int:
        return self.n ** (self.k + 1)

    @property
    def num_levels(self) -> int:
        return self.k + 1

    def digit(self, s: int, level: int) -> int:
        return (s // self.n**level) % self.n

    def with_digit(self, s: int, level: int, d: int) -> int:
        return s + (d - self.digit(s, level)) * self.n**level

    def group(self, s: int, level: int) -> list[int]:
        """The ``n`` servers on ``s``'s level-``level`` switch, ordered by that digit (``s`` included)."""
        return [self.with_digit(s, level, d) for d in range(self.n)]

    def neighbours(self, s: int, level: int) -> list[int]:
        return [t for t in self.group(s, level) if t != s]

    def can_reach(self, src: int, src_nic: int, dst: int, dst_nic: int) -> bool:
        """Direct link: same NIC level, and the servers differ exactly in that level's digit."""
        if src_nic != dst_nic or src == dst:
            return False
        return all((self.digit(src, l) == self.digit(dst, l)) == (l != src_nic) for l in range(self.num_levels))

    def level_order(self, first: int) -> list[int]:
        """Levels ``first, first + 1, ...`` modulo ``k + 1``."""
        return [(first + j) % self.num_levels for j in range(self.num_levels)]

    def route(self, src: int, dst: int, first: int = 0) -> list[tuple[int, int, int]]:
        """BCube source route as hops ``(from, to, level)``, correcting digits in :meth:`level_order` order."""
        hops, cur = [], src
        for l in self.level_order(first):
            d = self.digit(dst, l)
            if self.digit(cur, l) != d:
                nxt = self.with_digit(cur, l, d)
                hops.append((cur, nxt, l))
                cur = nxt
        return hops


def axis(level: int) -> str:
    return f"l{level}"


def mesh(bc: BCube):
    """Mesh with one axis per level, ``('l<k>', ..., 'l0')``, so device ``s`` has digit ``d_l`` on axis ``l<l>``."""
    return make_mesh((bc.n,) * bc.num_levels, [axis(l) for l in reversed(range(bc.num_levels))])


def _parts(x: jax.Array, bc: BCube) -> jax.Array:
    m = bc.num_levels * bc.num_servers
    if x.ndim != 1 or x.shape[0] % m:
        raise ValueError(f"BML needs a flat vector whose length is divisible by (k+1) * n^(k+1) = {m}, got "
                         f"{x.shape}")
    return x.reshape(bc.num_levels, -1)


def bml_allreduce(x: jax.Array, bc: BCube) -> jax.Array:
    """Sum over all servers by BML's level-by-level reduce-scatter and all-gather (fp32)."""
    out = []
    for j, y in enumerate(_parts(x, bc)):
        order = bc.level_order(j)
        for l in order:
            y = lax.psum_scatter(y, axis(l), scatter_dimension=0, tiled=True)
        for l in reversed(order):
            y = lax.all_gather(y, axis(l), tiled=True)
        out.append(y)
    return jnp.concatenate(out)


def _decode_rows(codes, lo, scale, d):
    return jax.vmap(lambda c, a, b: sketch.dequantize(sketch.Sketch(c, a, b), d))(codes, lo, scale)


def _bound_rows(codes, lo, scale, d):
    return jax.vmap(lambda c, a, b: jnp.max(sketch.error_bound(sketch.Sketch(c, a, b), d)))(codes, lo, scale)


def bml_allreduce_sketch(x: jax.Array, bc: BCube, piece_size: int) -> tuple[jax.Array, jax.Array]:
    """BML with 8-bit payloads: every stage exchanges sketches (uint8 ``all_to_all``), sums decoded blocks.

    Returns ``(sum_hat [D], bound [D])``; ``bound`` accumulates ``scale / 2`` of every quantisation each element
    went through (one per reduce stage for each contribution, one for the broadcast), so
    ``|sum_hat - sum| <= bound`` holds element-wise.
    """
    if x.shape[0] % (bc.num_levels * bc.num_servers * piece_size):
        raise ValueError(f"sketched BML needs a length divisible by (k+1) * n^(k+1) * piece_size, got {x.shape}")
    outs, bounds = [], []
    for j, y in enumerate(_parts(x, bc)):
        order = bc.level_order(j)
        err = jnp.zeros((), jnp.float32)
        for l in order:
            blocks = y.reshape(bc.n, -1)
            d = blocks.shape[1]
            sk = jax.vmap(lambda v: sketch.quantize(v, piece_size))(blocks)
            qb = _bound_rows(*sk, d)
            got = [lax.all_to_all(a, axis(l), 0, 0, tiled=False) for a in (*sk, err + qb)]
            y = _decode_rows(*got[:3], d).sum(axis=0)
            err = got[3].sum()
        final = sketch.quantize(y, piece_size)
        b = err + jnp.max(sketch.error_bound(final, y.shape[0]))
        codes, lo, scale = final
        bvec = jnp.full(y.shape, b)
        for l in reversed(order):
            codes, lo, scale, bvec = (lax.all_gather(a, axis(l), tiled=True) for a in (codes, lo, scale, bvec))
        outs.append(sketch.dequantize(sketch.Sketch(codes, lo, scale), codes.size))
        bounds.append(bvec)
    return jnp.concatenate(outs), jnp.concatenate(bounds)


__all__ = ["BCube", "axis", "bml_allreduce", "bml_allreduce_sketch", "mesh"]
