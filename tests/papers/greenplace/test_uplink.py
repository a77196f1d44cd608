"""FIFO WAN links per edge site (``link_fifo``): hand-computed contention, LAN transfers stay free, the flag off
changes nothing, the state commits only accepted placements, the observation block, and the config wiring."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.rl.env import flatten_action
from mlsys_repro.common.traces.energy import EnergyTraces, HourlySeries, RegionYear
from mlsys_repro.papers.greenplace.env import PlacementEnv, wan_links_used
from mlsys_repro.papers.greenplace.env import place as place_eager
from mlsys_repro.papers.greenplace.features import FEATURES, action_features
from mlsys_repro.papers.greenplace.scenario import ModelTables, env_params, regime_hardware, scenario_norms, with_load
from mlsys_repro.papers.greenplace.schemas import EdgeCloudHardware, NodeSpec, PlacementParams, Regime, Scenario
from tests.papers.greenplace.tiny import T, tiny_params, two_site_params

ENV = PlacementEnv()
place = jax.jit(place_eager)
step_env = jax.jit(ENV.step_env)
ON, OFF = jnp.asarray(True), jnp.asarray(False)
RTT = 0.02  # WAN round trip of the hand-computed cases


def _state(params, **over):
    _, s = ENV.reset(jax.random.key(0), params)
    return s.replace(**{"site": jnp.int32(0), "model": jnp.int32(0), "batch": jnp.float32(10.0), **over})


def _act(*a):
    return jnp.array(a, jnp.int32)


def _tiny(fifo, **over):
    return tiny_params(rtt=jnp.asarray([[0.0, RTT], [RTT, 0.0]], jnp.float32), link_fifo=fifo, **over)


def _links(up, down):
    """link_free_at [2, N] of the tiny problem's site 0 (the cloud's column is never used)."""
    return jnp.asarray([[up, 0.0], [down, 0.0]], jnp.float32)


def test_defaults_keep_links_idle():
    p = tiny_params()
    assert not bool(p.link_fifo)
    s = _state(p)
    assert s.link_free_at.shape == (2, 2) and not bool(s.link_free_at.any())
    o = place(s, p, _act(0, 0, 1))
    assert not bool(o.link_free_at.any())


@pytest.mark.parametrize("fifo", [False, True])
def test_two_cloud_jobs_from_one_site_by_hand(fifo):
    """Two 10-frame jobs arrive at site 0 at t = 0 and both go to the cloud (two idle lanes, one each).

    Per frame: input 1.5e5 B / 1e7 B/s = 0.015 s, cloud 0.01 s, result 4e3 B / 1e7 B/s = 0.0004 s; WAN RTT 0.02 s.
    Job 1: input first frame 0.035, last 0.02 + 10 x 0.015 = 0.17 (the uplink is busy [0, 0.17]); cloud last frame
    max(0.035 + 0.1, 0.17 + 0.01) = 0.18; result last frame 0.18 + 0.0204 = 0.2004 (downlink busy until then).
    Job 2 without contention: the same 0.2004. With FIFO links its input starts at 0.17, so every stage is 0.17
    later: 0.3704 = JCT_1 + the first job's uplink busy time (RTT + B x frame time); its result is not held up
    by job 1's download (done at 0.2004, before its own result's first frame at 0.2354)."""
    p = _tiny(jnp.asarray(fifo))
    s = _state(p)
    _, s2, _, _, i1 = step_env(jax.random.key(1), s, _act(0, 0, 1), p)
    s2 = s2.replace(t=jnp.float32(0.0), site=jnp.int32(0), model=jnp.int32(0), batch=jnp.float32(10.0))
    _, s3, _, _, i2 = step_env(jax.random.key(2), s2, _act(0, 0, 1), p)
    jct1 = RTT + 10 * 0.015 + 0.01 + RTT + 0.0004
    busy_up = RTT + 10 * 1.5e5 / 1e7
    assert float(i1["jct"]) == pytest.approx(jct1, rel=1e-4)
    if not fifo:
        assert float(i2["jct"]) == pytest.approx(float(i1["jct"]), rel=1e-6)
        assert not bool(s3.link_free_at.any())
    else:
        assert float(i2["jct"]) == pytest.approx(jct1 + busy_up, rel=1e-4)
        np.testing.assert_allclose(np.asarray(s2.link_free_at), [[busy_up, 0.0], [jct1, 0.0]], rtol=1e-4)
        np.testing.assert_allclose(np.asarray(s3.link_free_at), [[2 * busy_up, 0.0], [jct1 + busy_up, 0.0]],
                                   rtol=1e-4)
    assert bool((s3.free_at[1] > 0).all())  # the jobs ran on different cloud lanes


def test_two_simultaneous_uploads_on_one_link_take_twice_as_long_as_one():
    """A pure transfer: no RTT, no compute and no result bytes, so a job is its B-frame upload (B x 0.015 s). Two
    jobs arrive at t = 0 on one site and both go to the cloud: without contention each takes 0.15 s; on the FIFO
    uplink the second finishes after both uploads, exactly twice the first's JCT."""
    p = tiny_params(link_fifo=ON, out_bytes=jnp.float32([0.0]), back_lat=jnp.zeros((1, 3, 2), jnp.float32))
    one = 10 * 1.5e5 / 1e7
    for fifo, want2 in ((OFF, one), (ON, 2 * one)):
        q = p.replace(link_fifo=fifo)
        s = _state(q)
        _, s2, _, _, i1 = step_env(jax.random.key(1), s, _act(0, 0, 1), q)
        s2 = s2.replace(t=jnp.float32(0.0), site=jnp.int32(0), model=jnp.int32(0), batch=jnp.float32(10.0))
        _, _, _, _, i2 = step_env(jax.random.key(2), s2, _act(0, 0, 1), q)
        assert float(i1["jct"]) == pytest.approx(one, rel=1e-6)
        assert float(i2["jct"]) == pytest.approx(want2, rel=1e-6)


def test_each_direction_is_its_own_link():
    p = _tiny(ON)
    jct = RTT + 10 * 0.015 + 0.01 + RTT + 0.0004
    # downlink busy until 5: the upload and the cloud run as usual, the result's first frame leaves at 5
    o = place(_state(p, link_free_at=_links(0.0, 5.0)), p, _act(0, 0, 1))
    assert float(o.jct) == pytest.approx(5.0 + RTT + 10 * 0.0004, rel=1e-4)
    # uplink busy until 5: the whole pipeline shifts by 5 s
    o = place(_state(p, link_free_at=_links(5.0, 0.0)), p, _act(0, 0, 1))
    assert float(o.jct) == pytest.approx(5.0 + jct, rel=1e-4)
    # a job that stays on its site uses no link, and links free before the job's arrival do not delay it
    o = place(_state(p, link_free_at=_links(50.0, 50.0)), p, _act(2, 0, 0))
    assert float(o.jct) == pytest.approx(1.0)
    np.testing.assert_array_equal(np.asarray(o.link_free_at), np.asarray(_links(50.0, 50.0)))
    o = place(_state(p, t=jnp.float32(10.0), link_free_at=_links(9.0, 9.0)), p, _act(0, 0, 1))
    assert float(o.jct) == pytest.approx(jct, rel=1e-4)


def test_lan_transfers_are_not_delayed_by_busy_wan_links():
    p = two_site_params(link_fifo=ON)
    idle = _state(p)
    lan = _act(2, 1, 0)  # the whole model on the other edge site: 0 -> 1 and 1 -> 0 over the LAN
    want = float(place(idle, p, lan).jct)
    busy = idle.link_free_at.at[:, :2].set(100.0)  # both sites' uplinks and downlinks busy
    o = place(idle.replace(link_free_at=busy), p, lan)
    assert float(o.jct) == want and want < 100.0
    np.testing.assert_array_equal(np.asarray(o.link_free_at), np.asarray(busy))
    # front on site 1, back on the cloud: the activations use site 1's uplink, the result site 0's downlink
    split = _act(1, 1, 2)
    want = float(place(idle, p, split).jct)
    o = place(idle.replace(link_free_at=idle.link_free_at.at[0, 0].set(100.0)), p, split)  # site 0's uplink: unused
    assert float(o.jct) == want
    used = np.asarray(o.link_free_at) != np.asarray(idle.link_free_at.at[0, 0].set(100.0))
    np.testing.assert_array_equal(used, [[False, True, False], [True, False, False]])
    np.testing.assert_array_equal(np.asarray(wan_links_used(idle, p, split)), used)
    o = place(idle.replace(link_free_at=idle.link_free_at.at[0, 1].set(100.0)), p, split)  # site 1's uplink: waits
    assert float(o.jct) > 100.0


def _visited_states(params, n, seed):
    obs, s = ENV.reset(jax.random.key(seed), params)
    out = []
    step = jax.jit(ENV.step)
    for k in jax.random.split(jax.random.key(seed + 1), n):
        ka, ks = jax.random.split(k)
        out.append(s)
        obs, s, *_ = step(ks, s, jax.random.randint(ka, (3,), 0, jnp.asarray(ENV.action_space(params).nvec)), params)
    return out


@jax.jit
def _all_places(s, p, actions):
    return jax.vmap(lambda a: place_eager(s, p, a))(actions), jax.vmap(lambda a: wan_links_used(s, p, a))(actions)


@pytest.mark.parametrize("make", [tiny_params, two_site_params])
def test_idle_links_give_the_same_outcomes_with_and_without_fifo(make):
    """A job uses each directed link at most once: with idle links the flag only records the links' busy times."""
    rtt = 0.01 * (1.0 - jnp.eye(3 if make is two_site_params else 2, dtype=jnp.float32))
    p_off = make(rate=jnp.full(T, 3.0, jnp.float32), batch_min=jnp.float32(2.0), batch_max=jnp.float32(50.0),
                 rtt=rtt)
    p_on = p_off.replace(link_fifo=ON)
    actions = jnp.asarray(list(np.ndindex(*ENV.action_space(p_off).nvec)), jnp.int32)
    for s in _visited_states(p_off, 10, 3):  # lanes busy and warm functions vary; links idle
        off, used_off = _all_places(s, p_off, actions)
        on, used_on = _all_places(s, p_on, actions)
        for name in ("jct", "cost", "energy_kwh", "green_kwh", "co2_kg", "net_kwh", "cloud_work", "free_at",
                     "last_used"):
            np.testing.assert_array_equal(np.asarray(getattr(off, name)), np.asarray(getattr(on, name)), name)
        assert not bool(off.link_free_at.any()) and not bool(used_off.any())
        # the links recorded busy are exactly the ones wan_links_used names, until the job's end at the latest
        changed = np.asarray(on.link_free_at) != np.asarray(s.link_free_at)[None]
        np.testing.assert_array_equal(changed, np.asarray(used_on))
        end = np.asarray(s.t + on.jct)[:, None, None]
        assert (np.asarray(on.link_free_at) <= end + 1e-5).all()


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=10),
       st.integers(0, 2**30))
@settings(max_examples=10, deadline=None)
def test_contention_only_delays(actions, seed):
    """With FIFO links: link free times never decrease, and a job is never faster than without contention."""
    p = two_site_params(rate=jnp.full(T, 5.0, jnp.float32), batch_min=jnp.float32(2.0),
                        batch_max=jnp.float32(50.0), link_fifo=ON)
    _, s = ENV.reset(jax.random.key(seed), p)
    for i, a in enumerate(actions):
        a = jnp.array(a, jnp.int32)
        free = place(s.replace(link_free_at=jnp.zeros_like(s.link_free_at)), p, a)
        _, s2, r, _, info = step_env(jax.random.key(seed + i), s, a, p)
        assert bool((s2.link_free_at >= s.link_free_at).all())
        if float(info["rejected"]) == 0:
            assert float(info["jct"]) >= float(free.jct) - 1e-4
        else:
            np.testing.assert_array_equal(np.asarray(s2.link_free_at), np.asarray(s.link_free_at))
        assert np.isfinite(float(r))
        s = s2


def test_step_commits_links_only_for_accepted_placements():
    p = _tiny(ON)
    s = _state(p)
    _, s2, _, _, info = step_env(jax.random.key(0), s, _act(0, 1, 1), p)  # empty front not at the source
    assert float(info["rejected"]) == 1.0 and not bool(s2.link_free_at.any())
    _, s3, _, _, info = step_env(jax.random.key(0), s, _act(0, 0, 1), p)
    assert float(info["rejected"]) == 0.0 and bool((s3.link_free_at[:, 0] > 0).all())


def test_observation_has_one_fixed_size_link_block():
    p_on, p_off = _tiny(ON), _tiny(OFF)
    assert ENV.observation_size(p_on) == ENV.observation_size(p_off)
    s = _state(p_on, t=jnp.float32(2.0))
    base = np.asarray(ENV.get_obs(s, p_on))
    links = jnp.asarray([[5.0, 0.0], [1.0, 0.0]], jnp.float32)  # uplink 3 s ahead, downlink already free
    got = np.asarray(ENV.get_obs(s.replace(link_free_at=links), p_on))
    diff = np.flatnonzero(got != base)
    assert diff.tolist() == [diff[0]] and got[diff[0]] == pytest.approx(np.log1p(3.0 / float(p_on.t_norm)))
    # the block is [uplinks (N), downlinks (N)]: the site-0 downlink entry sits N places after its uplink
    got = np.asarray(ENV.get_obs(s.replace(link_free_at=links.at[1, 0].set(4.0)), p_on))
    assert np.flatnonzero(got != base).tolist() == [diff[0], diff[0] + 2]


def test_queue_feature_includes_the_link_wait():
    p = _tiny(ON)
    s = _state(p, t=jnp.float32(5.0), link_free_at=_links(8.0, 0.0))
    f = np.asarray(action_features(s, p))
    nvec = ENV.action_space(p).nvec
    at = lambda c, a, b: f[int(flatten_action(jnp.array([c, a, b]), nvec))]  # noqa: E731
    q = FEATURES.index("queue")
    assert at(0, 0, 1)[q] == pytest.approx(3.0)  # the cloud job's upload waits 3 s for the uplink
    assert at(2, 0, 0)[q] == 0.0  # the edge-only job uses no link


# ---------------------------------------------------------------------------------------------- config wiring


def _hardware(**over):
    nodes = [NodeSpec(name="a", kind="edge", p_idle_w=10, p_max_w=30, memory_gb=1, job_share=1.0),
             NodeSpec(name="dc", kind="cloud", lanes=2, p_idle_w=100, p_max_w=300, memory_gb=10)]
    return EdgeCloudHardware(name="t", nodes=nodes, **over)


def test_hardware_schema_validates_link_fifo():
    assert _hardware().link_fifo is False and _hardware(link_fifo=True).link_fifo is True
    with pytest.raises(ValueError, match="link_fifo"):
        _hardware(link_fifo="yes")


def _one_region_world():
    """Four days of flat traces for one region in 2022 and 2023 and the tiny AlexNet tables: what env_params needs."""
    hours = 24 * 4
    time = np.arange(hours).astype("datetime64[h]")

    def region(year):
        return RegionYear("R", year, time, np.full(hours, 0.1), np.full(hours, 400.0), np.full(hours, 0.3), 0)

    traces = EnergyTraces(regions={("R", 2022): region(2022), ("R", 2023): region(2023)},
                          profiles={"arrivals": HourlySeries(time[:24], np.ones(24), "arrivals", "kW", "")},
                          latency={})
    tp = tiny_params()
    names = ("in_bytes", "out_bytes", "cand_ok", "front_empty", "back_empty", "is_prefix", "front_lat", "back_lat",
             "cross_bytes", "front_mem", "back_mem", "front_params", "back_params", "front_frac", "all_front")
    arrays = {k: np.asarray(getattr(tp, k)) for k in names} | {"dads_cut": np.asarray(tp.dads_cut)}
    tables = ModelTables(("alexnet",), arrays, (3,), (("none", "half", "all"),))
    return traces, tables, PlacementParams(models=["alexnet"], model_probs=[1.0])


@pytest.mark.parametrize("fifo", [False, True])
def test_env_params_takes_link_fifo_from_the_hardware(fifo):
    traces, tables, pp = _one_region_world()
    p = env_params(_hardware(link_fifo=fifo), traces, tables, pp, Scenario(name="s", city="R", cloud="R"), 2023,
                   0.5, 8)
    assert p.link_fifo.dtype == jnp.bool_ and p.link_fifo.shape == () and bool(p.link_fifo) == fifo


def test_a_regime_keeps_the_base_hardwares_reward_normalisers():
    """The contended regime's hardware (WAN x0.25, FIFO links) on the same traces: env_params computes t_norm from
    its own (slower) WAN unless given the base hardware's normalisers, which a regime keeps (one objective unit in
    every regime)."""
    traces, tables, pp = _one_region_world()
    sc = Scenario(name="s", city="R", cloud="R")
    base = _hardware()
    slow = regime_hardware(base, Regime(name="contended", wan_scale=0.25, link_fifo=True, load=2.0))
    norms = scenario_norms(base, traces, tables, pp, sc)
    p_base = env_params(base, traces, tables, pp, sc, 2023, 0.5, 8)
    p_own = env_params(slow, traces, tables, pp, sc, 2023, 0.5, 8)
    p_reg = with_load(env_params(slow, traces, tables, pp, sc, 2023, 0.5, 8, norms=norms), 2.0)
    assert (float(p_base.c_norm), float(p_base.t_norm)) == pytest.approx(norms)
    assert float(p_own.t_norm) > 3 * float(p_base.t_norm)  # the unloaded cloud-only time at a quarter of the WAN
    assert (float(p_reg.c_norm), float(p_reg.t_norm)) == pytest.approx(norms)
    assert bool(p_reg.link_fifo) and not bool(p_base.link_fifo)
    np.testing.assert_allclose(np.asarray(p_reg.bw)[0, 1], 0.25 * np.asarray(p_base.bw)[0, 1])
    np.testing.assert_allclose(np.asarray(p_reg.rate), 2.0 * np.asarray(p_base.rate), rtol=1e-6)
