"""The shared training driver: equal chunks, vmapped runs, bit-identical to one uninterrupted scan, resumable,
learning-curve rows."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.repro.checkpoint import Checkpointer
from mlsys_repro.common.repro.trainer import compile_trainer, curve_rows, num_chunks
from tests.fixtures.dying_checkpointer import DiesAfterFirstSave, Killed

X = jnp.linspace(-1.0, 1.0, 32)
Y = 3.0 * X - 1.0


def start(key, lr):
    """One run: random (w, b), its own learning rate."""
    return {"wb": jax.random.normal(key, (2,)), "key": key, "lr": lr}


def advance(state, x, y, steps):
    """``steps`` SGD steps on a random minibatch each; per-step loss."""
    def step(s, _):
        k, kb = jax.random.split(s["key"])
        idx = jax.random.randint(kb, (8,), 0, x.shape[0])

        def loss(wb):
            return jnp.mean((wb[0] * x[idx] + wb[1] - y[idx]) ** 2)

        val, g = jax.value_and_grad(loss)(s["wb"])
        return {**s, "wb": s["wb"] - s["lr"] * g, "key": k}, val

    return jax.lax.scan(step, state, None, length=steps)


def val_loss(state):
    wb = state["wb"]
    return {"val_mse": jnp.mean((wb[:, :1] * X + wb[:, 1:] - Y) ** 2, axis=1)}


@pytest.mark.parametrize("total, most, expect", [(600, 10, 10), (7, 10, 7), (13, 10, 1), (1, 10, 1), (0, 10, 1),
                                                 (12, 5, 4), (100, 3, 2)])
def test_num_chunks_known_answers(total, most, expect):
    assert num_chunks(total, most) == expect


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 20))
def test_num_chunks_is_the_largest_equal_split(total, most):
    c = num_chunks(total, most)
    assert 1 <= c <= most and total % c == 0
    assert not any(total % d == 0 for d in range(c + 1, min(most, total) + 1))


def test_num_chunks_rejects_bad_input():
    with pytest.raises(ValueError):
        num_chunks(-1)
    with pytest.raises(ValueError):
        num_chunks(10, 0)


def _batch():
    keys = jax.vmap(jax.random.key)(jnp.arange(3, dtype=jnp.uint32))
    lrs = jnp.array([0.05, 0.1, 0.2])
    return keys, lrs


def test_chunked_vmapped_training_equals_one_uninterrupted_scan():
    keys, lrs = _batch()
    tr = compile_trainer(start, advance, 60, start_axes=(0, 0), advance_axes=(0, None, None))
    assert (tr.chunks, tr.chunk_steps, tr.total_steps) == (10, 6, 60)
    out = tr.run((keys, lrs), (X, Y), monitor=jax.jit(val_loss))
    ref_state, ref_loss = jax.vmap(lambda k, lr: advance(start(k, lr), X, Y, 60))(keys, lrs)
    np.testing.assert_array_equal(out.state["wb"], ref_state["wb"])
    np.testing.assert_array_equal(out.steps, ref_loss)  # [runs, total steps]
    assert out.steps.shape == (3, 60) and out.curve["val_mse"].shape == (3, 10)
    final = np.asarray(jax.jit(val_loss)(ref_state)["val_mse"])
    np.testing.assert_array_equal(out.curve["val_mse"][:, -1], final)
    assert np.all(out.curve["val_mse"][:, -1] < out.curve["val_mse"][:, 0])  # it learns: the curve falls


def test_killed_training_resumes_from_its_checkpoint_bit_identically(tmp_path):
    keys, lrs = _batch()
    tr = compile_trainer(start, advance, 40, start_axes=(0, 0), advance_axes=(0, None, None), most_chunks=4)
    whole = tr.run((keys, lrs), (X, Y), monitor=jax.jit(val_loss))
    with pytest.raises(Killed):
        tr.run((keys, lrs), (X, Y), monitor=jax.jit(val_loss), checkpointer=DiesAfterFirstSave(tmp_path / "c"))
    seen = []
    resumed = tr.run((keys, lrs), (X, Y), monitor=jax.jit(val_loss), checkpointer=Checkpointer(tmp_path / "c"),
                     on_chunk=lambda i, _: seen.append(i))
    assert seen == [2, 3, 4]  # chunk 1 came from the checkpoint
    for a, b in zip(jax.tree.leaves((whole.state["wb"], whole.steps, whole.curve)),
                    jax.tree.leaves((resumed.state["wb"], resumed.steps, resumed.curve)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_fixed_chunk_advance_runs_total_over_chunk_steps_times():
    keys, lrs = _batch()

    def five(state, x, y):
        return advance(state, x, y, 5)

    tr = compile_trainer(start, five, 20, start_axes=(0, 0), advance_axes=(0, None, None), steps_arg=None,
                         chunk_steps=5)
    assert (tr.chunks, tr.chunk_steps) == (4, 5)
    out = tr.run((keys, lrs), (X, Y))
    ref_state, _ = jax.vmap(lambda k, lr: advance(start(k, lr), X, Y, 20))(keys, lrs)
    np.testing.assert_array_equal(out.state["wb"], ref_state["wb"])
    assert out.curve is None and out.steps.shape == (3, 20)
    with pytest.raises(ValueError, match="chunks of 6"):
        compile_trainer(start, five, 20, start_axes=(0, 0), advance_axes=(0, None, None), steps_arg=None,
                        chunk_steps=6)


def test_advance_axes_must_batch_the_state():
    with pytest.raises(ValueError, match="state's batch axis"):
        compile_trainer(start, advance, 10, start_axes=(0, 0), advance_axes=(None, None, None))


def test_curve_rows_long_format():
    rows = curve_rows("ppo", {"val_mse": (np.array([[3.0, 2.0], [4.0, 1.0]]), "mse")}, seeds=[7, 8],
                      chunk_steps=50, step_column="env_steps", scenario="a")
    assert [(r["seed"], r["env_steps"], r["value"]) for r in rows] == [(7, 50, 3.0), (8, 50, 4.0), (7, 100, 2.0),
                                                                      (8, 100, 1.0)]
    assert {r["metric"] for r in rows} == {"val_mse"} and {r["scenario"] for r in rows} == {"a"}
    with pytest.raises(ValueError, match="expected"):
        curve_rows("ppo", {"val_mse": (np.zeros((3, 2)), "mse")}, seeds=[7, 8], chunk_steps=5)
