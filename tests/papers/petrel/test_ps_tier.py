"""The PS tier (issue #50): S parameter-server shards, each NIC carrying 1/S of every PS-tier message; PS-tier
transfer time shrinking with S when the PS NICs are the bottleneck; wire bytes (every message once) vs PS-tier
bytes for every mechanism."""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import pytest

from mlsys_repro.papers.petrel.schemas import PSClusterHardware
from mlsys_repro.papers.petrel.sim import PS, shard_bytes
from tests.papers.petrel.conftest import every_kind, run, small_hw

HW = small_hw()
POLICIES = every_kind()
LEADERLESS = {"bsp", "asp", "ssp", "dssp"}


def _stamp(sim, got: list) -> None:
    got.append(sim.now)


def _drain(sim, got: list, n: int) -> None:
    while len(got) < n:
        t, _, fn, args, _ = heapq.heappop(sim._heap)
        sim.now = t
        fn(*args)


def test_shard_bytes_split_evenly():
    assert shard_bytes(1000, 1) == [1000]
    assert shard_bytes(1000, 4) == [250] * 4
    assert shard_bytes(10_065, 4) == [2517, 2516, 2516, 2516]  # remainder one byte each to the first parts
    assert shard_bytes(3, 4) == [1, 1, 1]  # no empty parts
    for n, s in ((12_345, 7), (64, 64), (5, 3)):
        parts = shard_bytes(n, s)
        assert sum(parts) == n and max(parts) - min(parts) <= 1


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_mechanism_splits_ps_bytes_over_the_shards(make_sim, name):
    """S = 4: every PS NIC carries exactly 1/4 of the PS-tier bytes (4 | message size), in and out; the byte
    accounting of the single-PS model holds summed over the shards."""
    hw = dataclasses.replace(HW, ps_shards=4)
    sim, engine = make_sim(POLICIES[name], hw=hw, seed=3, max_time_s=0.4)
    run(sim, engine)
    assert sim.grads_applied > 0 and sim.msg_bytes % 4 == 0
    for bank in (sim.ps_in, sim.ps_out):
        assert len(bank.links) == 4
        assert [lk.bytes for lk in bank.links] == [bank.bytes // 4] * 4
        assert bank.bw == pytest.approx(4 * hw.ps_bandwidth_gbps * 1e9)
    assert sim.ps_in.bytes % sim.msg_bytes == 0  # whole messages, split
    assert sim.tier_sent["ps"] == sim.ps_bytes
    assert sim.bytes_sent == sim.bytes_delivered + sim.bytes_in_flight
    links = [*sim.ps_in.links, *sim.ps_out.links, *sim.w_in, *sim.w_out]
    assert sum(lk.bytes for lk in links) == 2 * sim.bytes_sent
    assert 0.0 <= sim.ps_in.busy <= sim.now  # mean busy seconds per shard


def test_sharding_keeps_total_bytes_and_bsp_numerics(make_sim):
    """BSP for 3 updates with 1 and 4 shards: the same gradients, parameters and bytes in total; per shard a quarter,
    also when the message size is not a multiple of 4 (parts differ by at most a byte)."""
    hw1 = dataclasses.replace(HW, payload_bytes=10_001)  # + 64 B header = 10,065 B = 2517 + 3 x 2516
    hw4 = dataclasses.replace(hw1, ps_shards=4)
    a, ea = make_sim(POLICIES["bsp"], hw=hw1, seed=5, max_updates=3, max_time_s=1e9, mode="map")
    b, eb = make_sim(POLICIES["bsp"], hw=hw4, seed=5, max_updates=3, max_time_s=1e9, mode="map")
    run(a, ea)
    run(b, eb)
    assert a.version == b.version == 3 and np.array_equal(a.w, b.w)
    msgs = 3 * HW.num_workers  # pushes (and pulls) through the PS tier
    assert a.ps_in.bytes == b.ps_in.bytes == msgs * 10_065
    assert a.ps_out.bytes == b.ps_out.bytes and a.wire_bytes == b.wire_bytes
    assert [lk.bytes for lk in b.ps_in.links] == [msgs * p for p in (2517, 2516, 2516, 2516)]
    assert [lk.bytes for lk in b.ps_out.links] == [msgs * p for p in (2517, 2516, 2516, 2516)]


@pytest.mark.parametrize("shards", [1, 2, 4, 8])
def test_ps_bound_burst_time_shrinks_with_shards(make_sim, shards):
    """8 workers push one message each to the PS at the same instant, all NICs at the same rate: one PS NIC
    serialises them (8 message times); S NICs take (8 + S - 1) / S message times (the parts pipeline over the
    shards). The PS's pulls to the 8 workers take the same. One isolated message takes one message time for any S
    (the worker's NIC is then the bottleneck)."""
    hw = PSClusterHardware(name="b", num_workers=8, class_speeds=[1.0], ps_shards=shards)
    sim, _ = make_sim(POLICIES["asp"], hw=hw, max_time_s=0.1)
    sim._heap.clear()
    nbytes = 125_000 * shards  # parts of 125,000 B: 1 ms each at 1 Gb/s
    d = nbytes * 8 / 1e9
    lat = hw.latency_us * 1e-6
    for direction in ("push", "pull"):
        got: list[float] = []
        sim.now = start = 10.0 if direction == "push" else 20.0
        for w in range(8):
            src, dst = (w, PS) if direction == "push" else (PS, w)
            sim._send(src, dst, nbytes, _stamp, (sim, got))
        _drain(sim, got, 8)
        assert max(got) == pytest.approx(start + (8 + shards - 1) / shards * d + lat, rel=1e-12)
        assert got == sorted(got)
    # isolated message: the worker's NIC sends the S parts back to back
    got = []
    sim.now = 30.0
    sim._send(0, PS, nbytes, _stamp, (sim, got))
    _drain(sim, got, 1)
    assert got[0] == pytest.approx(30.0 + d + lat, rel=1e-12)
    assert sim.ps_in.bytes == 9 * nbytes and [lk.bytes for lk in sim.ps_in.links] == [9 * nbytes // shards] * shards


def test_ps_bound_bsp_runs_faster_with_shards(make_sim):
    """A PS-bound cluster (16 workers, slow PS NICs): BSP's rounds are shorter with 4 shards, same numerics."""
    hw1 = PSClusterHardware(name="p", num_workers=16, class_speeds=[1.0, 0.5], ps_bandwidth_gbps=0.05,
                            straggler_prob=0.0, regime_shift_prob=0.0)
    hw4 = dataclasses.replace(hw1, ps_shards=4)
    a, ea = make_sim(POLICIES["bsp"], hw=hw1, seed=2, max_updates=3, max_time_s=1e9, mode="map")
    b, eb = make_sim(POLICIES["bsp"], hw=hw4, seed=2, max_updates=3, max_time_s=1e9, mode="map")
    run(a, ea)
    run(b, eb)
    assert np.array_equal(a.w, b.w) and a.ps_bytes == b.ps_bytes
    d = a.msg_bytes * 8 / 0.05e9  # one message through one PS NIC
    assert a.now > 3 * 16 * d  # 3 rounds of 16 pushes through one PS ingress NIC dominate
    assert 3 * 16 * d / 4 < b.now < 0.5 * a.now  # 4 NICs: a quarter of the NIC time per round


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_wire_bytes_vs_ps_tier(make_sim, name):
    """Wire bytes (every message once) = PS-tier bytes without leaders (BSP, ASP, SSP, DSSP); with leaders (CASP,
    hier_bsp) the member <-> leader messages come on top: wire > PS tier. The summary reports both."""
    sim, engine = make_sim(POLICIES[name], hw=HW, seed=1, max_time_s=0.3)
    run(sim, engine)
    s = sim.summary()
    assert sim.wire_bytes == sim.ps_bytes + sim.leader_bytes == sim.bytes_sent
    assert s["wire_bytes_to_target"] == sim.wire_bytes and s["ps_bytes_to_target"] == sim.ps_bytes
    assert s["wire_bytes_to_target"] >= s["ps_bytes_to_target"]
    if name in LEADERLESS:
        assert s["wire_bytes_to_target"] == s["ps_bytes_to_target"] and sim.leader_bytes == 0
    else:
        assert s["wire_bytes_to_target"] > s["ps_bytes_to_target"] and sim.leader_bytes > 0
    assert s["leader_bytes_to_target"] == s["wire_bytes_to_target"] - s["ps_bytes_to_target"]
    worker_nic = sum(lk.bytes for lk in sim.w_in) + sum(lk.bytes for lk in sim.w_out)
    assert s["worker_nic_bytes_to_target"] == worker_nic


def test_bad_shards_rejected():
    with pytest.raises(ValueError, match="ps_shards"):
        PSClusterHardware(name="x", ps_shards=0)
