"""The shared training driver: compile once, vmap a batch of runs, advance in equal checkpointed chunks, record the
learning curve.

A paper writes its training as two pure functions (the ``make_train(cfg) -> train(key)`` style with the loop in
``lax.scan``, cut at chunk boundaries):

* ``start(*start_args) -> state``: the initial state of one run (one seed, one configuration);
* ``advance(state, *advance_args, <steps_arg>=k) -> (state, per-step metrics)``: ``k`` steps of one run.

:func:`compile_trainer` vmaps both over the batch axis given by ``start_axes``/``advance_axes`` (seeds, and
configurations where shapes allow; ``None`` marks an argument shared by every run), splits ``total_steps`` into
:func:`num_chunks` equal pieces and jits each function once. :meth:`ChunkedTrainer.run` then advances chunk by
chunk through :func:`mlsys_repro.common.repro.checkpoint.run_chunked` (orbax checkpoints, bit-identical resume),
evaluates an optional ``monitor(state)`` after every chunk (the learning curve: e.g. validation loss or a greedy
objective) and returns per-step metrics concatenated over chunks and the monitor's outputs stacked over chunks.
:func:`curve_rows` turns such a curve into long-format result rows.

Build a trainer once per configuration and share it through the run-scoped cache (``ctx.cache``), so every
experiment of a run that trains the same configuration reuses one executable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.repro.checkpoint import Checkpointer, run_chunked
from mlsys_repro.common.repro.results import metric_rows


def num_chunks(total: int, most: int = 10) -> int:
    """The most equal chunks (at most ``most``) that ``total`` steps split into: the checkpoint granularity.

    >>> num_chunks(600), num_chunks(7), num_chunks(0)
    (10, 7, 1)
    """
    if total < 0 or most < 1:
        raise ValueError(f"num_chunks needs total >= 0 and most >= 1, got {total}, {most}")
    return max(c for c in range(1, min(most, max(total, 1)) + 1) if total % c == 0)


@dataclass(frozen=True)
class Trained:
    """What :meth:`ChunkedTrainer.run` returns.

    Attributes:
      state: the final batched state (leaves ``[R, ...]``).
      steps: the per-step metrics ``advance`` returned, concatenated over chunks (leaves ``[R, total_steps, ...]``
        when ``advance`` returns ``[R, chunk_steps, ...]``).
      curve: the monitor's outputs after each chunk (leaves ``[R, chunks, ...]``), or ``None`` without a monitor.
      chunk_steps: steps per chunk (the x-axis of ``curve`` is ``chunk_steps * (1 .. chunks)``).
    """

    state: Any
    steps: Any
    curve: Any
    chunk_steps: int


@dataclass(frozen=True)
class ChunkedTrainer:
    """A training compiled once: ``start``/``advance`` jitted and vmapped, ``chunks`` x ``chunk_steps`` steps."""

    start: Callable[..., Any]
    advance: Callable[..., tuple[Any, Any]]
    chunks: int
    chunk_steps: int

    @property
    def total_steps(self) -> int:
        return self.chunks * self.chunk_steps

    def run(self, start_args: Sequence[Any], advance_args: Sequence[Any] = (), *,
            monitor: Callable[[Any], Any] | None = None, checkpointer: Checkpointer | None = None,
            on_chunk: Callable[[int, Any], None] | None = None) -> Trained:
        """Start every run from ``start(*start_args)``, then ``chunks`` times ``advance(state, *advance_args)``,
        evaluating ``monitor(state)`` after each chunk. With ``checkpointer`` the state, metrics and monitor
        outputs are saved after every chunk and a restarted run resumes from the newest save, bit-identically.
        ``on_chunk(i, (metrics, monitored))`` is called after chunk ``i`` (1-based), e.g. for progress lines."""
        advance_args = tuple(advance_args)

        def chunk(state):
            state, metrics = self.advance(state, *advance_args)
            return state, (metrics, monitor(state) if monitor is not None else None)

        def chunk_shape(state):  # jitted functions with compiler options cannot be traced nested: eval each
            state, metrics = self.advance.eval_shape(state, *advance_args) if hasattr(self.advance, "eval_shape") \
                else jax.eval_shape(self.advance, state, *advance_args)
            mon = None
            if monitor is not None:
                mon = monitor.eval_shape(state) if hasattr(monitor, "eval_shape") else jax.eval_shape(monitor, state)
            return state, (metrics, mon)

        chunk.eval_shape = chunk_shape  # type: ignore[attr-defined]
        state, history = run_chunked(chunk, self.start(*start_args), self.chunks, checkpointer, on_chunk=on_chunk)
        steps = jax.tree.map(lambda *h: jnp.concatenate(h, axis=1), *[h[0] for h in history])
        curve = None if monitor is None else jax.tree.map(lambda *h: jnp.stack(h, axis=1), *[h[1] for h in history])
        return Trained(state, steps, curve, self.chunk_steps)


def compile_trainer(start: Callable[..., Any], advance: Callable[..., tuple[Any, Any]], total_steps: int, *,
                    start_axes: Sequence[int | None], advance_axes: Sequence[int | None],
                    steps_arg: str | None = "steps", most_chunks: int = 10, chunk_steps: int | None = None,
                    compiler_options: Mapping[str, Any] | None = None) -> ChunkedTrainer:
    """Vmap ``start`` over ``start_axes`` and ``advance`` over ``advance_axes`` (its first entry is the state's
    batch axis, 0) and jit both (with ``compiler_options`` where given).

    Chunking: by default ``total_steps`` splits into ``num_chunks(total_steps, most_chunks)`` equal chunks and
    ``advance``'s keyword ``steps_arg`` is bound to the chunk length. A training whose ``advance`` already runs a
    fixed chunk passes that length as ``chunk_steps`` with ``steps_arg=None`` (``total_steps`` must be a multiple)."""
    if not advance_axes or advance_axes[0] != 0:
        raise ValueError(f"advance_axes must start with 0 (the state's batch axis), got {tuple(advance_axes)}")
    total = int(total_steps)
    if chunk_steps is not None:
        if chunk_steps < 1 or total % chunk_steps:
            raise ValueError(f"{total} steps do not split into chunks of {chunk_steps}")
        chunks, per = total // chunk_steps, int(chunk_steps)
    else:
        chunks = num_chunks(total, most_chunks)
        per = total // chunks
    adv = advance if steps_arg is None else functools.partial(advance, **{steps_arg: per})
    kw = {"compiler_options": dict(compiler_options)} if compiler_options else {}
    return ChunkedTrainer(
        start=jax.jit(jax.vmap(start, in_axes=tuple(start_axes)), **kw),
        advance=jax.jit(jax.vmap(adv, in_axes=tuple(advance_axes)), **kw),
        chunks=chunks,
        chunk_steps=per,
    )


def curve_rows(policy: str, curve: Mapping[str, tuple[Any, str]], seeds: Sequence[int], chunk_steps: int,
               step_column: str = "steps", **conditions: Any) -> list[dict[str, Any]]:
    """Long-format rows of a learning curve: for each ``name: (values [R, chunks], unit)`` one row per run and
    chunk, with ``step_column`` = steps trained so far (``chunk_steps * (j + 1)``) as a condition column."""
    rows: list[dict[str, Any]] = []
    for name, (values, unit) in curve.items():
        v = np.asarray(values, np.float64)
        if v.ndim != 2 or v.shape[0] != len(seeds):
            raise ValueError(f"curve {name!r}: expected [runs={len(seeds)}, chunks], got shape {v.shape}")
        for j in range(v.shape[1]):
            rows += metric_rows(policy, {name: (v[:, j], unit)}, seeds=seeds,
                                **{step_column: int(chunk_steps * (j + 1))}, **conditions)
    return rows
