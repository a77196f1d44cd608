"""Per-action features equal what myopic computes; the look-ahead planner beats myopic where it must; the scenario
knobs of the headroom sweep; the action-scoring agent's warm start; the convergence gate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.common.rl.env import flatten_action
from mlsys_repro.papers.greenplace.baselines import make_lookahead, myopic, random_policy
from mlsys_repro.papers.greenplace.env import PlacementEnv, objective, place
from mlsys_repro.papers.greenplace.features import (
    FEATURES,
    OBJECTIVE,
    action_features,
    all_actions,
    candidates,
    valid_actions,
)
from mlsys_repro.papers.greenplace.pipeline import converged
from mlsys_repro.papers.greenplace.scenario import CONTENDED_WAN, knob_regime, regime_hardware, vary, with_load
from mlsys_repro.papers.greenplace.schemas import EdgeCloudHardware, NodeSpec, Regime
from tests.papers.greenplace.tiny import T, tiny_params

ENV = PlacementEnv()
# what the tests below evaluate for every visited state (and action), jitted once per parameter shape (CI time #51:
# op by op, dispatching every op of every state and action cost more than compiling these); a jitted step equals the
# eager one (tests/papers/greenplace/test_env.py::test_step_is_pure_and_jittable_and_auto_resets)
_step = jax.jit(ENV.step)
_get_obs = jax.jit(ENV.get_obs)
_random_policy = jax.jit(random_policy)
_myopic = jax.jit(myopic)
_action_features = jax.jit(action_features)
_valid_actions = jax.jit(valid_actions)
_placed_objective = jax.jit(lambda state, p, a: objective(place(state, p, a), p))


def _visited_states(params, n=12, seed=0):
    """States met along a random-policy trajectory (queues, warm functions and hours vary)."""
    obs, state = ENV.reset(jax.random.key(seed), params)
    out = []
    for k in jax.random.split(jax.random.key(seed + 1), n):
        out.append(state)
        ka, ks = jax.random.split(k)
        obs, state, *_ = _step(ks, state, _random_policy(ka, obs, state, params), params)
    return out


def test_features_are_the_model_predictions_myopic_minimises():
    p = tiny_params(rate=jnp.full(T, 2.0, jnp.float32), cold_start_s=jnp.float32(0.5))
    acts = all_actions(p)
    for state in _visited_states(p):
        f = np.asarray(_action_features(state, p))
        valid = np.asarray(_valid_actions(state, p))
        assert f.shape == (acts.shape[0], len(FEATURES) + 2)
        for i in np.flatnonzero(valid):
            assert f[i, OBJECTIVE] == pytest.approx(float(_placed_objective(state, p, acts[i])), rel=1e-6)
            # the reward of the step is exactly -(w * cost + (1 - w) * jct) of the features
            _, _, r, _, _ = _step(jax.random.key(0), state, acts[i], p)
            assert float(r) == pytest.approx(-(0.5 * f[i, 0] + 0.5 * f[i, 1]), rel=1e-5)
        assert not f[~valid].any()
        best = int(flatten_action(_myopic(None, None, state, p), ENV.action_space(p).nvec))
        assert best == int(np.flatnonzero(valid)[np.argmin(f[valid, OBJECTIVE])])


def test_queue_and_occupancy_features_by_hand():
    p = tiny_params()  # t_norm = 1 s; 10 frames; edge 0.1 s / frame for the whole model, cloud 0.01 s
    _, state = ENV.reset(jax.random.key(0), p)
    state = state.replace(t=jnp.float32(5.0), free_at=jnp.array([[8.0, 0.0], [0.0, 0.0]], jnp.float32),
                          batch=jnp.float32(10.0))
    f = np.asarray(action_features(state, p))
    nvec = ENV.action_space(p).nvec
    at = lambda c, a, b: f[int(flatten_action(jnp.array([c, a, b]), nvec))]  # noqa: E731
    edge, cloud = at(2, 0, 0), at(0, 0, 1)  # whole model on the edge site / on the cloud
    q = FEATURES.index("queue")
    assert edge[q] == pytest.approx(3.0) and cloud[q] == pytest.approx(0.0)  # the edge lane is busy until t = 8
    occ = len(FEATURES)
    assert edge[occ] == pytest.approx(10 * 0.1) and edge[occ + 1] == 0.0  # 10 frames x 0.1 s on the edge lane
    # the cloud lane is held until the last frame is done: frames arrive every 0.015 s (1.5e5 B at 1e7 B/s), so
    # the stage ends at 10 x 0.015 + 0.01 s, not after 10 x 0.01 s of compute
    assert cloud[occ] == 0.0 and cloud[occ + 1] == pytest.approx(10 * 0.015 + 0.01, rel=1e-4)
    assert cloud[FEATURES.index("cloud_work")] == 1.0 and edge[FEATURES.index("cloud_work")] == 0.0


def test_candidates_are_the_k_best_valid_actions_in_order():
    p = tiny_params()
    _, state = ENV.reset(jax.random.key(3), p)
    f = np.asarray(action_features(state, p))
    valid = np.asarray(valid_actions(state, p))
    idx, feats, ok = (np.asarray(x) for x in candidates(state, p, 3))
    assert ok.all() and (np.diff(feats[:, OBJECTIVE]) >= 0).all()
    np.testing.assert_array_equal(feats, f[idx])
    assert feats[-1, OBJECTIVE] <= np.sort(f[valid, OBJECTIVE])[2]
    idx, _, ok = (np.asarray(x) for x in candidates(state, p, 40))  # more than the valid actions
    assert ok.sum() == valid.sum() and set(idx[ok]) == set(np.flatnonzero(valid))


def _trap_params():
    """Two models, one cloud lane, jobs every ~10 ms, JCT only. Model 0 runs almost as fast on the edge site
    (0.55 s) as on the cloud (0.5 s); model 1 (99 % of arrivals) needs the cloud (10 s on the edge). Myopic sends
    a model-0 job to the cloud and the next job queues behind it; looking ahead keeps the cloud free."""
    f = jnp.asarray
    lat = lambda e, c: f([[[0.0, 0.0], [0.0, 0.0], [e, c]]], jnp.float32)  # noqa: E731
    back = lambda e, c: f([[[e, c], [0.0, 0.0], [0.0, 0.0]]], jnp.float32)  # noqa: E731
    two = lambda x: jnp.concatenate([x, x])  # noqa: E731
    base = tiny_params()
    return tiny_params(
        rate=jnp.full(T, 100.0, jnp.float32), w_energy=jnp.float32(0.0), lane_ok=jnp.array([[True, False]] * 2),
        bw=jnp.full((2, 2), 1e12, jnp.float32), model_probs=f([0.01, 0.99], jnp.float32),
        in_bytes=two(base.in_bytes), out_bytes=two(base.out_bytes),
        cand_ok=jnp.array([[True, False, True]] * 2), front_empty=two(base.front_empty),
        back_empty=two(base.back_empty), is_prefix=two(base.is_prefix),
        front_lat=jnp.concatenate([lat(0.055, 0.05), lat(1.0, 0.05)]),
        back_lat=jnp.concatenate([back(0.055, 0.05), back(1.0, 0.05)]),
        cross_bytes=two(base.cross_bytes), front_mem=two(base.front_mem), back_mem=two(base.back_mem),
        front_params=two(base.front_params), back_params=two(base.back_params), front_frac=two(base.front_frac),
        all_front=f([2, 2], jnp.int32), dads_cut=f([[1, 1], [1, 1]], jnp.int32))


def test_lookahead_keeps_the_cloud_free_where_myopic_does_not():
    p = _trap_params()
    _, state = ENV.reset(jax.random.key(0), p)
    state = state.replace(model=jnp.int32(0), batch=jnp.float32(10.0))

    def on_cloud(a):
        c, front, back = (int(x) for x in a)
        return (c == 0 and back == 1) or (c == 2 and front == 1)

    assert on_cloud(myopic(None, None, state, p))
    plan = make_lookahead(4, 4, 2, 0.9)
    assert not on_cloud(jax.jit(plan)(jax.random.key(1), None, state, p))
    assert make_lookahead(4, 4, 2, 0.9) == plan and hash(make_lookahead(4, 4, 2, 0.9)) == hash(plan)  # a value:
    assert make_lookahead(4, 4, 3, 0.9) != plan  # one compilation per setting, keyed by equality
    # with no future (horizon 0 is not allowed; a zero discount is the same) the planner is myopic
    assert on_cloud(jax.jit(make_lookahead(4, 4, 2, 0.0))(jax.random.key(1), None, state, p))


def test_headroom_knobs():
    p = tiny_params(price=jnp.asarray(np.tile(np.linspace(0.0, 0.2, T)[:, None], (1, 2)), jnp.float32),
                    green_kw=jnp.full((T, 2), 0.01, jnp.float32))
    same = vary(p, "price_spread", 1.0)
    np.testing.assert_allclose(same.price, p.price, rtol=1e-6)
    wide = vary(p, "price_spread", 2.0)
    np.testing.assert_allclose(np.asarray(wide.price).mean(0), np.asarray(p.price).mean(0), rtol=1e-5)
    np.testing.assert_allclose(np.ptp(np.asarray(wide.price), 0), 2 * np.ptp(np.asarray(p.price), 0), rtol=1e-5)
    assert float(vary(p, "green_scale", 0.0).green_kw.max()) == 0.0
    np.testing.assert_allclose(vary(p, "load", 1.5).rate, 1.5 * np.asarray(p.rate))
    for knob in ("wan_scale", "contended_load"):  # they change the hardware: regimes, with their own model tables
        with pytest.raises(KeyError, match="knob_regime"):
            vary(p, knob, 0.5)
    assert knob_regime("wan_scale", 0.5) == Regime(name="wan_x0.5", wan_scale=0.5)
    hot = knob_regime("contended_load", 2.0)
    assert (hot.wan_scale, hot.link_fifo, hot.load) == (CONTENDED_WAN, True, 2.0)
    hw = EdgeCloudHardware(name="t", nodes=[
        NodeSpec(name="a", kind="edge", p_idle_w=10, p_max_w=30, memory_gb=1, job_share=1.0),
        NodeSpec(name="dc", kind="cloud", lanes=2, p_idle_w=100, p_max_w=300, memory_gb=10)], wan_mbps=50.0)
    assert regime_hardware(hw, Regime()) is hw
    slow = regime_hardware(hw, hot)
    assert (slow.wan_mbps, slow.link_fifo, slow.lan_mbps) == (12.5, True, hw.lan_mbps)
    assert (hw.wan_mbps, hw.link_fifo) == (50.0, False)  # the configured hardware is not touched
    np.testing.assert_allclose(with_load(p, 2.0).rate, 2.0 * np.asarray(p.rate))
    assert with_load(p, 1.0) is p
    with pytest.raises(KeyError, match="unknown headroom knob"):
        vary(p, "pue", 1.0)
    with pytest.raises(ValueError, match="load must be > 0"):
        vary(p, "load", 0.0)


def test_converged_gate_known_answers():
    curve = np.array([
        [2.0, 1.5, 1.20, 1.19],  # flat at the end, at its best: converged
        [2.0, 1.5, 1.20, 1.10],  # still falling by 8 %: not converged
        [2.0, 1.0, 1.00, 1.50],  # collapsed after its best: not converged
        [2.0, 1.0, 1.02, 1.02],  # within 3 % of its best and flat: converged
    ])
    np.testing.assert_array_equal(converged(curve), [True, False, False, True])
    assert not converged(np.array([[1.0]])).any()  # one chunk cannot show convergence


@pytest.mark.slow
def test_scorer_warm_start_reproduces_myopic():
    from mlsys_repro.papers.greenplace import scorer_agent
    from mlsys_repro.papers.greenplace.schemas import PlacementPolicy

    p = tiny_params(rate=jnp.full(T, 1.0, jnp.float32), cold_start_s=jnp.float32(0.5), episode_jobs=32)
    pol = PlacementPolicy(name="s", kind="ppo_scorer", rollout_len=8, epochs=1, minibatches=2, head_hidden=32,
                          top_k=4, bc_steps=300, bc_lr=3e-3)
    train = scorer_agent.make_train(ENV, p, pol, iterations=16, num_envs=8)
    ts = jax.jit(train.start)(jax.random.key(0), 0.5, p)
    act = jax.jit(train.act)
    agree = [bool((act(ts.params, None, _get_obs(s, p), s, p) == _myopic(None, None, s, p)).all())
             for s in _visited_states(p, n=40, seed=5)]
    assert np.mean(agree) >= 0.9, np.mean(agree)
    ts, curves = jax.jit(train.advance)(ts, 0.5, p)  # two PPO updates run and stay finite
    assert np.isfinite(np.asarray(curves["loss"])).all() and train.env_steps == 2 * 8 * 8


def test_partitioners_run_an_all_front_cut_at_the_site():
    """On a slow WAN the latency-optimal cut keeps every layer in front; Neurosurgeon and DADS must then place
    the (empty) back segment at the site, as the environment requires, not on the cloud (a rejected job)."""
    from mlsys_repro.papers.greenplace.baselines import dads, neurosurgeon

    p = tiny_params(bw=jnp.full((2, 2), 1e3, jnp.float32))  # 1 kB/s: any transfer costs minutes
    _, state = ENV.reset(jax.random.key(0), p)
    for policy in (neurosurgeon, dads):
        a = policy(None, None, state, p)
        assert [int(x) for x in a] == [2, 0, 0]  # all in front, at the site
        assert bool(ENV.placeable(state, p, a))


def test_load_adaptive_neurosurgeon_follows_the_queues():
    """Idle: the latency-optimal cut, as Neurosurgeon's (all on the cloud, 6x faster); with the site's FIFO uplink
    busy for 100 s it keeps the job at the site, which plain Neurosurgeon (nominal bandwidth) does not; with the
    site's lane busy instead, the cloud again. Always a site -> cloud prefix cut that the environment accepts."""
    from mlsys_repro.papers.greenplace.baselines import neurosurgeon, neurosurgeon_queue

    p = tiny_params(link_fifo=jnp.asarray(True))
    _, s = ENV.reset(jax.random.key(0), p)
    s = s.replace(site=jnp.int32(0), model=jnp.int32(0), batch=jnp.float32(10.0), t=jnp.float32(0.0))
    act = jax.jit(neurosurgeon_queue)
    idle = act(None, None, s, p)
    assert [int(x) for x in idle] == [int(x) for x in neurosurgeon(None, None, s, p)] == [0, 0, 1]
    up_busy = s.replace(link_free_at=s.link_free_at.at[0, 0].set(100.0))
    assert [int(x) for x in act(None, None, up_busy, p)] == [2, 0, 0]
    assert [int(x) for x in neurosurgeon(None, None, up_busy, p)] == [0, 0, 1]
    lane_busy = up_busy.replace(link_free_at=s.link_free_at, free_at=s.free_at.at[0, 0].set(100.0))
    assert [int(x) for x in act(None, None, lane_busy, p)] == [0, 0, 1]
    for st in (s, up_busy, lane_busy):
        assert bool(ENV.placeable(st, p, act(None, None, st, p)))


def test_the_contended_regime_is_the_same_in_every_experiment():
    """The headline's and the pareto front's regime is the headroom's contended knob at load 1 (whose look-ahead
    headroom the headroom experiment maps); the uncontended sensitivity is the hardware as configured."""
    from omegaconf import OmegaConf

    from tests.conftest import ROOT

    conf = ROOT / "conf" / "experiment" / "greenplace"
    want = knob_regime("contended_load", 1.0)
    for exp in ("headline", "pareto"):
        r = Regime(**OmegaConf.to_container(OmegaConf.load(conf / f"{exp}.yaml").experiment.params.regime))
        assert (r.name, r.wan_scale, r.link_fifo, r.load) == ("contended", want.wan_scale, True, want.load), exp
    r = OmegaConf.load(conf / "uncontended.yaml").experiment.params.regime
    assert Regime(**OmegaConf.to_container(r)) == Regime()


@pytest.mark.parametrize("warm", [False, True])
def test_learning_rows_carry_the_start_and_the_start_gate(warm):
    """The curve starts at env_steps 0 with the untrained (or behaviour-cloned) policy; the start comparison is
    beats_untrained for a cold start and beats_prior for a warm one (gates.py names), beside the required gates."""
    from mlsys_repro.papers.greenplace.pipeline import learning_rows

    curve = np.array([[3.0, 2.0], [3.0, 4.0]])
    start = np.array([5.0, 3.5])
    learn = {"curve": curve, "env_steps": 200, "chunk_steps": 100, "converged": np.array([True, False]),
             "beats_trivial_on_train": np.array([True, False]), "beats_myopic_on_train": np.array([False, False]),
             "myopic_train_objective": np.array([1.0, 1.0]), "start_train_objective": start, "warm_start": warm,
             "beats_start_on_train": curve[:, -1] < start}
    rows = learning_rows("bdq", learn, [0, 1], scenario="s", regime="r")
    got = {(r["metric"], r.get("env_steps"), r["seed"]): r["value"] for r in rows}
    assert got[("greedy_train_objective", 0, 0)] == 5.0 and got[("greedy_train_objective", 200, 1)] == 4.0
    gate = "beats_prior" if warm else "beats_untrained"
    other = "beats_untrained" if warm else "beats_prior"
    assert got[(gate, None, 0)] == 1.0 and got[(gate, None, 1)] == 0.0
    assert not any(r["metric"] == other for r in rows)
    assert all(r["regime"] == "r" for r in rows)
