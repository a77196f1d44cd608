"""Checkpoint and resume for long trainings, with orbax.

A training written as ``make_train(cfg) -> train(key)`` with its loop in one ``lax.scan`` is checkpointed by
cutting the scan into chunks: :func:`run_chunked` calls a jitted ``chunk(state) -> (state, metrics)`` that advances
``chunk_steps`` steps, saves the state every ``every`` chunks, and on restart resumes from the newest checkpoint.
Because every chunk is the same compiled function applied to the same state, a resumed run is bit-identical to an
uninterrupted one (tests/common/test_checkpoint.py kills a run mid-way and checks this).

State pytrees may hold typed PRNG keys; they are stored as raw key data and rewrapped on restore.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_storable(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _from_storable(tree: Any, like: Any) -> Any:
    return jax.tree.map(lambda x, ref: jax.random.wrap_key_data(x, impl=jax.random.key_impl(ref))
                        if _is_key(ref) else x, tree, like)


class Checkpointer:
    """Save/restore one training state pytree under ``directory`` (keeps the newest ``keep`` steps)."""

    def __init__(self, directory: str | Path, keep: int = 2):
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any) -> None:
        self.manager.save(step, args=ocp.args.StandardSave(_to_storable(state)))
        self.manager.wait_until_finished()

    def restore(self, like: Any, step: int | None = None) -> tuple[Any, int]:
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _to_storable(like))
        restored = self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        return _from_storable(restored, like), int(step)

    def close(self) -> None:
        self.manager.close()


def run_chunked(
    chunk: Callable[[Any], tuple[Any, Any]],
    init_state: Any,
    num_chunks: int,
    checkpointer: Checkpointer | None = None,
    every: int = 1,
    on_chunk: Callable[[int, Any], None] | None = None,
) -> tuple[Any, list[Any]]:
    """Apply ``chunk`` ``num_chunks`` times, checkpointing every ``every`` chunks; resume if a checkpoint exists.

    Returns the final state and the per-chunk metrics of the chunks run in *this* call (plus those stored with
    the checkpoint, so a resumed run returns the complete history).
    """
    state, start, history = init_state, 0, []
    if checkpointer is not None and checkpointer.latest_step() is not None:
        (state, hist), start = checkpointer.restore((init_state, _history_like(init_state, chunk, num_chunks)))
        history = [jax.tree.map(lambda h, i=i: h[i], hist) for i in range(start)]
        print(f"  resumed from chunk {start}/{num_chunks} ({checkpointer.directory})", flush=True)
    for i in range(start, num_chunks):
        state, metrics = chunk(state)
        history.append(metrics)
        if on_chunk is not None:
            on_chunk(i + 1, metrics)
        if checkpointer is not None and ((i + 1) % every == 0 or i + 1 == num_chunks):
            checkpointer.save(i + 1, (state, _stack_padded(history, num_chunks)))
    return state, history


def _history_like(state: Any, chunk: Callable, num_chunks: int) -> Any:
    # a chunk may bring its own eval_shape (a jitted function with compiler_options cannot be traced nested)
    _, m = chunk.eval_shape(state) if hasattr(chunk, "eval_shape") else jax.eval_shape(chunk, state)
    return jax.tree.map(lambda s: jnp.zeros((num_chunks, *s.shape), s.dtype), m)


def _stack_padded(history: list[Any], num_chunks: int) -> Any:
    def stack(*xs):
        a = np.stack([np.asarray(x) for x in xs])
        pad = np.zeros((num_chunks - a.shape[0], *a.shape[1:]), a.dtype)
        return np.concatenate([a, pad])

    return jax.tree.map(stack, *history)
