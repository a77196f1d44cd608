"""Invariants of the PS simulator: staleness bounds, exactly-once application, byte conservation, termination,
and the numerical identities BSP = CASP(k=1) and BSP independent of timing."""

from __future__ import annotations

import heapq
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlsys_repro.papers.petrel.schemas import PSClusterHardware, SyncPolicy
from tests.papers.petrel.conftest import every_kind, run, small_hw

POLICIES = every_kind()
HW = small_hw()
SLOW = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check_exactly_once(sim) -> None:
    started = Counter(g.gid for g in sim.started)
    applied = Counter(g.gid for g in sim.applied)
    assert max(applied.values()) == 1, "a gradient was applied twice"
    assert set(applied) <= set(started), "a gradient was applied that was never computed"
    assert sim.grads_applied == len(applied)
    pending = [g for g in sim.started if g.gid not in applied]
    per_worker = Counter(g.worker for g in pending)
    assert all(c == 1 for c in per_worker.values()), "a worker has two unapplied gradients in flight"
    # every worker's gradients are applied in iteration order (no gradient overtakes an older one)
    for w in range(sim.n):
        its = [g.iteration for g in sim.applied if g.worker == w]
        assert its == sorted(its) == list(range(len(its)))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_gradient_applied_once_and_bytes_conserved(make_sim, name):
    sim, engine = make_sim(POLICIES[name], hw=HW, seed=3, max_time_s=0.8)
    run(sim, engine)
    assert sim.stop_reason == "horizon" and sim.grads_applied > 0
    _check_exactly_once(sim)
    assert sim.bytes_sent == sim.bytes_delivered + sim.bytes_in_flight
    assert sim.bytes_in_flight >= 0 and sim.bytes_sent % sim.msg_bytes == 0
    links = [sim.ps_in, sim.ps_out, *sim.w_in, *sim.w_out]
    assert sum(lk.bytes for lk in links) == 2 * sim.bytes_sent  # each message crosses one egress and one ingress
    assert sim.ps_in.bytes + sum(lk.bytes for lk in sim.w_in) == sim.bytes_sent
    for g in sim.applied:  # gradients computed on the version the worker pulled: never from the future
        assert 0 <= g.version < g.applied_version <= sim.version
    assert sim.msg_bytes == 4 * sim.engine.task.num_params + HW.header_bytes


@SLOW
@given(s=st.integers(0, 3), seed=st.integers(0, 50))
def test_ssp_staleness_never_exceeds_bound(make_sim, s, seed):
    sim, engine = make_sim(SyncPolicy(name="ssp", kind="ssp", staleness=s), hw=HW, seed=seed, max_time_s=0.5)
    run(sim, engine)
    gaps = [g.gap for g in sim.started]
    assert max(gaps) <= s
    assert sim.clock.max() - sim.clock.min() <= s + 1
    _check_exactly_once(sim)


def test_ssp_bound_binds_and_asp_exceeds_it(make_sim):
    """The bound is not vacuous: ASP on the same cluster drifts far beyond it, SSP(1) reaches it."""
    asp, e1 = make_sim(POLICIES["asp"], hw=HW, seed=1, max_time_s=0.6)
    ssp, e2 = make_sim(SyncPolicy(name="ssp", kind="ssp", staleness=1), hw=HW, seed=1, max_time_s=0.6)
    run(asp, e1)
    run(ssp, e2)
    assert max(g.gap for g in asp.started) > 3
    assert max(g.gap for g in ssp.started) == 1


def test_dssp_gap_stays_within_upper_bound(make_sim):
    sim, engine = make_sim(POLICIES["dssp"], hw=HW, seed=2, max_time_s=0.8)
    run(sim, engine)
    assert max(g.gap for g in sim.started) <= 3
    assert sim.gate.controller_calls > 0


def test_bsp_has_zero_staleness_and_barriers(make_sim):
    sim, engine = make_sim(POLICIES["bsp"], hw=HW, seed=0, max_time_s=0.8)
    run(sim, engine)
    assert sim.staleness_max == 0
    assert sim.grads_applied == sim.version * sim.n
    assert {g.iteration for g in sim.applied} == set(range(sim.version))


def test_bsp_bytes_exact(make_sim):
    sim, engine = make_sim(POLICIES["bsp"], hw=HW, max_updates=3, max_time_s=1e9)
    run(sim, engine)
    assert sim.version == 3
    assert sim.ps_in.bytes == 3 * sim.n * sim.msg_bytes  # N pushes per round
    assert sim.ps_out.bytes == 3 * sim.n * sim.msg_bytes  # N pulls after each round (the third's are in flight)
    assert sim.bytes_in_flight == sim.n * sim.msg_bytes


def test_casp_pushes_once_per_community(make_sim):
    pol = SyncPolicy(name="c", kind="casp", grouping="kmeans", num_communities=2, regroup=False)
    sim, engine = make_sim(pol, hw=HW, max_time_s=0.8)
    run(sim, engine)
    pushes = sim.ps_in.bytes // sim.msg_bytes
    assert pushes == sim.version  # one aggregated message per community round
    assert sim.grads_applied == sum(len(g.members) * g.rounds for g in sim.groups)


def test_casp_k1_equals_bsp_bit_for_bit(make_sim):
    hw = PSClusterHardware(name="eq", num_workers=5, class_speeds=[1.0], straggler_prob=0.0, regime_shift_prob=0.0)
    casp = SyncPolicy(name="casp1", kind="casp", grouping="kmeans", num_communities=1, regroup=False)
    a, ea = make_sim(POLICIES["bsp"], hw=hw, seed=4, max_updates=4, max_time_s=1e9)
    b, eb = make_sim(casp, hw=hw, seed=4, max_updates=4, max_time_s=1e9)
    run(a, ea)
    run(b, eb)
    assert a.version == b.version == 4
    assert np.array_equal(a.w, b.w)
    assert b.ps_bytes < a.ps_bytes  # same numerics, one push/pull instead of N


def test_casp_kN_equals_asp(make_sim):
    # k = N (the A3C's top action) is singleton communities: every worker its own leader, so CASP is ASP: the same
    # parameters after the same number of updates, the same PS bytes, no leader-tier bytes
    hw = PSClusterHardware(name="eqa", num_workers=5, class_speeds=[1.0, 0.5], straggler_prob=0.0,
                           regime_shift_prob=0.0)
    casp = SyncPolicy(name="caspN", kind="casp", grouping="kmeans", num_communities=5, regroup=False)
    a, ea = make_sim(POLICIES["asp"], hw=hw, seed=3, max_updates=12, max_time_s=1e9, mode="map")
    b, eb = make_sim(casp, hw=hw, seed=3, max_updates=12, max_time_s=1e9, mode="map")
    run(a, ea)
    run(b, eb)
    assert a.version == b.version == 12
    assert np.array_equal(a.w, b.w)
    assert a.ps_bytes == b.ps_bytes
    sa, sb = a.summary(), b.summary()
    assert sb["leader_bytes_to_target"] == sa["leader_bytes_to_target"] == 0.0


def test_bsp_numerics_do_not_depend_on_timing(make_sim):
    fast = PSClusterHardware(name="f", num_workers=4, class_speeds=[1.0], ps_bandwidth_gbps=10.0)
    slow = PSClusterHardware(name="s", num_workers=4, class_speeds=[1.0, 0.1], straggler_prob=0.3,
                             ps_bandwidth_gbps=0.1)
    a, ea = make_sim(POLICIES["bsp"], hw=fast, seed=7, max_updates=3, max_time_s=1e9)
    b, eb = make_sim(POLICIES["bsp"], hw=slow, seed=7, max_updates=3, max_time_s=1e9)
    run(a, ea)
    run(b, eb)
    assert np.array_equal(a.w, b.w)
    assert b.now > 5 * a.now


def test_asp_single_worker_is_sequential_sgd(make_sim, task):
    from mlsys_repro.papers.petrel.engine import single_gradient
    from mlsys_repro.papers.petrel.sim import ShardSampler

    hw = PSClusterHardware(name="one", num_workers=1, class_speeds=[1.0])
    sim, engine = make_sim(POLICIES["asp"], hw=hw, seed=5, max_updates=3, max_time_s=1e9, mode="map")
    run(sim, engine)
    sampler = ShardSampler(task.n_train, 1, 16, 5)
    w = task.w0.copy()
    for _ in range(3):
        g, _ = single_gradient(task, w, sampler.next(0), mode="map")
        w = w - np.float32(0.2) * g
    assert np.array_equal(sim.w, w)
    assert sim.staleness_max == 0


def test_regrouping_takes_effect_and_covers_everyone(make_sim):
    sim, engine = make_sim(POLICIES["casp_kmeans"], hw=HW, seed=0, max_time_s=0.3)
    run(sim, engine)
    with pytest.raises(ValueError, match="cover every worker"):
        sim.set_partition([[0, 1], [2, 3]])
    sim2, e2 = make_sim(SyncPolicy(name="c", kind="casp", grouping="kmeans", num_communities=3, regroup=False),
                        hw=HW, seed=0, max_time_s=1.0)
    sim2.set_partition([[0, 1, 2, 3, 4, 5]])
    run(sim2, e2)
    assert [g.members for g in sim2.groups] == [[0, 1, 2, 3, 4, 5]]
    assert not sim2.pending_groups
    _check_exactly_once(sim2)


def test_fifo_link_serialises_transfers(make_sim):
    sim, _ = make_sim(POLICIES["asp"], hw=HW, max_time_s=0.1)
    got = []
    sim.now = 10.0
    sim._send(0, -1, 125_000, lambda: got.append(sim.now), ())
    sim._send(1, -1, 125_000, lambda: got.append(sim.now), ())
    while len(got) < 2:
        t, _, fn, args, _ = heapq.heappop(sim._heap)
        sim.now = t
        fn(*args)
    dur = 125_000 * 8 / 1e9
    lat = HW.latency_us * 1e-6
    assert got == pytest.approx([10.0 + dur + lat, 10.0 + 2 * dur + lat])


def test_time_to_target_interpolates(make_sim):
    sim, engine = make_sim(POLICIES["asp"], hw=HW, seed=0, max_time_s=5.0, eval_every_grads=16,
                           target_accuracy=0.5)
    run(sim, engine)
    assert sim.stop_reason == "target"
    m = sim.summary()
    assert m["reached_target"] == 1.0
    prev, last = sim.evals[-2], sim.evals[-1]
    assert prev.acc < 0.5 <= last.acc
    assert prev.t <= m["time_to_target_s"] <= last.t
    assert prev.ps_bytes <= m["ps_bytes_to_target"] <= last.ps_bytes


def test_dssp_controller_known_answer():
    """Fast worker 0 (push every 1 s) at gap 3 > s_L = 2; the slowest (worker 1) pushed at t = 10 and pushes every
    4 s, so it next pushes at 14. From now = 11, r = 3 more iterations lands exactly on 14 (within s_U - gap)."""
    from types import SimpleNamespace

    from mlsys_repro.papers.petrel.protocols import DSSPGate

    gate = DSSPGate(low=2, high=8)
    sim = SimpleNamespace(now=0.0, clock=np.array([0, 0]))
    for t, w in ((6.0, 1), (9.0, 0), (10.0, 0), (10.0, 1)):  # intervals: worker 0 -> 1 s, worker 1 -> 4 s
        sim.now = t
        gate.on_apply(sim, w)
    sim.now, sim.clock = 11.0, np.array([5, 2])
    gate.last_push[0] = 11.0
    assert gate.extra_iterations(sim, 0, gap=3) == 3
    assert gate.may_proceed(sim, 0) and gate.granted[0] == 2  # this iteration plus two more
    assert gate.may_proceed(sim, 0) and gate.may_proceed(sim, 0) and gate.granted[0] == 0
    sim.clock = np.array([11, 2])  # gap 9 > s_U: always wait
    assert not gate.may_proceed(sim, 0)
    sim.clock = np.array([4, 2])  # gap 2 <= s_L: always go
    assert gate.may_proceed(sim, 0)


@pytest.mark.parametrize("kind", ["casp_kmeans", "bsp", "asp"])
def test_traffic_per_tier_is_conserved(make_sim, kind):
    """Per tier, bytes leaving senders = bytes arrived + bytes in flight; the PS tier is exactly the PS NIC's bytes,
    the leader tier exactly the worker<->worker bytes; a realistic payload replaces the proxy's size."""
    from mlsys_repro.papers.petrel.sim import TIERS

    pol = {"casp_kmeans": SyncPolicy(name="c", kind="casp", grouping="kmeans", num_communities=2),
           "bsp": SyncPolicy(name="b", kind="bsp"), "asp": SyncPolicy(name="a", kind="asp")}[kind]
    hw = PSClusterHardware(name="t", num_workers=6, class_speeds=[1.0, 0.5, 0.25], payload_bytes=10_000)
    sim, engine = make_sim(pol, hw=hw, max_time_s=0.3)
    run(sim, engine)
    assert sim.msg_bytes == 10_000 + hw.header_bytes
    in_flight = sim.bytes_in_flight
    for t in TIERS:
        assert sim.tier_sent[t] >= sim.tier_arrived[t]
    assert sum(sim.tier_sent.values()) - sum(sim.tier_arrived.values()) == in_flight
    # PS tier: what left the PS egress plus what left workers toward the PS = PS NIC in + out
    assert sim.tier_sent["ps"] == sim.ps_out.bytes + sim.ps_in.bytes
    # every byte on worker NICs: PS-tier messages cross one, leader-tier messages two
    worker_nic = sum(link.bytes for link in sim.w_in) + sum(link.bytes for link in sim.w_out)
    assert worker_nic == sim.tier_sent["ps"] + 2 * sim.tier_sent["leader"]
    # egress = ingress bytes on each tier's links
    assert sim.ps_in.bytes + sum(link.bytes for link in sim.w_in) == \
        sim.ps_out.bytes + sum(link.bytes for link in sim.w_out)
    if kind == "casp_kmeans":
        assert sim.tier_sent["leader"] > 0
    else:
        assert sim.tier_sent["leader"] == 0
    s = sim.summary()
    assert s["leader_bytes_to_target"] == pytest.approx(s["wire_bytes_to_target"] - s["ps_bytes_to_target"])
