"""MAIFS environment and policy: rewards add up to the objective, episodes end with every job done and no server
over capacity, masks are work-conserving, the coordination graph removes conflicting picks, replayed
log-probabilities match, and a tiny MAPPO training chunk runs with finite metrics."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mlsys_repro.common.rl.marl import stack_agents
from mlsys_repro.common.sim.cluster import overcommit
from mlsys_repro.papers.maifs.env import JOB_FEATURES, LEVELS, EnvConfig, MaifsEnv
from mlsys_repro.papers.maifs.model import MaifsNet, act, variant
from mlsys_repro.papers.maifs.windows import Window, stack

ECFG = EnvConfig(num_agents=2, num_candidates=4, max_substeps=4, round_s=100.0, makespan_weight=2.0,
                 reward_scale=10.0, num_short=0, num_running=0, conflict_blocks=True, restore_s=0.0)


def windows(n=6, seed=0, burst=False):
    rng = np.random.default_rng(seed)
    arr = np.zeros(n) if burst else np.sort(rng.uniform(0, 900, n))
    arr -= arr[0]
    return [Window("w", arr, rng.uniform(100, 900, n), rng.choice([1, 2, 4], n).astype(np.int32),
                   rng.integers(0, 2, n).astype(np.int32))]


def make_env(tiny, wins):
    _, cl, sm, md = tiny
    return MaifsEnv(cl, sm, md, stack(wins), ECFG)


def random_episode(env, key, max_steps=400):
    @jax.jit  # the whole random step compiled once (CI time: op-by-op, every primitive compiled on its own)
    def step(key, st, obs):
        key, k = jax.random.split(key)
        o = stack_agents(obs, env.agents)
        picks = jax.random.categorical(k, jnp.where(o["mask"], 0.0, -1e9))
        acts = {a: jnp.stack([picks[i], jnp.int32(3)]) for i, a in enumerate(env.agents)}
        return key, *env.step_env(k, st, acts)

    obs, st = jax.jit(env.reset_window)(0)
    total, steps = 0.0, 0
    while steps < max_steps:
        key, obs, st, rew, done, info = step(key, st, obs)
        total += float(rew[env.agents[0]])
        steps += 1
        if bool(done["__all__"]):
            break
    return st, total, info


def test_episode_return_is_the_objective_and_jobs_all_finish(tiny):
    env = make_env(tiny, windows())
    st, total, info = random_episode(env, jax.random.key(0))
    jobs = st.jobs
    fin, arr = np.asarray(st.sim.finish), np.asarray(jobs.arrival)
    assert np.all(fin >= 0), "every job of the episode must complete"
    objective = (fin - arr).sum() + ECFG.makespan_weight * (fin.max() - arr[0])
    assert total == pytest.approx(-objective / (3600.0 * ECFG.reward_scale), rel=1e-4)
    assert float(st.sim.stats.max_overcommit) <= 1e-3 and float(overcommit(env.cl, st.sim.occ)) <= 1e-3
    assert float(info["jct_h"]) == pytest.approx((fin - arr).mean() / 3600.0, rel=1e-4)


def test_masks_are_work_conserving(tiny):
    env = make_env(tiny, windows(burst=True))
    obs, st = env.reset_window(0)
    o = stack_agents(obs, env.agents)
    m = np.asarray(o["mask"])
    assert m[:, :-1].any() and not m[:, -1].any()  # jobs fit: no-op is not allowed
    assert o["jobs"].shape == (2, 4, JOB_FEATURES) and o["levels"].shape == (2, 4, len(LEVELS), 3)


def _policy(tiny):
    spec = tiny[0]
    per = spec.num_servers // ECFG.num_agents
    return MaifsNet(per * 3 + 3, 6, JOB_FEATURES, len(LEVELS), hidden=16, rngs=nnx.Rngs(0))


def test_coordination_graph_removes_conflicting_picks(tiny):
    env = make_env(tiny, [Window("w", np.zeros(2), np.full(2, 500.0), np.array([1, 1], np.int32),
                                 np.array([0, 0], np.int32))])
    model = _policy(tiny)
    obs, st = env.reset_window(0)
    o = stack_agents(obs, env.agents)
    # make both agents strongly prefer job 0
    o = {**o, "jobs": o["jobs"].at[:, 0, :].set(10.0)}
    with_cg = act(model, o, jax.random.key(1), variant(), greedy=True)
    without = act(model, o, jax.random.key(1), variant(coordination=False), greedy=True)
    assert len(set(np.asarray(with_cg.picks).tolist())) == 2
    picks = np.asarray(without.picks)
    if picks[0] == picks[1]:
        acts = {a: jnp.stack([without.picks[i], jnp.int32(1)]) for i, a in enumerate(env.agents)}
        _, _, _, _, info = env.step_env(jax.random.key(0), st, acts)
        assert int(info["conflicts"]) == 1  # the second agent's pick of the same job fails


def test_replayed_log_probs_match_and_fixed_allocation_is_fair_share(tiny):
    env = make_env(tiny, windows(burst=True))
    model = _policy(tiny)
    obs, _ = env.reset_window(0)
    o = stack_agents(obs, env.agents)
    for v in (variant(), variant(attention=False, coordination=False), variant(fungible=False)):
        ja = act(model, o, jax.random.key(3), v)
        rep = act(model, o, None, v, replay=(ja.picks, ja.levels, ja.pick_masks))
        np.testing.assert_allclose(np.asarray(ja.logp), np.asarray(rep.logp), rtol=1e-5, atol=1e-6)
    for k in range(5):
        ja = act(model, o, jax.random.key(k), variant(fungible=False))
        assert np.all(np.asarray(ja.levels)[np.asarray(ja.picks) < 4] == LEVELS.index("fair"))


def test_env_rejects_unequal_agent_groups(tiny):
    _, cl, sm, md = tiny
    with pytest.raises(ValueError, match="equal agent groups"):
        MaifsEnv(cl, sm, md, stack(windows()), dataclasses.replace(ECFG, num_agents=3))


def test_training_resumes_bit_identically_after_a_kill(tiny, tmp_path):
    from mlsys_repro.common.repro.checkpoint import Checkpointer, run_chunked
    from mlsys_repro.papers.maifs.train import Problem, TrainConfig, make_train
    from tests.fixtures.dying_checkpointer import DiesAfterFirstSave, Killed

    spec, cl, sm, md = tiny
    cfg = TrainConfig(num_envs=2, rollout_len=8, num_updates=3, updates_per_chunk=1, epochs=1, minibatches=2,
                      lr=3e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, hidden=8, network="maifs",
                      paired=2, prior_beta=0.0, credit="counterfactual", cf_lambda=0.5, adv_clip=5.0, bc_rounds=1,
                      bc_epochs=1, bc_lr=3e-3, bc_dagger=0.5)  # the whole recipe: clone, then PPO with per-agent credit
    init, chunk, _, _ = make_train(ECFG, cfg, spec.num_servers)
    prob = Problem(cl, sm, md, stack(windows() + windows(seed=1)))
    step, start = jax.jit(chunk), jax.jit(init)  # each compiled once for the three runs
    # the state a checkpoint restores is committed to the device; commit every run's state alike, so one compiled
    # chunk serves the resumed run too (CI time: else it compiles again, for the committed argument shardings)
    dev = jax.devices()[0]

    def run(ck):
        return run_chunked(lambda r: step(jax.device_put(r, dev), variant(), prob),
                           start(jax.random.key(0), variant(), prob), 3, ck)

    whole, hist = run(None)
    assert len(hist) == 3 and int(whole.update) == 3  # one update per chunk
    for k in ("loss", "entropy", "reward", "q_loss", "credit_spread"):  # a tiny training runs and stays finite
        assert all(np.all(np.isfinite(np.asarray(h[k]))) for h in hist), k
    bc = np.asarray(whole.bc)  # the clone's loss, agreements and entropy were recorded; one batch: the teacher's
    assert np.isfinite(bc[:, :4]).all() and np.isnan(bc[:, 4]).all()
    with pytest.raises(Killed):
        run(DiesAfterFirstSave(tmp_path / "ck"))
    resumed, hist2 = run(Checkpointer(tmp_path / "ck"))
    assert int(resumed.update) == 3
    for a, b in zip(jax.tree.leaves((whole.params, hist)), jax.tree.leaves((resumed.params, hist2)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_env_and_train_configs_keep_no_second_defaults():
    """The experiment knobs have one set of defaults (the schemas); EnvConfig / TrainConfig require them."""
    from mlsys_repro.papers.maifs.schemas import MaifsParams, RLPolicy
    from mlsys_repro.papers.maifs.train import TrainConfig

    for cls, sources in ((EnvConfig, (MaifsParams,)), (TrainConfig, (MaifsParams, RLPolicy))):
        knobs = {f.name for s in sources for f in dataclasses.fields(s)}
        defaulted = [f.name for f in dataclasses.fields(cls) if f.name in knobs and (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)]
        assert not defaulted, f"{cls.__name__} repeats the schema defaults of {defaulted}"
