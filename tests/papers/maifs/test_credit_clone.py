"""Issue #45's recipe on hand-made cases: the input-dependent baseline, the counterfactual (per-agent) advantage,
the SRTF teacher and its behaviour clone, capacity-aware sequential masks (a property over random clusters, jobs and
states) and the restore cost (charged exactly once per net preemption, to heuristics and learned agents alike)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.rl.input_baseline import time_aligned_baseline
from mlsys_repro.common.rl.marl import stack_agents
from mlsys_repro.common.sim.cluster import ClusterSpec, SimConfig, overcommit, simulate
from mlsys_repro.papers.maifs.baselines import Heuristic, make_schedule
from mlsys_repro.papers.maifs.env import GPUS_FEATURE, REMAINING_FEATURE, WIDE_FEATURE, EnvConfig, MaifsEnv
from mlsys_repro.papers.maifs.model import _conditional_masks, act, srtf_teacher, teacher_relabel, variant
from mlsys_repro.papers.maifs.train import (
    BC_STATS,
    Problem,
    TrainConfig,
    cloning_batch,
    counterfactual_advantage,
    make_train,
)
from mlsys_repro.papers.maifs.windows import Window, stack
from tests.papers.maifs.conftest import tiny_tables

ECFG = dict(num_candidates=6, max_substeps=4, round_s=100.0, makespan_weight=2.0, reward_scale=10.0, num_short=3,
            conflict_blocks=True)

# ---------------------------------------------------------------------------------------------- advantages


def test_input_dependent_baseline_is_the_mean_of_the_other_rollouts():
    # two windows x three rollouts deciding at the same times: the baseline of a rollout is the plain mean of the
    # other two rollouts of its window, step by step (the other window never enters)
    ret = jnp.array([[-3.0, -6.0, -9.0, -100.0, -200.0, -300.0],
                     [-1.0, -2.0, -4.0, -10.0, -20.0, -40.0]])
    times = jnp.broadcast_to(jnp.array([[0.0], [5.0]]), ret.shape)
    b = np.asarray(time_aligned_baseline(ret, times, jnp.zeros(6), 3))
    r = np.asarray(ret)
    want = np.stack([np.concatenate([(r[t, :3].sum() - r[t, :3]) / 2, (r[t, 3:].sum() - r[t, 3:]) / 2])
                     for t in range(2)])
    np.testing.assert_allclose(b, want)
    np.testing.assert_allclose(b[0, :3], [-7.5, -6.0, -4.5])  # by hand


def test_counterfactual_advantage_known_answer():
    # two agents, three options; agent 1's third option is masked (probability 0)
    team = jnp.array([10.0])
    q = jnp.array([[[1.0, 2.0, 4.0], [0.0, 3.0, 5.0]]])
    probs = jnp.array([[[0.5, 0.5, 0.0], [0.2, 0.8, 0.0]]])
    picks = jnp.array([[1, 0]])
    # counterfactual baselines: 0.5 * 1 + 0.5 * 2 = 1.5 and 0.2 * 0 + 0.8 * 3 = 2.4
    for lam, want in ((0.0, [8.5, 7.6]), (1.0, [0.5, -2.4]), (0.5, [4.5, 2.6])):
        np.testing.assert_allclose(np.asarray(counterfactual_advantage(team, q, probs, picks, lam))[0], want,
                                   rtol=1e-6)


def test_counterfactual_advantage_credits_each_agent_for_its_own_choice():
    # COMA (lam = 1): an agent whose options are all worth the same gets no credit, whatever the team did; an
    # agent's advantage averages to zero under its own policy (the baseline does not depend on its action)
    team = jnp.array([3.0, -7.0])
    q = jnp.array([[[2.0, 2.0, 2.0], [1.0, 4.0, -2.0]]] * 2)
    probs = jnp.array([[[0.2, 0.3, 0.5], [0.25, 0.25, 0.5]]] * 2)
    adv = np.asarray(counterfactual_advantage(team, q, probs, jnp.array([[0, 1], [2, 2]]), 1.0))
    np.testing.assert_allclose(adv[:, 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(adv[:, 1], [4.0 - 0.25, -2.0 - 0.25])
    every = np.stack([np.asarray(counterfactual_advantage(team[:1], q[:1], probs[:1], jnp.array([[a, a]]), 1.0))[0]
                      for a in range(3)])  # [action, agent]
    np.testing.assert_allclose((np.asarray(probs[0]).T * every).sum(0), 0.0, atol=1e-6)


# ---------------------------------------------------------------------------------------------- teacher and clone


@pytest.fixture
def quad(tiny):
    """4 servers x 4 GPUs (one agent each) with the tiny speed tables: a job of more than 4 GPUs is wide."""
    _, _, sm, md = tiny
    return ClusterSpec.uniform(1, 4, 4, 12.0, 250.0).arrays(), sm, md


def _window(seed: int, n: int = 20, gpus=(1, 2, 3, 4, 6, 8, 12)) -> Window:
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, 400, n))
    arr -= arr[0]
    return Window("w", arr, rng.uniform(200, 2000, n), rng.choice(gpus, n).astype(np.int32),
                  rng.integers(0, 2, n).astype(np.int32))


@functools.partial(jax.jit, static_argnames=("ecfg", "steps"))
def _teacher_rollouts(cl, sm, md, windows, var, ecfg: EnvConfig, steps: int):
    env = MaifsEnv(cl, sm, md, windows, ecfg)

    def run(w):
        _, s0 = env.reset_window(w)

        def body(s, _):
            o = stack_agents(env.get_obs(s), env.agents)
            p, lv, m = srtf_teacher(o, var, env.cfg.num_candidates)
            acts = {a: jnp.stack([p[i], lv[i]]) for i, a in enumerate(env.agents)}
            _, s2, _, _, _ = env.step_env(jax.random.key(0), s, acts)
            return s2, (o, p, lv, m)

        return jax.lax.scan(body, s0, None, length=steps)

    return jax.vmap(run)(jnp.arange(env.num_windows))


def _teacher_episodes(env: MaifsEnv, var, steps: int = 40):
    """Teacher rollouts of every window of ``env``: per step the stacked obs, the teacher's picks, levels and masks,
    and the final states (one compilation per environment config and shape: the arrays and the variant are
    arguments)."""
    return _teacher_rollouts(env.cl, env.sm, env.md, env.windows, var, env.cfg, steps)


@pytest.fixture(scope="module")
def teacher_run():
    """The quad cluster with release options, 4 windows, and the teacher's episodes on them (shared: one rollout)."""
    sm, md = tiny_tables()
    env = MaifsEnv(ClusterSpec.uniform(1, 4, 4, 12.0, 250.0).arrays(), sm, md, stack([_window(s) for s in range(4)]),
                   EnvConfig(num_agents=4, num_running=2, restore_s=30.0, **ECFG))
    return env, _teacher_episodes(env, variant())


def test_srtf_teacher_takes_the_shortest_valid_job_at_the_fastest_level_and_never_releases(teacher_run):
    env, (final, (obs, picks, levels, masks)) = teacher_run
    kk = 6
    picks, levels, masks = np.asarray(picks), np.asarray(levels), np.asarray(masks)
    rem = np.asarray(obs["jobs"])[..., :kk, REMAINING_FEATURE]
    speed = np.asarray(obs["levels"])[..., 0]  # [W, T, A, K+R, L]
    placeable = masks[..., :kk].any(-1)
    assert placeable.sum() > 50
    assert (picks[placeable] < kk).all()  # a placement whenever one is valid
    assert (picks[~placeable] == masks.shape[-1] - 1).all()  # else no-op: the teacher never releases
    best = np.where(masks[..., :kk], rem, np.inf).min(-1)
    chosen = np.take_along_axis(rem, np.minimum(picks, kk - 1)[..., None], -1)[..., 0]
    np.testing.assert_allclose(chosen[placeable], best[placeable])  # the least remaining work among valid picks
    sp = np.take_along_axis(speed, np.minimum(picks, kk - 1)[..., None, None], -2)[..., 0, :]  # [W, T, A, L]
    np.testing.assert_allclose(np.take_along_axis(sp, levels[..., None], -1)[..., 0][placeable],
                               sp.max(-1)[placeable])  # the fastest level
    assert (np.asarray(final.conflicts) == 0).all() and (np.asarray(final.decisions) > 0).all()
    # the non-fungible variant's teacher asks for fair share only
    _, (_, p2, lv2, _) = _teacher_episodes(env, variant(fungible=False))
    assert (np.asarray(lv2)[np.asarray(p2) < kk] == 1).all()


def test_the_clones_labels_are_the_teachers_decisions(teacher_run):
    # relabelling every agent of a teacher episode under the masks it faced gives back the teacher's joint action
    # (pick and level), release options included: the labels are exactly what the teacher did
    env, (_, (obs, picks, levels, masks)) = teacher_run
    lp, ll = jax.jit(jax.vmap(jax.vmap(lambda o, m: teacher_relabel(o, variant(), m, 6))))(obs, masks)
    np.testing.assert_array_equal(np.asarray(lp), np.asarray(picks))
    np.testing.assert_array_equal(np.asarray(ll), np.asarray(levels))
    assert (np.asarray(masks)[..., 6:8].any(-1) & np.asarray(masks)[..., :6].any(-1)).any()  # releases were offered


def test_relabelling_at_a_decision_point_is_the_teachers_choice_there():
    # two agents, three shared candidates (remaining work 0.5, 0.2, 0.9), one release option each
    rem = np.array([0.5, 0.2, 0.9, 0.1])  # the last entry is a running job (release option): never the label
    jobs = np.zeros((2, 4, 16), np.float32)
    jobs[..., REMAINING_FEATURE] = rem
    obs = {"jobs": jnp.asarray(jobs), "mask": jnp.ones((2, 5), bool)}
    masks = jnp.array([[1, 1, 1, 1, 0],  # agent 0 saw every candidate
                       [1, 0, 1, 1, 0]], bool)  # agent 1 stood where an earlier agent had taken candidate 1
    p, lv = teacher_relabel(obs, variant(), masks, 3)
    assert p.tolist() == [1, 0] and lv.tolist() == [3, 3]  # the shortest valid job, at its best demand
    only_release = jnp.array([[0, 0, 0, 1, 1], [0, 0, 1, 1, 0]], bool)
    p, _ = teacher_relabel(obs, variant(), only_release, 3)
    assert p.tolist() == [4, 2]  # no placement: no-op, never a release
    _, lv = teacher_relabel(obs, variant(fungible=False), masks, 3)
    assert lv.tolist() == [1, 1]  # the non-fungible variant's label is fair share


def test_dagger_batches_are_the_clones_states_labelled_by_the_teacher(quad):
    """``cloning_batch``: the episodes the clone drives are its own greedy rollouts (states, masks), each agent
    labelled with the teacher's decision under the masks that agent faced; teacher-driven episodes carry the
    teacher's joint actions; the agreement counts are the clone's on its own episodes."""
    from flax import nnx

    from mlsys_repro.papers.maifs.env import JOB_FEATURES, LEVELS
    from mlsys_repro.papers.maifs.model import MaifsNet

    cl, sm, md = quad
    env = MaifsEnv(cl, sm, md, stack([_window(7, 12)]), EnvConfig(num_agents=4, num_running=2, restore_s=30.0, **ECFG))
    model = MaifsNet(6, 6, JOB_FEATURES, len(LEVELS), hidden=8, rngs=nnx.Rngs(0))  # an untrained "clone"
    graphdef, params = nnx.split(model)
    steps, var = 12, variant()

    @jax.jit
    def run(params):
        m = nnx.merge(graphdef, params)
        batch, hits = cloning_batch(env, m, var, jax.random.key(3), 2, steps, 0.5)  # env 0: the clone; env 1: teacher
        _, s = env.reset_window(0)

        def greedy(s, _):  # the clone's own greedy rollout of the window, for comparison
            o = stack_agents(env.get_obs(s), env.agents)
            ja = act(m, o, None, var, greedy=True, k=6)
            _, s2, _, _, _ = env.step_env(jax.random.key(0), s, {a: jnp.stack([ja.picks[i], ja.levels[i]])
                                                                 for i, a in enumerate(env.agents)})
            return s2, (o, ja.picks, ja.pick_masks)

        _, own = jax.lax.scan(greedy, s, None, length=steps)
        teacher = jax.vmap(lambda o: srtf_teacher(o, var, 6))(jax.tree.map(lambda x: x[:, 1], batch["obs"]))
        relabel = jax.vmap(lambda o, mk: teacher_relabel(o, var, mk, 6))(
            jax.tree.map(lambda x: x[:, 0], batch["obs"]), batch["masks"][:, 0])
        return batch, hits, own, teacher, relabel

    batch, hits, (o_own, p_own, m_own), (tp, tl, tm), (rp, rl) = jax.device_get(run(params))
    alive = batch["alive"][:, 0]
    assert alive.all()  # every step is a live decision of the clone's episode
    np.testing.assert_array_equal(batch["obs"]["jobs"][:, 0], o_own["jobs"])  # the states the clone visits
    np.testing.assert_array_equal(batch["masks"][:, 0], m_own)  # under the masks it sampled under
    np.testing.assert_array_equal(batch["picks"][:, 0], rp)  # labelled with the teacher's decision there
    np.testing.assert_array_equal(batch["levels"][:, 0], rl)
    choice = m_own.sum(-1) > 1
    assert (p_own != rp)[choice].any()  # the untrained clone errs: the batch carries the corrections
    np.testing.assert_array_equal(hits, [((p_own == rp) & choice).sum(), choice.sum()])
    np.testing.assert_array_equal(batch["picks"][:, 1], tp)  # the teacher's episode: its own joint actions
    np.testing.assert_array_equal(batch["levels"][:, 1], tl)
    np.testing.assert_array_equal(batch["masks"][:, 1], tm)


def _ce_and_agreement(graphdef, params, var, obs, picks, levels, masks):
    """Cross-entropy to the teacher and greedy agreement with its picks and levels over teacher episodes."""
    from flax import nnx

    model = nnx.merge(graphdef, params)
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (obs, picks, levels, masks))
    ja = jax.vmap(lambda o, p, lv, m: act(model, o, None, var, replay=(p, lv, m), k=6))(*flat)
    decide = flat[0]["mask"][..., :-1].any(-1)
    placed = flat[1] < 6
    ce = -(ja.logp * decide).sum() / decide.sum()
    agree = ((ja.probs.argmax(-1) == flat[1]) & decide).sum() / decide.sum()
    level = ((ja.level_mode == flat[2]) & placed).sum() / placed.sum()
    return ce, agree, level


def test_behaviour_cloning_lowers_the_cross_entropy_to_the_teacher_and_matches_its_picks(quad):
    """A few cross-entropy steps (``bc_rounds`` x ``bc_epochs`` x ``minibatches`` = 16; the second batch half
    driven by the clone, DAgger) make the network take the teacher's pick and its level on >= 90 % of the agent
    decisions of teacher episodes on unseen windows; a cold-start run (``warm = 0``) keeps its random
    initialisation."""
    cl, sm, md = quad
    ecfg = EnvConfig(num_agents=4, num_running=2, restore_s=30.0, **ECFG)  # teacher_run's: its rollout compiled once
    cfg = TrainConfig(num_envs=4, rollout_len=40, num_updates=1, updates_per_chunk=1, epochs=1, minibatches=2,
                      lr=1e-3, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.0, hidden=32, network="maifs",
                      paired=2, prior_beta=0.0, credit="team", cf_lambda=0.0, adv_clip=5.0, bc_rounds=2, bc_epochs=4,
                      bc_lr=1e-2, bc_dagger=0.5)
    init, _, _, graphdef = make_train(ecfg, cfg, 4)
    prob = Problem(cl, sm, md, stack([_window(s) for s in range(6)]))
    jinit = jax.jit(init)
    warm, cold = jinit(jax.random.key(0), variant(), prob), jinit(jax.random.key(0), variant(warm=False), prob)
    bc = np.asarray(warm.bc)  # per round: loss, pick agreement, entropy, level agreement, agreement on own episodes
    assert bc.shape == (2, len(BC_STATS)) and bc[-1, 0] < bc[0, 0] and np.isnan(np.asarray(cold.bc)).all()
    assert np.isnan(bc[0, 4]) and 0.5 <= bc[1, 4] <= 1.0  # the first batch is the teacher's; the second the clone's
    assert np.isfinite(bc[:, :4]).all() and (bc[:, [1, 3]] <= 1.0).all()
    unseen = MaifsEnv(cl, sm, md, stack([_window(s) for s in range(100, 104)]), ecfg)
    _, (obs, picks, levels, masks) = _teacher_episodes(unseen, variant())
    stats = jax.jit(lambda prm: _ce_and_agreement(graphdef, prm, variant(), obs, picks, levels, masks))
    ce0, agree0, _ = (float(x) for x in stats(cold.params))
    ce1, agree1, level1 = (float(x) for x in stats(warm.params))
    # a random network already agrees on most decisions of these small episodes (few valid options; 0.91 on one
    # machine), so the clone must at least halve the disagreement as well as reach 90 %
    assert ce1 < 0.5 * ce0 and agree1 >= 0.9 and 1.0 - agree1 <= 0.5 * (1.0 - agree0) and level1 >= 0.9, \
        (ce0, ce1, agree0, agree1, level1)


# ---------------------------------------------------------------------------------------------- fair environment


@jax.jit
def _sequential_step(cl, sm, md, windows, key):
    """A random reachable state (6 uncoordinated random sub-steps), then one joint action of the coordinated
    sampler with random logits: ``(failed picks, overcommit after it, placements)``."""
    env = MaifsEnv(cl, sm, md, windows, EnvConfig(num_agents=4, num_running=2, restore_s=30.0, **ECFG))
    _, s = env.reset_window(0)

    def rnd(s, k):
        o = stack_agents(env.get_obs(s), env.agents)
        k1, k2 = jax.random.split(k)
        p = jax.random.categorical(k1, jnp.where(o["mask"], 0.0, -1e9))
        lv = jax.random.randint(k2, (4,), 0, 4)
        _, s, _, _, _ = env.step_env(k, s, {a: jnp.stack([p[i], lv[i]]) for i, a in enumerate(env.agents)})
        return s, None

    k_pre, k_logit, k_pick, k_lv = jax.random.split(key, 4)
    s, _ = jax.lax.scan(rnd, s, jax.random.split(k_pre, 6))
    o = stack_agents(env.get_obs(s), env.agents)
    kk = 6
    logits = 3.0 * jax.random.normal(k_logit, o["mask"].shape)
    g = jnp.round(o["jobs"][:, :kk, GPUS_FEATURE] * 8.0)
    wd = o["jobs"][:, :kk, WIDE_FEATURE] > 0.5
    picks, _ = _conditional_masks(o["mask"], None, k_pick, logits, True, False, kk, o["cap"], g, wd, o["run_ids"])
    s2, succ, fail = env.apply(s, picks, jax.random.randint(k_lv, (4,), 0, 4))
    return fail.sum(), overcommit(cl, s2.sim.occ), (succ & (picks < kk)).sum()


@settings(max_examples=80, deadline=None, derandomize=True)
@given(gpus=st.sampled_from([4, 8]), cpus=st.sampled_from([12.0, 24.0]), seed=st.integers(0, 10_000),
       burst=st.booleans())
def test_sequential_masks_never_over_commit_capacity(gpus, cpus, seed, burst):
    """Property: from any reachable state of any cluster of 4 agents (servers of 4 or 8 GPUs, lean or rich in
    CPUs) and any window (jobs of 1-16 GPUs, wide ones included, arriving at once or spread), every joint pick the
    coordinated sampler allows, whatever its logits, fits after the earlier agents' placements: no pick fails and
    no server is over capacity."""
    rng = np.random.default_rng(seed)
    n = 16
    arr = np.zeros(n) if burst else np.sort(rng.uniform(0, 600, n)) - 0.0
    w = Window("w", arr - arr[0], rng.uniform(200, 3000, n), rng.choice([1, 2, 3, 4, 6, 8, 12, 16], n).astype(np.int32),
               rng.integers(0, 2, n).astype(np.int32))
    fail, over, _ = _sequential_step(ClusterSpec.uniform(1, 4, gpus, cpus, 250.0).arrays(), *tiny_tables(),
                                     stack([w]), jax.random.key(seed))
    assert int(fail) == 0 and float(over) <= 1e-4


def test_the_property_check_places_jobs():
    # the property above is not vacuous: its random states leave room and the sampler places jobs
    placed = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        w = Window("w", np.zeros(16), rng.uniform(200, 3000, 16), rng.choice([1, 2, 4, 8], 16).astype(np.int32),
                   np.zeros(16, np.int32))
        placed += int(_sequential_step(ClusterSpec.uniform(1, 4, 8, 24.0, 250.0).arrays(), *tiny_tables(),
                                       stack([w]), jax.random.key(seed))[2])
    assert placed > 0


def _gpu_seconds_identity(st_, works, gpus: int, restore_s: float) -> tuple[float, float, int]:
    """(allocated GPU-seconds, gpus x (total work + restore_s x net preemptions), preemptions): equal when every
    job runs at speed 1 and each net preemption is charged restore_s exactly once."""
    pre = int(st_.stats.preemptions)
    return float(st_.stats.gpu_s), gpus * (float(np.sum(works)) + restore_s * pre), pre


def test_restore_cost_is_charged_exactly_once_per_preemption_to_heuristics(tiny):
    # 2-GPU jobs of the speed-1 model on 2 x 4 GPUs under LAS (which preempts every round): the GPU time spent is
    # the jobs' work plus one restore per net preemption, not one per round a preempted job waits
    _, cl, sm, md = tiny
    rng = np.random.default_rng(0)
    n = 8
    w = Window("w", np.sort(rng.uniform(0, 600, n)) - 0.0, rng.uniform(300, 1500, n), np.full(n, 2, np.int32),
               np.ones(n, np.int32))
    w = w.replace(arrival=w.arrival - w.arrival[0])
    jobs = jax.tree.map(lambda x: x[0], stack([w]))
    st_ = simulate(cl, sm, jobs, SimConfig(round_s=100.0, restore_s=30.0),
                   make_schedule(Heuristic("las", "fair").params(), cl, md, jobs, 8))
    got, want, pre = _gpu_seconds_identity(st_, w.work, 2, 30.0)
    assert pre >= 3 and got == pytest.approx(want, rel=1e-5)


def test_restore_cost_is_charged_exactly_once_per_preemption_to_learned_agents(quad):
    # the agents' environment: random joint actions with releases over whole episodes, same identity
    cl, sm, md = quad
    rng = np.random.default_rng(1)
    n = 14
    wins = []
    for _ in range(3):
        arr = np.sort(rng.uniform(0, 800, n))
        wins.append(Window("w", arr - arr[0], rng.uniform(300, 1500, n), np.full(n, 2, np.int32),
                           np.ones(n, np.int32)))
    env = MaifsEnv(cl, sm, md, stack(wins), EnvConfig(num_agents=4, num_running=2, restore_s=30.0, **ECFG))

    def run(w, key):
        _, s = env.reset_window(w)

        def body(s, k):
            o = stack_agents(env.get_obs(s), env.agents)
            # releases favoured, so that preemptions happen
            logits = jnp.where(jnp.arange(o["mask"].shape[-1]) >= 6, 2.0, 0.0)
            p = jax.random.categorical(k, jnp.where(o["mask"], logits, -1e9))
            _, s, _, _, _ = env.step_env(k, s, {a: jnp.stack([p[i], jnp.int32(1)]) for i, a in enumerate(env.agents)})
            return s, None

        return jax.lax.scan(body, s, jax.random.split(key, 400))[0]

    final = jax.jit(jax.vmap(run))(jnp.arange(3), jax.random.split(jax.random.key(2), 3))
    total_pre = 0
    for i, w in enumerate(wins):
        s = jax.tree.map(lambda x, i=i: x[i], final)
        assert bool((np.asarray(s.sim.finish)[:n] >= 0).all())  # every job finished
        got, want, pre = _gpu_seconds_identity(s.sim, w.work, 2, 30.0)
        total_pre += pre
        assert got == pytest.approx(want, rel=1e-5)
    assert total_pre >= 3


# ---------------------------------------------------------------------------------------------- evaluation and curves


def test_stochastic_evaluation_finishes_and_the_traced_greedy_flag_is_greedy(quad):
    from flax import nnx

    from mlsys_repro.papers.maifs.env import JOB_FEATURES, LEVELS
    from mlsys_repro.papers.maifs.model import MaifsNet
    from mlsys_repro.papers.maifs.train import evaluate

    cl, sm, md = quad
    ecfg = EnvConfig(num_agents=4, num_running=2, restore_s=30.0, **ECFG)
    prob = Problem(cl, sm, md, stack([_window(3, 12)]))
    graphdef, params = nnx.split(MaifsNet(6, 6, JOB_FEATURES, len(LEVELS), hidden=8, rngs=nnx.Rngs(0)))

    @jax.jit
    def run(greedy, key):
        s = evaluate(ecfg, graphdef, params, variant(), prob, 0, greedy=greedy, key=key)
        return s.sim.finish, s.steps

    g_py = jax.jit(lambda: evaluate(ecfg, graphdef, params, variant(), prob, 0, greedy=True).sim.finish)()
    g_tr, _ = run(jnp.asarray(True), jax.random.key(5))
    np.testing.assert_array_equal(np.asarray(g_tr), np.asarray(g_py))  # one compiled program serves both
    finishes = [np.asarray(run(jnp.asarray(False), jax.random.key(k))[0]) for k in range(3)]
    assert all((f[:12] >= 0).all() for f in finishes)  # every sampled episode completes
    assert any(not np.array_equal(f, np.asarray(g_py)) for f in finishes)  # and it samples


def test_curve_rows_carry_the_warm_start_the_clone_and_the_diagnostics():
    from mlsys_repro.papers.maifs.experiments import _curve_rows
    from mlsys_repro.papers.maifs.pipeline import Trained
    from mlsys_repro.papers.maifs.schemas import MaifsParams

    u = 4
    curves = {"check_jct_h": np.array([[1.0, 0.9], [2.0, 1.9]]), "check_jct_h_start": np.array([1.1, 2.1]),
              "approx_kl": np.full((2, u), 0.01), "q_loss": np.full((2, u), 0.5), "cut_episodes": np.zeros((2, u)),
              "credit_spread": np.full((2, u), 0.3), "entropy": np.ones((2, u))}
    # seed 0: two cloning batches, the second half the clone's (DAgger); seed 1: a cold start
    bc = np.array([[[2.0, 0.5, 1.0, 0.7, np.nan], [1.0, 0.9, 0.5, 0.95, 0.8]], np.full((2, 5), np.nan)])
    tr = Trained(names=["maifs"], seeds=np.array([0, 1]), params=None, var=None, curves=curves, env_cfg=None,
                 cfg=None, seconds=0.0, bc=bc)
    p = MaifsParams(num_updates=u, updates_per_chunk=2, num_envs=4, rollout_len=8, paired=2)
    df = __import__("pandas").DataFrame(_curve_rows(tr, ["maifs"], p))
    chk = df[df.metric == "curve_check_jct_h"].sort_values(["seed", "step"])
    assert chk["step"].tolist() == [0, 2, 4, 0, 2, 4] and chk["value"].tolist() == [1.1, 1.0, 0.9, 2.1, 2.0, 1.9]
    clone = df[df.metric.str.startswith("bc_")]
    assert len(clone) == 9 and set(clone.seed) == {0} and clone["bc_round"].max() == 2  # none for the cold start
    assert clone[(clone.metric == "bc_agreement") & (clone.bc_round == 2)]["value"].item() == 0.9
    assert clone[clone.metric == "bc_own_agreement"][["bc_round", "value"]].values.tolist() == [[2, 0.8]]
    assert clone[(clone.metric == "bc_level_agreement")]["value"].tolist() == [0.7, 0.95]
    assert df[df.metric == "clone_agreement"][["seed", "value"]].values.tolist() == [[0, 0.9]]
    for m in ("curve_approx_kl", "curve_q_loss", "curve_cut_episodes", "curve_credit_spread", "curve_entropy"):
        assert len(df[df.metric == m]) == 4, m  # 2 seeds x 2 blocks of updates
