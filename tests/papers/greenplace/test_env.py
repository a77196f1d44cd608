"""The placement environment on a hand-made problem: timing, energy accounting, queues, masks, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.rl.env import any_valid, is_valid, joint_mask
from mlsys_repro.papers.greenplace import baselines as B
from mlsys_repro.papers.greenplace.env import PlacementEnv
from mlsys_repro.papers.greenplace.env import place as place_eager
from tests.papers.greenplace.tiny import T, tiny_params

ENV = PlacementEnv()
# jitted once per shape (the tiny problem's): eager op-by-op dispatch made these tests slow
place = jax.jit(place_eager)
step_env = jax.jit(ENV.step_env)


def _state(params, **over):
    _, s = ENV.reset(jax.random.key(0), params)
    return s.replace(**{"site": jnp.int32(0), "model": jnp.int32(0), "batch": jnp.float32(10.0), **over})


def _act(*a):
    return jnp.array(a, jnp.int32)


def test_edge_only_job_by_hand():
    p = tiny_params()
    o = place(_state(p), p, _act(2, 0, 0))
    assert float(o.jct) == pytest.approx(1.0)  # 10 frames x 0.1 s on the edge, nothing moves
    kwh = 10 * 0.1 * (0.03 - 0.01) / 3600
    assert float(o.energy_kwh) == pytest.approx(kwh, rel=1e-5)
    assert float(o.cost) == pytest.approx(kwh * 0.1, rel=1e-5)
    assert float(o.co2_kg) == pytest.approx(kwh * 0.4, rel=1e-5)
    assert float(o.cloud_work) == 0.0


def test_cloud_only_pipeline_by_hand():
    p = tiny_params()
    o = place(_state(p), p, _act(0, 0, 1))
    # input 0.015 s/frame -> cloud 0.01 s/frame -> result 0.0004 s/frame; the input link is the bottleneck
    assert float(o.jct) == pytest.approx(0.015 * 10 + 0.01 + 0.0004, rel=1e-5)
    assert float(o.cloud_work) == 1.0


def test_cut_zero_equals_cloud_only_and_cut_all_equals_edge_only():
    p = tiny_params()
    s = _state(p)
    a_cloud = B.cloud_only(None, None, s, p)
    a_edge = B.edge_only(None, None, s, p)
    assert a_cloud.tolist() == [0, 0, 1] and a_edge.tolist() == [2, 0, 0]

    def same(x, y):
        return all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True))

    assert same(place(s, p, a_cloud), place(s, p, _act(2, 1, 0)))  # all layers in front, on the cloud
    assert same(place(s, p, a_edge), place(s, p, _act(1, 0, 0)))  # both halves on the site = all on the site


@pytest.mark.parametrize("green, brown_share", [(0.0, 1.0), (0.005, 1.0), (0.02, 0.5), (0.03, 0.0), (1.0, 0.0)])
def test_renewables_cover_idle_first_then_jobs(green, brown_share):
    p = tiny_params(green_kw=jnp.asarray(np.tile([green, 0.0], (T, 1)), jnp.float32))
    o = place(_state(p), p, _act(2, 0, 0))
    kwh = 10 * 0.1 * 0.02 / 3600
    assert float(o.cost) == pytest.approx(kwh * brown_share * 0.1, rel=1e-4, abs=1e-12)
    assert float(o.green_kwh) == pytest.approx(kwh * (1 - brown_share), rel=1e-4, abs=1e-12)


def test_negative_prices_are_paid_out():
    p = tiny_params(price=jnp.full((T, 2), -0.05, jnp.float32))
    o = place(_state(p), p, _act(2, 0, 0))
    assert float(o.cost) < 0
    _, _, r, _, info = step_env(jax.random.key(0), _state(p), _act(2, 0, 0), p)
    assert float(info["cost"]) < 0 and np.isfinite(float(r))


def test_network_energy_is_charged_at_the_source():
    p = tiny_params(net_kwh_per_byte=jnp.float32(1e-9))
    o = place(_state(p), p, _act(0, 0, 1))
    assert float(o.net_kwh) == pytest.approx(10 * (1.5e5 + 4e3) * 1e-9, rel=1e-5)


def test_queue_single_lane_serialises_jobs():
    p = tiny_params(rate=jnp.full(T, 1e6, jnp.float32))  # the next job arrives (almost) at once
    s = _state(p)
    _, s2, _, _, i1 = step_env(jax.random.key(1), s, _act(2, 0, 0), p)
    s2 = s2.replace(site=jnp.int32(0), batch=jnp.float32(10.0))
    _, _, _, _, i2 = step_env(jax.random.key(2), s2, _act(2, 0, 0), p)
    assert float(i1["jct"]) == pytest.approx(1.0)
    assert float(i2["jct"]) == pytest.approx(2.0, abs=1e-3)  # waits for the only edge lane
    # the cloud has two lanes: two cloud jobs do not wait for each other
    _, s3, _, _, c1 = step_env(jax.random.key(1), s, _act(2, 1, 0), p)
    _, _, _, _, c2 = step_env(jax.random.key(2), s3.replace(batch=jnp.float32(10.0)), _act(2, 1, 0), p)
    assert float(c2["jct"]) == pytest.approx(float(c1["jct"]), rel=1e-3)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=12),
       st.integers(0, 2**30))
@settings(max_examples=15, deadline=None)
def test_invariants_under_random_actions(actions, seed):
    """Lanes are never double-booked (free times only grow), JCT >= the unloaded JCT, energy >= 0."""
    p = tiny_params(rate=jnp.full(T, 0.5, jnp.float32), batch_min=jnp.float32(2.0), batch_max=jnp.float32(50.0))
    _, s = ENV.reset(jax.random.key(seed), p)
    for i, a in enumerate(actions):
        a = jnp.array(a, jnp.int32)
        unloaded = place(s.replace(free_at=jnp.zeros_like(s.free_at)), p, a)
        _, s2, r, _, info = step_env(jax.random.key(seed + i), s, a, p)
        assert bool((s2.free_at >= s.free_at).all())
        if float(info["rejected"]) == 0:
            assert float(info["jct"]) >= float(unloaded.jct) - 1e-4
            assert float(info["energy_kwh"]) >= 0 and float(info["green_kwh"]) >= -1e-12
        assert np.isfinite(float(r))
        s = s2


def test_masks_pin_empty_segments_and_respect_memory():
    p = tiny_params(mem=jnp.asarray([6e8, 1e10], jnp.float32))  # the site cannot hold the whole model
    m = ENV.action_mask(_state(p), p)
    assert m.root.tolist() == [True, True, True]
    assert m.cond[0][0].tolist() == [True, False]  # cut 0: empty front pinned to the source site
    assert m.cond[1][2].tolist() == [True, False]  # cut 2: empty back pinned to the source site
    assert m.cond[0][2].tolist() == [False, True]  # all layers in front: only the cloud fits
    assert m.cond[0][1].tolist() == [True, True]
    a = B.edge_only(None, None, _state(p), p)  # no edge site holds the whole model: edge-only cannot serve it
    assert a.tolist() == [2, 0, 0] and not bool(is_valid(a, m))


@jax.jit
def _placeable_vs_mask(p, s, actions):
    mask = ENV.action_mask(s, p)
    fast = jax.vmap(lambda a: ENV.placeable(s, p, a))(actions)
    ref = jax.vmap(lambda a: is_valid(a, mask) & any_valid(mask))(actions)
    return fast, ref


@given(st.lists(st.sampled_from([1e3, 5e8, 6e8, 1e9, 1e10]), min_size=2, max_size=2), st.integers(0, 1))
@settings(max_examples=15, deadline=None)
def test_placeable_equals_the_mask_for_every_action(mem, site):
    p = tiny_params(mem=jnp.asarray(mem, jnp.float32))
    s = _state(p, site=jnp.int32(site))
    actions = jnp.asarray(list(np.ndindex(*ENV.action_space(p).nvec)), jnp.int32)
    fast, ref = _placeable_vs_mask(p, s, actions)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(ref))


def test_job_larger_than_any_node_is_rejected():
    p = tiny_params(mem=jnp.asarray([1e3, 1e3], jnp.float32))
    s = _state(p)
    assert not bool(any_valid(ENV.action_mask(s, p)))
    _, s2, r, _, info = step_env(jax.random.key(0), s, _act(0, 0, 1), p)
    assert float(info["rejected"]) == 1.0 and float(r) == -5.0 and float(info["jct"]) == 0.0
    assert bool((s2.free_at == s.free_at).all())


def test_invalid_action_is_rejected_not_executed():
    p = tiny_params()
    s = _state(p)
    _, s2, r, _, info = step_env(jax.random.key(0), s, _act(0, 1, 1), p)  # empty front not at the source
    assert float(info["rejected"]) == 1.0 and float(r) == -5.0
    assert bool((s2.free_at == s.free_at).all())


def test_cold_start_then_warm():
    p = tiny_params(cold_start_s=jnp.float32(2.0))
    s = _state(p)
    _, s2, _, _, i1 = step_env(jax.random.key(0), s, _act(2, 0, 0), p)
    s2 = s2.replace(t=s2.free_at[0, 0] + 1.0, batch=jnp.float32(10.0), site=jnp.int32(0))
    _, _, _, _, i2 = step_env(jax.random.key(1), s2, _act(2, 0, 0), p)
    assert float(i1["jct"]) == pytest.approx(1.0 + 2.0 + 2e8 / 1.25e8, rel=1e-5)
    assert float(i2["jct"]) == pytest.approx(1.0, rel=1e-5)


def test_step_is_pure_and_jittable_and_auto_resets():
    p = tiny_params()
    obs, s = ENV.reset(jax.random.key(3), p)
    assert obs.shape == (ENV.observation_size(p),) and bool(jnp.isfinite(obs).all())
    a = _act(0, 0, 1)
    step = jax.jit(ENV.step)
    out1 = ENV.step(jax.random.key(4), s, a, p)
    out2 = step(jax.random.key(4), s, a, p)
    out3 = step(jax.random.key(4), s, a, p)
    for x, y, z in zip(jax.tree.leaves(out1), jax.tree.leaves(out2), jax.tree.leaves(out3), strict=True):
        x, y, z = np.asarray(x), np.asarray(y), np.asarray(z)
        assert np.allclose(x, y, rtol=1e-5, atol=1e-7), (x, y)
        assert np.array_equal(y, z)
    for i in range(8):
        obs, s, r, d, info = ENV.step(jax.random.key(5), s, a, p)
        assert bool(d) == (i == 7)
    assert int(s.step) == 0  # episode_jobs = 8, then auto-reset


def test_single_observation_step_equals_the_base_auto_reset_step():
    p = tiny_params()
    _, s = ENV.reset(jax.random.key(6), p)

    def two_observations(k, s_, a):  # the auto-reset step with both observations, as gymnax writes it
        k_step = k_reset = k  # reset_reuses_step_key
        obs_st, state_st, r, d, info = ENV.step_env(k_step, s_, a, p)
        obs_re, state_re = ENV.reset_env(k_reset, p)
        state = jax.tree.map(lambda x, y: jnp.where(d, x, y), state_re, state_st)
        return jnp.where(d, obs_re, obs_st), state, r, d, info

    base = jax.jit(two_observations)
    ours = jax.jit(lambda k, s_, a: ENV.step(k, s_, a, p))
    a = _act(0, 0, 1)
    for i in range(10):  # episode_jobs = 8: crosses an auto-reset
        k = jax.random.key(100 + i)
        want, got = base(k, s, a), ours(k, s, a)
        for x, y in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
            assert np.array_equal(np.asarray(x), np.asarray(y))
        s = got[1]


def test_auto_reset_reuses_the_step_draw():
    """The step's key is passed unsplit to the reset: the reset state after an episode's last step is exactly
    ``reset_env(key)`` (the step's own next job is discarded), and one uniform draw serves both."""
    p = tiny_params()
    assert ENV.reset_reuses_step_key
    _, s = ENV.reset(jax.random.key(6), p)
    a = _act(0, 0, 1)
    for i in range(8):
        k = jax.random.key(200 + i)
        obs, s2, _, d, _ = ENV.step(k, s, a, p)
        if bool(d):
            obs_re, s_re = ENV.reset_env(k, p)
            np.testing.assert_array_equal(np.asarray(obs), np.asarray(obs_re))
            for x, y in zip(jax.tree.leaves(s2), jax.tree.leaves(s_re), strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        else:  # mid-episode the next job is the step's draw: the same model/batch/site a reset would start with
            _, s_re = ENV.reset_env(k, p)
            assert (int(s2.model), float(s2.batch), int(s2.site)) == (int(s_re.model), float(s_re.batch),
                                                                      int(s_re.site))
        s = s2
    assert i == 7 and bool(d)

    class SplitKeys(PlacementEnv):
        reset_reuses_step_key = False

    def xors(env):  # threefry is rounds of xor/rotate: the count tells how many hashes the compiled step runs
        return jax.jit(lambda k, s_: env.step(k, s_, a, p)).lower(jax.random.key(0), s).compile().as_text().count(
            "xor")

    assert 2 * xors(ENV) < xors(SplitKeys())  # one draw instead of a split and two draws


def test_every_baseline_returns_valid_actions():
    p = tiny_params(batch_min=jnp.float32(1.0), batch_max=jnp.float32(100.0))
    for name, act in B.HEURISTIC_POLICIES.items():
        for k in range(3):
            _, s = ENV.reset(jax.random.key(k), p)
            a = jax.jit(act)(jax.random.key(k), None, s, p)
            assert bool(joint_mask(ENV.action_mask(s, p))[tuple(a)]), (name, a)


def test_neurosurgeon_dads_and_greedy_choices():
    p = tiny_params()
    s = _state(p)
    # per-frame latency: cut0 0.015+0.01+0.0004; cut1 0.05+0.01+0.005+0.0004; cut2 0.1 -> cloud-only is best
    assert B.neurosurgeon(None, None, s, p).tolist() == [0, 0, 1]
    assert B.dads(None, None, s.replace(batch=jnp.float32(1.0)), p)[1:].tolist() == [0, 1]
    # per frame the edge (0.02 kW x 0.1 s) and the cloud (0.2 kW x 0.01 s) use the same energy; a dearer cloud
    # makes keeping everything on the site the cheapest placement
    p2 = tiny_params(price=jnp.asarray(np.tile([0.1, 1.0], (T, 1)), jnp.float32))
    o2 = place(_state(p2), p2, B.greedy_cheapest(None, None, _state(p2), p2))
    assert float(o2.cloud_work) == 0.0 and float(o2.jct) == pytest.approx(1.0)
    p3 = tiny_params(ci=jnp.asarray(np.tile([900.0, 10.0], (T, 1)), jnp.float32))
    a3 = B.greedy_greenest(None, None, _state(p3), p3)
    assert float(place(_state(p3), p3, a3).co2_kg) <= float(place(_state(p3), p3, _act(2, 0, 0)).co2_kg)


def test_inverse_cdf_known_answers_and_zero_probabilities():
    from mlsys_repro.papers.greenplace.env import inverse_cdf

    probs = jnp.array([0.0, 0.25, 0.0, 0.75, 0.0])  # unnormalised is fine; zeros anywhere, trailing included
    u = jnp.array([0.0, 0.2499, 0.25, 0.9999, jnp.nextafter(jnp.float32(1.0), 0.0)])
    got = jax.vmap(lambda x: inverse_cdf(probs * 4.0, x))(u)
    np.testing.assert_array_equal(np.asarray(got), [1, 1, 3, 3, 3])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=6).filter(lambda w: sum(w) > 0), st.integers(0, 2**31 - 1))
def test_inverse_cdf_draws_follow_the_probabilities(weights, seed):
    from mlsys_repro.papers.greenplace.env import inverse_cdf

    w = jnp.asarray(weights, jnp.float32)
    n = 20000
    idx = jax.vmap(lambda x: inverse_cdf(w, x))(jax.random.uniform(jax.random.key(seed), (n,)))
    freq = np.bincount(np.asarray(idx), minlength=len(weights)) / n
    p = np.asarray(weights, float) / sum(weights)
    assert np.all(freq[p == 0] == 0)  # never drawn
    np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(0.25 / n))  # 5 sigma of a binomial share


def test_arrivals_follow_the_configured_mix_and_rate():
    p = tiny_params().replace(model_probs=jnp.array([0.0, 1.0, 3.0]), site_probs=jnp.array([1.0, 0.0]),
                              batch_min=jnp.float32(2.0), batch_max=jnp.float32(32.0),
                              rate=jnp.full(T, 2.0), episode_jobs=10**6)
    # models 1 and 2 have no partition tables (their indices clamp in place()): only the arrivals are checked
    keys = jax.random.split(jax.random.key(1), 4000)

    @jax.jit
    def arrivals(keys, p):
        _, s0 = jax.vmap(ENV.reset, in_axes=(0, None))(keys, p)
        _, s1, *_ = jax.vmap(ENV.step_env, in_axes=(0, 0, None, None))(keys, s0, _act(0, 0, 0), p)
        return s0, s1

    s0, s1 = arrivals(keys, p)
    freq = np.bincount(np.asarray(s1.model), minlength=3) / len(keys)
    np.testing.assert_allclose(freq, [0.0, 0.25, 0.75], atol=0.04)
    assert np.all(np.asarray(s1.site) == 0)
    b = np.asarray(s1.batch)
    assert b.min() >= 2 and b.max() <= 32 and np.median(b) == pytest.approx(8.0, abs=1.0)  # log-uniform
    gaps = np.asarray(s1.t - s0.t)
    assert gaps.min() > 0 and gaps.mean() == pytest.approx(0.5, rel=0.08)  # exponential, mean 1 / rate
