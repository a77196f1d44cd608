"""Fixed-size, jittable uniform replay buffer over an arbitrary pytree of transitions.

    buf = replay_init(example_transition, capacity=100_000)    # example: one transition, no batch axis
    buf = replay_add(buf, batch)                                # batch: leading axis [B], B <= capacity
    sample = replay_sample(buf, key, batch_size=128)            # uniform over the filled part
    window = replay_sample_windows(buf, key, 128, width=16, length=4)  # runs of one environment's transitions
    ok = replay_can_sample(buf, 128)

The buffer is a pytree of arrays (``data`` with leading axis ``capacity``, write position and fill size), so it
lives inside ``lax.scan``, ``vmap``s over seeds and can be checkpointed with the rest of a train state. Writes wrap
around (oldest first out). Sampling before anything was added returns zeros; guard with ``replay_can_sample``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ReplayState:
    data: Any  # pytree, every leaf [capacity, ...]
    pos: jax.Array  # int32 next write index
    size: jax.Array  # int32 number of valid entries (<= capacity)

    @property
    def capacity(self) -> int:
        return int(jax.tree.leaves(self.data)[0].shape[0])


def replay_init(example: Any, capacity: int) -> ReplayState:
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    data = jax.tree.map(lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), example)
    return ReplayState(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def replay_add(state: ReplayState, batch: Any) -> ReplayState:
    """Append a batch (leading axis B) at the write position, overwriting the oldest entries when full."""
    cap = state.capacity
    b = int(jax.tree.leaves(batch)[0].shape[0])
    if b > cap:
        raise ValueError(f"cannot add {b} transitions to a replay buffer of capacity {cap}")
    idx = (state.pos + jnp.arange(b, dtype=jnp.int32)) % cap
    data = jax.tree.map(lambda d, x: d.at[idx].set(x.astype(d.dtype)), state.data, batch)
    return ReplayState(data, (state.pos + b) % cap, jnp.minimum(state.size + b, cap))


def replay_sample(state: ReplayState, key: jax.Array, batch_size: int) -> Any:
    """``batch_size`` transitions drawn uniformly with replacement from the filled part."""
    idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))
    return jax.tree.map(lambda d: d[idx], state.data)


def replay_sample_windows(state: ReplayState, key: jax.Array, batch_size: int, width: int, length: int) -> Any:
    """``batch_size`` windows of ``length`` consecutive transitions of one environment (leaves [B, length, ...]), for
    a buffer written ``width`` transitions at a time, one per parallel environment, in the same environment order
    (so environment ``e``'s next transition sits ``width`` entries later). Windows are drawn uniformly among those
    that lie wholly in the written part, oldest first, and never straddle the write position (n-step returns).
    Needs ``capacity`` to be a multiple of ``width``; before ``length`` rows are written the draws repeat row 0."""
    cap = state.capacity
    if cap % width:
        raise ValueError(f"capacity {cap} is not a multiple of the write width {width}")
    rows = cap // width
    if not 1 <= length <= rows:
        raise ValueError(f"window length {length} must be in [1, {rows}] (capacity / width)")
    filled = state.size // width
    oldest = jnp.where(state.size < cap, 0, state.pos // width)
    k_row, k_env = jax.random.split(key)
    start = jax.random.randint(k_row, (batch_size,), 0, jnp.maximum(filled - length + 1, 1))
    env = jax.random.randint(k_env, (batch_size,), 0, width)
    row = (oldest + start[:, None] + jnp.arange(length)[None, :]) % rows
    idx = row * width + env[:, None]
    return jax.tree.map(lambda d: d[idx], state.data)


def replay_can_sample(state: ReplayState, batch_size: int) -> jax.Array:
    return state.size >= batch_size


__all__ = ["ReplayState", "replay_add", "replay_can_sample", "replay_init", "replay_sample", "replay_sample_windows"]
