"""Fixed-size, jittable uniform replay buffer over an arbitrary pytree of transitions.

    buf = replay_init(example_transition, capacity=100_000)    # example: one transition, no batch axis
    buf = replay_add(buf, batch)                                # batch: leading axis [B], B <= capacity
    sample = replay_sample(buf, key, batch_size=128)            # uniform over the filled part
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


def replay_can_sample(state: ReplayState, batch_size: int) -> jax.Array:
    return state.size >= batch_size


__all__ = ["ReplayState", "replay_add", "replay_can_sample", "replay_init", "replay_sample"]
