"""keep_best: the reported policy is the checkpoint with the lowest greedy training objective; the curve keeps every
checkpoint, and the selection lives in the checkpointed state (a killed and resumed run selects the same one)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.common.repro.trainer import ChunkedTrainer
from mlsys_repro.papers.greenplace.pipeline import Selection, select_best, train_selecting

# greedy training objective of 2 runs after each of 4 chunks (lower is better); run 0 ties its best at chunk 4,
# run 1's best is its first checkpoint (which a resumed run must remember: the kill comes after chunk 1)
SCORES = np.array([[3.0, 1.0, 2.0, 1.0], [4.0, 6.0, 5.0, 7.0]], np.float32)


def test_select_best_known_answer():
    sel = Selection(state=None, best={"w": jnp.zeros((2, 3))}, best_score=jnp.full(2, jnp.inf),
                    best_chunk=jnp.zeros(2, jnp.int32), chunks=jnp.zeros((), jnp.int32))
    for j in range(4):  # checkpoint j's parameters are all j + 1
        sel = select_best(sel, {"w": jnp.full((2, 3), j + 1.0)}, jnp.asarray(SCORES[:, j]))
    assert np.asarray(sel.best_chunk).tolist() == [2, 1]  # the tie at chunk 4 keeps chunk 2
    np.testing.assert_array_equal(np.asarray(sel.best["w"]), [[2.0] * 3, [1.0] * 3])
    np.testing.assert_array_equal(np.asarray(sel.best_score), [1.0, 4.0])
    assert int(sel.chunks) == 4
    nan = select_best(sel, {"w": jnp.full((2, 3), 9.0)}, jnp.array([jnp.nan, 0.5]))
    assert np.asarray(nan.best_chunk).tolist() == [2, 5]  # a NaN score is never selected


def _toy(steps: int = 3) -> ChunkedTrainer:
    def start(offset):
        return {"x": jnp.zeros(2), "off": offset}

    def advance(state, inc):
        x = state["x"] + inc
        return {**state, "x": x}, {"m": jnp.broadcast_to(x[:, None], (2, steps))}

    return ChunkedTrainer(start=start, advance=advance, chunks=4, chunk_steps=steps)


def _monitor(state):  # the objective of the checkpoint after chunk x (x = 1..4)
    return jnp.asarray(SCORES)[jnp.arange(2), state["x"].astype(jnp.int32) - 1]


def _run(checkpointer=None):
    return train_selecting(_toy(), (jnp.array([10.0, 20.0]),), (jnp.float32(1.0),), _monitor,
                           lambda s: {"x": s["x"]}, checkpointer)


def test_train_selecting_keeps_every_checkpoint_in_the_curve_and_reports_the_best():
    done, sel = _run()
    np.testing.assert_array_equal(np.asarray(done.curve), SCORES)
    assert np.asarray(done.steps["m"]).shape == (2, 12) and done.chunk_steps == 3
    np.testing.assert_array_equal(np.asarray(done.state["x"]), [4.0, 4.0])  # the learner trained to the end
    np.testing.assert_array_equal(np.asarray(sel.best["x"]), [2.0, 1.0])  # the reported policy: the best checkpoint
    assert np.asarray(sel.best_chunk).tolist() == [2, 1]


def test_a_resumed_run_keeps_its_selection(tmp_path):
    from mlsys_repro.common.repro.checkpoint import Checkpointer
    from tests.fixtures.dying_checkpointer import DiesAfterFirstSave, Killed

    whole = _run()
    with pytest.raises(Killed):
        _run(DiesAfterFirstSave(tmp_path / "ck"))
    resumed = _run(Checkpointer(tmp_path / "ck"))
    leaves = lambda r: jax.tree.leaves((r[0].state, r[0].steps, r[0].curve, r[1]))  # noqa: E731
    assert np.asarray(resumed[1].best_chunk).tolist() == [2, 1]
    for a, b in zip(leaves(whole), leaves(resumed), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_gates_compare_the_reported_checkpoint_and_converged_reads_the_whole_curve():
    from mlsys_repro.papers.greenplace.pipeline import training_gates

    start, myopic, cloud = np.array([50.0, 50.0]), np.array([1.2, 3.0]), np.array([1.5, 5.5])
    last = training_gates(SCORES, np.array([4, 4]), start, myopic, cloud)
    best = training_gates(SCORES, np.array([2, 1]), start, myopic, cloud)
    assert last["beats_trivial_on_train"].tolist() == [True, False]  # run 1 ends at 7 > 5.5
    assert best["beats_trivial_on_train"].tolist() == [True, True]  # its first checkpoint, 4, is below 5.5
    assert last["beats_myopic_on_train"].tolist() == [True, False] == best["beats_myopic_on_train"].tolist()
    # the last two checkpoints differ by more than 3 % in both runs: selection does not make them converge
    assert last["converged"].tolist() == [False, False] == best["converged"].tolist()
    flat = np.array([[3.0, 1.0, 1.01, 1.0]])
    assert training_gates(flat, np.array([2]), start[:1], myopic[:1], cloud[:1])["converged"].tolist() == [True]


def test_learning_rows_carry_the_selected_checkpoint_only_with_keep_best():
    from mlsys_repro.papers.greenplace.pipeline import learning_rows

    learn = {"curve": SCORES, "env_steps": 400, "chunk_steps": 100, "start_train_objective": np.array([9.0, 9.0]),
             "warm_start": False, "myopic_train_objective": np.array([1.0, 1.0]),
             **{k: np.array([True, False]) for k in ("converged", "beats_trivial_on_train", "beats_myopic_on_train",
                                                     "beats_start_on_train")}}
    rows = learning_rows("bdq", {**learn, "selected_env_steps": np.array([200, 100])}, [0, 1], scenario="s")
    got = {(r["metric"], r["seed"]): r["value"] for r in rows if r["metric"] == "selected_env_steps"}
    assert got == {("selected_env_steps", 0): 200.0, ("selected_env_steps", 1): 100.0}
    assert sum(r["metric"] == "greedy_train_objective" for r in rows) == 2 * 5  # the start and every checkpoint
    plain = learning_rows("bdq", {**learn, "selected_env_steps": None}, [0, 1], scenario="s")
    assert not any(r["metric"] == "selected_env_steps" for r in plain)


@pytest.mark.slow
def test_a_selected_bdq_checkpoint_reads_as_selected():
    """The real pieces: a tiny BDQ trained vmapped over 2 seeds in 3 chunks, its greedy objective on fixed episodes
    as the monitor; re-scoring the kept parameters gives the selected checkpoint's curve value."""
    from mlsys_repro.common.repro.trainer import compile_trainer
    from mlsys_repro.papers.greenplace import dqn_agents
    from mlsys_repro.papers.greenplace.env import PlacementEnv
    from mlsys_repro.papers.greenplace.evaluate import rollouts
    from mlsys_repro.papers.greenplace.schemas import PlacementPolicy
    from tests.papers.greenplace.tiny import T, tiny_params

    p = tiny_params(rate=jnp.full(T, 0.5, jnp.float32), w_energy=jnp.float32(0.0), episode_jobs=8)
    # the plain BDQ (no tables, uniform exploration: the smallest compilation); selection is agnostic of the recipe
    pol = PlacementPolicy(name="bdq", kind="bdq", batch_size=8, buffer_size=256, learning_starts=8, torso=[8],
                          head_hidden=4, n_step=2, target_tau=0.1, policy_tau=0.2, lr=3e-3, keep_best=True)
    train = dqn_agents.make_train(PlacementEnv(), p, pol, iterations=12, num_envs=2)
    tr = compile_trainer(train.start, train.advance, train.total_steps, start_axes=(0, 0, None),
                         advance_axes=(0, 0, None), most_chunks=3)
    keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))
    ws = jnp.zeros(2)
    ekeys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32) + 7)
    compiled: dict = {}

    def score(pp):
        return rollouts(train.act, p, ekeys, np.array([0, 5]), 8, pp, compiled)["objective"].mean((1, 2))

    done, sel = train_selecting(tr, (keys, ws, p), (ws, p), lambda ts: score(dqn_agents.policy_params(ts)),
                                dqn_agents.policy_params)
    curve = np.asarray(done.curve)
    assert curve.shape == (2, 3) and np.isfinite(curve).all()
    chosen = np.asarray(sel.best_chunk)
    np.testing.assert_array_equal(chosen, curve.argmin(1) + 1)
    np.testing.assert_array_equal(np.asarray(score(sel.best)), curve[np.arange(2), chosen - 1])
