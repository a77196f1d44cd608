"""Discrete-event protocols: exact byte counts, topology, FIFO NICs, GEI exactly-once, staleness, extrapolation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.collectives.bcube import BCube
from mlsys_repro.common.sim.netsim import channel_overlaps
from mlsys_repro.papers.canary.compute_model import ComputeModel, Layer, make_layout
from mlsys_repro.papers.canary.protocols import (
    NetSpec,
    ProtocolSpec,
    ako_partitions,
    payload_bytes,
    piece_tree,
    simulate,
    split_sizes,
)

HDR = 16


def small_layout(sizes=(300, 500, 200), colayer_bytes=1200, piece=128):
    off, layers = 0, []
    for i, n in enumerate(sizes):
        layers.append(Layer(f"l{i}", n, off, 2.0 * n))
        off += n
    return make_layout(layers, colayer_bytes, piece)


CM = ComputeModel(1e9, kernel_overhead_s=1e-5, iteration_overhead_s=1e-4)


def net(n=3, k=1, bw=1e7, lat=2e-6):
    return NetSpec(n, k, bw, lat, HDR)


def test_piece_tree_reaches_the_owner_in_k_plus_1_stages():
    bc = BCube(3, 1)
    owner, level, send_stage, target = piece_tree(bc, 5)
    for q in range(5):
        assert owner[q] == q % 9 and level[q] == bc.level_order(q % 2)
        for h in range(9):
            cur, hops = h, 0
            while cur != owner[q]:  # follow the partial up the tree
                j = send_stage[q][cur]
                assert j < 2 and bc.can_reach(cur, level[q][j], target[q][cur], level[q][j])
                cur, hops = target[q][cur], hops + 1
            assert hops <= 2
        assert send_stage[q][owner[q]] == 2  # the owner never sends


@pytest.mark.parametrize("sketch", [True, False])
def test_canary_bytes_are_exact_and_links_follow_bcube(sketch):
    lay = small_layout()
    ns = net()
    s = simulate(ProtocolSpec("canary", sketch=sketch, staleness=1), ns, lay, CM, 8, 6, keep_log=True)
    per_piece = [payload_bytes(int(n), sketch, lay.piece_elems) + HDR for n in lay.piece_len]
    # every non-owner sends its partial once (reduce) and every non-owner receives the aggregate once
    assert s.bytes_per_iteration == 2 * (ns.num_servers - 1) * sum(per_piece)
    bc = BCube(3, 1)
    assert all(bc.can_reach(t.src, t.src_nic, t.dst, t.dst_nic) for t in s.log)
    assert channel_overlaps(s.log) == []
    assert {t.src_nic for t in s.log} == {0, 1}  # both NICs carry pieces


def test_baseline_bytes_are_exact():
    lay = small_layout()
    ns = net()
    n, d = ns.num_servers, lay.size
    ps = simulate(ProtocolSpec("ps"), ns, lay, CM, 8, 5)
    shards = split_sizes(d, n)
    assert sorted(shards) == sorted(np.diff(np.linspace(0, d, n + 1).round().astype(int)))
    # pushes: each worker sends (n - 1)/n of every colayer; pulls: every shard to n - 1 workers
    push_msgs = sum(len([1 for s in range(n) if _overlap(lay, c, s, d, n)]) for c in range(lay.num_colayers))
    assert ps.bytes_per_iteration == 2 * (n - 1) * 4 * d + HDR * (n - 1) * (push_msgs + n)
    ring = simulate(ProtocolSpec("ring"), ns, lay, CM, 8, 5)
    buckets = [lay.colayer_size(c) for c in range(lay.num_colayers)]
    assert ring.bytes_per_iteration == sum(2 * (n - 1) * (4 * b + n * HDR) for b in buckets)
    bml = simulate(ProtocolSpec("bml"), ns, lay, CM, 8, 5)
    parts = split_sizes(d, 2)
    expect = 0
    for p in parts:
        red = [int(np.ceil(p / 3 ** (i + 1))) for i in range(2)]
        bc = [int(np.ceil(p / 9 * 3**i)) for i in range(2)]
        expect += n * 2 * sum(4 * e + HDR for e in red + bc)  # 2 peers per stage, 4 stages
    assert bml.bytes_per_iteration == expect
    ako = simulate(ProtocolSpec("ako", ako_partitions=3, staleness=2), ns, lay, CM, 8, 6)
    sizes = split_sizes(d, 3)
    assert ako.bytes_per_iteration == pytest.approx(n * (n - 1) * (4 * np.mean([sizes[t % 3] for t in range(6)]) + HDR))


def _overlap(lay, c, s, d, n):
    b = np.linspace(0, d, n + 1).round().astype(int)
    return sum(max(0, min(e, b[s + 1]) - max(a, b[s])) for a, e in lay.colayer_ranges[c]) > 0


@pytest.mark.parametrize("spec", [ProtocolSpec("ps"), ProtocolSpec("ring"), ProtocolSpec("bml"),
                                  ProtocolSpec("bml", overlap=True)])
def test_synchronous_baselines_wait_for_the_whole_update(spec):
    lay = small_layout()
    s = simulate(spec, net(), lay, CM, 8, 4, keep_log=True)
    assert channel_overlaps(s.log) == []
    # iteration t + 1 starts after the last byte of iteration t reached that worker
    arrivals = {}
    for tr in s.log:
        arrivals[tr.dst] = max(arrivals.get(tr.dst, 0.0), tr.arrival)
    last = s.fwd_start[:, -1]
    for w, a in arrivals.items():
        assert last[w] >= a - 1e-12
    assert np.all(np.diff(s.fwd_start, axis=1) > 0)


def test_more_bandwidth_and_the_sketch_never_hurt_canary():
    lay = small_layout((3000, 4000, 1000), colayer_bytes=8000, piece=512)
    slow = simulate(ProtocolSpec("canary", sketch=True, staleness=0), net(bw=1e6), lay, CM, 8, 8)
    fast = simulate(ProtocolSpec("canary", sketch=True, staleness=0), net(bw=1e8), lay, CM, 8, 8)
    fp32 = simulate(ProtocolSpec("canary", sketch=False, staleness=0), net(bw=1e6), lay, CM, 8, 8)
    assert fast.makespan < slow.makespan < fp32.makespan
    one_nic = simulate(ProtocolSpec("canary", sketch=True, staleness=0, multi_nic=False), net(bw=1e6), lay, CM, 8, 8)
    assert slow.makespan < one_nic.makespan


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 3), st.sampled_from([1e5, 1e6, 1e8]), st.sampled_from([64, 100, 333]),
       st.booleans(), st.booleans(), st.sampled_from([(2, 1), (3, 1), (2, 2)]))
def test_canary_gei_exactly_once_staleness_and_fifo(staleness, bw, piece, pipeline, multi_nic, nk):
    lay = small_layout(piece=piece)
    ns = net(n=nk[0], k=nk[1], bw=bw)
    T = 7
    s = simulate(ProtocolSpec("canary", sketch=True, staleness=staleness, pipeline=pipeline, multi_nic=multi_nic),
                 ns, lay, CM, 8, T, keep_log=True)
    g = s.gei
    # every (iteration, piece) was completed with all sources and applied by every worker exactly once
    assert g.retired == T and g.open_iterations() == 0
    assert g.state_counts["applied"] == T * lay.num_pieces * ns.num_servers
    assert g.state_counts["sent"] == g.state_counts["received"] == T * lay.num_pieces * (ns.num_servers - 1)
    assert channel_overlaps(s.log) == []  # no NIC carries two transfers at once
    t = np.arange(T)[:, None, None]
    assert np.all(s.visible >= t + 1) and np.all(s.visible <= t + 1 + staleness)
    # the bounded-staleness rule: iteration t starts only after every piece of t - 1 - s reached the worker
    for w in range(ns.num_servers):
        for tt in range(staleness + 1, T + 1):
            assert np.all(s.visible[tt - 1 - staleness, w] <= tt)


def test_ako_partitions_follow_the_bandwidth_rule():
    lay = small_layout()
    ns = net(bw=1e6)
    _, compute = lay.colayer_ready(CM, 8)
    p = ako_partitions(ProtocolSpec("ako"), ns, lay, compute)
    assert p == int(np.ceil(8 * 4 * lay.size / (1e6 * compute)))
    assert ako_partitions(ProtocolSpec("ako", ako_partitions=4), ns, lay, compute) == 4
    s = simulate(ProtocolSpec("ako", staleness=2, ako_partitions=3), ns, lay, CM, 8, 10)
    t = np.arange(10)[:, None, None]
    assert np.all(s.visible >= t + 1)
    eye = np.eye(9, dtype=bool)[None].repeat(10, 0)
    assert np.all(s.visible[eye] == np.repeat(np.arange(1, 11), 9))  # own gradient: applied at once


# (spec, sketch rate, periodic within 25 iterations: else the simulation falls back to a full run, as Canary may)
@pytest.mark.parametrize("spec, sketch_rate, periodic", [
    (ProtocolSpec("ps", sketch=True), 0.0, True), (ProtocolSpec("bml"), 0.0, True),
    (ProtocolSpec("canary", sketch=True, staleness=0), 0.0, False), (ProtocolSpec("bml", overlap=True), 0.0, True),
    (ProtocolSpec("ring", sketch=True), 1e8, False), (ProtocolSpec("ps", sketch=True), 1e8, True)])
def test_steady_state_extrapolation_matches_full_simulation(spec, sketch_rate, periodic):
    from dataclasses import replace

    lay = small_layout()
    cm = replace(CM, sketch_bytes_per_s=sketch_rate)
    full = simulate(spec, net(), lay, cm, 8, 60)
    short = simulate(spec, net(), lay, cm, 8, 60, max_simulated=25)
    if periodic:
        assert short.extra.get("simulated_iterations") == 25
    np.testing.assert_allclose(short.fwd_start, full.fwd_start, rtol=1e-6)
    assert short.bytes_per_iteration == pytest.approx(full.bytes_per_iteration)


def test_bad_protocol_input():
    with pytest.raises(ValueError, match="protocol"):
        ProtocolSpec("allgather")
    with pytest.raises(ValueError, match="staleness"):
        ProtocolSpec("canary", staleness=-1)
    with pytest.raises(ValueError, match="iterations"):
        simulate(ProtocolSpec("ps"), net(), small_layout(), CM, 8, 0)
