"""The MAIFS training recipe: the input-dependent baseline, capacity-aware sequential masks, the release cost
charged to every scheduler, and the SRTF warm start (hand-made cases, no trace files)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mlsys_repro.common.rl.input_baseline import returns_to_go, time_aligned_baseline
from mlsys_repro.common.rl.marl import stack_agents
from mlsys_repro.common.sim.cluster import ClusterSpec, SimConfig, simulate, summarize
from mlsys_repro.papers.maifs.baselines import Heuristic, make_schedule
from mlsys_repro.papers.maifs.env import JOB_FEATURES, LEVELS, REMAINING_FEATURE, EnvConfig, MaifsEnv
from mlsys_repro.papers.maifs.model import MaifsNet, act, variant
from mlsys_repro.papers.maifs.windows import Window, stack

# ---------------------------------------------------------------------------------------------- baseline


def test_returns_to_go_with_semi_mdp_discounts_and_a_bootstrap():
    r = jnp.array([[-1.0], [-2.0], [-4.0]])
    d = jnp.array([[0.5], [1.0], [0.5]])
    g = np.asarray(returns_to_go(r, d, jnp.array([-8.0])))[:, 0]
    np.testing.assert_allclose(g, [-1 + 0.5 * (-2 + 1.0 * (-4 + 0.5 * -8)), -2 + (-4 - 4), -4 - 4])


def test_time_aligned_baseline_reads_the_other_rollouts_at_the_same_simulated_time():
    # two rollouts of one window: rollout 1 decides at times 0, 2, 4; rollout 0 at 0, 1, 1
    ret = jnp.array([[-2.0, -6.0], [-1.0, -4.0], [0.0, -2.0]])
    times = jnp.array([[0.0, 0.0], [1.0, 2.0], [1.0, 4.0]])
    b = np.asarray(time_aligned_baseline(ret, times, jnp.zeros(2), 2))
    # rollout 0 at t=1 reads rollout 1's first decision at >= 1 (t=2: -4); rollout 1 at t=2 and t=4 reads rollout
    # 0 after its end (0); both read each other at time 0
    np.testing.assert_allclose(b, [[-6.0, -2.0], [-4.0, 0.0], [-4.0, 0.0]])


def test_the_baseline_removes_the_input_and_keeps_the_action_effect():
    # 3 windows x 4 rollouts; window w costs 10 w per step (the input), rollout m's action adds m per step
    t, g, m = 5, 3, 4
    times = jnp.broadcast_to(jnp.arange(t, dtype=jnp.float32)[:, None], (t, g * m))
    w = jnp.repeat(jnp.arange(g), m).astype(jnp.float32)
    a = jnp.tile(jnp.arange(m), g).astype(jnp.float32)
    rew = -jnp.broadcast_to(10.0 * w + a, (t, g * m))
    ret = returns_to_go(rew, jnp.ones((t, g * m)), jnp.zeros(g * m))
    adv = np.asarray(ret - time_aligned_baseline(ret, times, jnp.zeros(g * m), m))
    # the advantage does not depend on the window, only on the action, and ranks the actions
    np.testing.assert_allclose(adv.reshape(t, g, m), np.broadcast_to(adv.reshape(t, g, m)[:, :1], (t, g, m)),
                               atol=1e-4)
    assert np.all(np.diff(adv.reshape(t, g, m)[0, 0]) < 0)


def test_baseline_group_must_divide_the_rollouts():
    with pytest.raises(ValueError, match="group >= 2"):
        time_aligned_baseline(jnp.zeros((2, 6)), jnp.zeros((2, 6)), jnp.zeros(6), 4)


# ---------------------------------------------------------------------------------------------- environment

ECFG = dict(num_candidates=6, max_substeps=4, round_s=100.0, makespan_weight=2.0, reward_scale=10.0, num_short=3,
            num_running=0, conflict_blocks=True, restore_s=0.0)


@pytest.fixture
def quad(tiny):
    """4 servers x 4 GPUs (one agent each) with the tiny speed tables: a job of more than 4 GPUs is wide."""
    _, _, sm, md = tiny
    spec = ClusterSpec.uniform(1, 4, 4, 12.0, 250.0)
    return spec.arrays(), sm, md


def _window(seed: int, n: int = 14) -> Window:
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, 400, n))
    arr -= arr[0]
    return Window("w", arr, rng.uniform(200, 2000, n), rng.choice([1, 2, 3, 4, 6, 8, 12], n).astype(np.int32),
                  rng.integers(0, 2, n).astype(np.int32))


@pytest.fixture(scope="module")
def episode_conflicts() -> dict[bool, tuple[np.ndarray, np.ndarray]]:
    """Conflicts and successful picks of whole sampled episodes, one per window seed, with the coordination graph
    on and off (the variant is an argument: one compilation for both)."""
    from tests.papers.maifs.conftest import tiny_tables

    sm, md = tiny_tables()
    n = 6
    env = MaifsEnv(ClusterSpec.uniform(1, 4, 4, 12.0, 250.0).arrays(), sm, md, stack([_window(s) for s in range(n)]),
                   EnvConfig(num_agents=4, **ECFG))
    model = MaifsNet(6, 6, JOB_FEATURES, len(LEVELS), hidden=8, rngs=nnx.Rngs(0))

    @jax.jit
    def episodes(var):
        def run(w, key):
            _, st = env.reset_window(w)

            def body(st, k):
                ja = act(model, stack_agents(env.get_obs(st), env.agents), k, var)
                acts = {a: jnp.stack([ja.picks[i], ja.levels[i]]) for i, a in enumerate(env.agents)}
                _, st, _, _, _ = env.step_env(k, st, acts)
                return st, None

            st, _ = jax.lax.scan(body, st, jax.random.split(key, 100))
            return st.conflicts, st.decisions

        return jax.vmap(run)(jnp.arange(n), jax.random.split(jax.random.key(1), n))

    return {c: tuple(np.asarray(x) for x in episodes(variant(coordination=c))) for c in (True, False)}


def test_sequential_masks_never_over_commit_capacity(episode_conflicts):
    # random sampled joint actions over whole episodes with wide jobs: with the coordinated (sequential) sampler,
    # every pick the masks allow fits after the earlier agents' placements, so no pick ever fails
    conflicts, decisions = episode_conflicts[True]
    assert (decisions > 0).all() and (conflicts == 0).all()


def test_simultaneous_masks_of_the_no_coordination_ablation_do_conflict(episode_conflicts):
    assert episode_conflicts[False][0].sum() > 0


def test_release_cost_is_charged_to_heuristics_per_net_preemption(tiny):
    # LAS preempts the job with the most attained service for a newcomer every round (50 s of progress per 100-s
    # round here); each net preemption adds restore_s of work, so a preempting schedule finishes later and a
    # non-preempting one (FIFO) does not change
    _, cl, sm, md = tiny
    w = Window("w", np.array([0.0, 150.0, 300.0]), np.array([3000.0, 200.0, 200.0]), np.array([8, 8, 8], np.int32),
               np.zeros(3, np.int32))
    jobs = stack([w])
    jobs = jax.tree.map(lambda x: x[0], jobs)
    out = {}
    for restore in (0.0, 30.0):
        cfg = SimConfig(round_s=100.0, restore_s=restore)
        for name, h in (("las", Heuristic("las", "fair")), ("fifo", Heuristic("fifo", "fair"))):
            st = simulate(cl, sm, jobs, cfg, make_schedule(h.params(), cl, md, jobs, 4))
            out[name, restore] = (summarize(cl, jobs, st), np.asarray(st.finish))
    pre = out["las", 0.0][0].counters["preemptions"]
    assert pre >= 1 and out["fifo", 0.0][0].counters["preemptions"] == 0
    np.testing.assert_allclose(out["fifo", 30.0][1], out["fifo", 0.0][1])  # no preemption, no charge
    las, las0 = out["las", 30.0], out["las", 0.0]
    assert las[0].finished and (las[1] >= las0[1]).all() and las[1].max() > las0[1].max()


# ---------------------------------------------------------------------------------------------- warm start


def test_the_prior_network_picks_srtf_on_visited_states(quad):
    """The clone (the untrained network with the SRTF prior, greedy) takes SRTF's choice in MAIFS's action space
    -- the pending job with the least remaining work among the agent's valid picks not taken by earlier agents --
    on at least 90 % of the agent decisions of its own episodes."""
    cl, sm, md = quad
    env = MaifsEnv(cl, sm, md, stack([_window(s, 20) for s in range(4)]), EnvConfig(num_agents=4, **ECFG))
    model = MaifsNet(6, 6, JOB_FEATURES, len(LEVELS), hidden=8, prior_beta=20.0, rngs=nnx.Rngs(0))

    def run(w):
        _, st = env.reset_window(w)

        def body(st, _):
            o = stack_agents(env.get_obs(st), env.agents)
            ja = act(model, o, None, variant(), greedy=True)
            acts = {a: jnp.stack([ja.picks[i], ja.levels[i]]) for i, a in enumerate(env.agents)}
            _, st2, _, _, _ = env.step_env(jax.random.key(0), st, acts)
            return st2, (ja.picks, ja.pick_masks[:, :6], o["jobs"][:, :6, REMAINING_FEATURE])

        return jax.lax.scan(body, st, None, length=40)[1]

    picks, masks, rem = (np.asarray(x) for x in jax.jit(jax.vmap(run))(jnp.arange(4)))
    real = masks.any(-1)  # agent decisions with at least one valid placement
    best = np.where(masks, rem, np.inf).min(-1)
    chosen = np.take_along_axis(rem, np.minimum(picks, 5)[..., None], -1)[..., 0]
    hit = (picks < 6) & (chosen <= best + 1e-6)
    assert real.sum() > 50 and hit[real].mean() >= 0.9


def test_the_prior_picks_the_best_level():
    from mlsys_repro.papers.maifs.model import level_prior

    lin = level_prior(nnx.Rngs(0), 20.0)
    f = jnp.array([[0.5, 0.3, 0.3], [1.0, 1.0, 1.0], [1.1, 1.5, 1.5], [1.2, 2.0, 2.0]])  # speed rises with level
    logits = np.asarray(lin(f)[:, 0])
    assert logits.argmax() == 3 and logits[3] - logits[2] > 5  # sure enough that sampling rarely deviates
