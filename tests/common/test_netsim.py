"""Discrete-event network model: exact timings on hand cases, FIFO channels, and invariants under random load."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.sim.netsim import EventLoop, Network, channel_overlaps, gbps_to_bytes_per_s


def test_event_loop_orders_by_time_then_schedule_order():
    loop, seen = EventLoop(), []
    loop.at(2.0, seen.append, "c")
    loop.at(1.0, seen.append, "a")
    loop.at(1.0, seen.append, "b")
    loop.at(3.0, lambda: loop.after(0.5, seen.append, "e"))
    assert loop.run() == 3.5
    assert seen == ["a", "b", "c", "e"]
    with pytest.raises(ValueError, match="before now"):
        loop.at(1.0, seen.append, "late")
    with pytest.raises(ValueError):
        loop.at(float("nan"), seen.append, "nan")


def test_run_until_stops_and_resumes():
    loop, seen = EventLoop(), []
    for t in (1.0, 2.0, 3.0):
        loop.at(t, seen.append, t)
    assert loop.run(until=2.5) == 2.5 and seen == [1.0, 2.0]
    loop.run()
    assert seen == [1.0, 2.0, 3.0]


def test_single_transfer_time_is_serialisation_plus_latency():
    loop = EventLoop()
    net = Network(loop, bandwidth=1000.0, latency=0.5, num_nodes=2)
    got = []
    net.send(0, 1, 250, on_arrival=lambda tr: got.append((loop.now, tr.nbytes)))
    loop.run()
    assert got == [(0.25 + 0.5, 250)]
    assert net.bytes_on_wire == 250 and net.rx_bytes[1, 0] == 250


def test_same_nic_is_fifo_and_different_nics_run_in_parallel():
    loop = EventLoop()
    net = Network(loop, bandwidth=100.0, latency=0.0, num_nodes=3, num_nics=2)
    a = net.send(0, 1, 100, src_nic=0)
    b = net.send(0, 2, 100, src_nic=0)  # waits for a on node 0's tx channel of NIC 0
    c = net.send(0, 2, 100, src_nic=1)  # other NIC: parallel with a
    loop.run()
    assert (a.tx_start, a.tx_end, a.arrival) == (0.0, 1.0, 1.0)
    assert (b.tx_start, b.tx_end, b.arrival) == (1.0, 2.0, 2.0)
    assert (c.tx_start, c.tx_end, c.arrival) == (0.0, 1.0, 1.0)
    assert channel_overlaps(net.log) == []


def test_incast_serialises_at_the_receiver_and_min_bandwidth_applies():
    loop = EventLoop()
    bw = np.array([[100.0], [100.0], [50.0]])
    net = Network(loop, bandwidth=bw)
    a = net.send(0, 2, 100)
    b = net.send(1, 2, 100)  # node 2's port is busy with a: b waits in the switch, its sender is free
    c = net.send(1, 0, 100)  # ... so node 1's next message to an idle receiver is not held back
    loop.run()
    assert (a.rx_start, a.arrival) == (0.0, 2.0)  # limited by the 50 B/s receiver port
    assert (b.tx_start, b.tx_end, b.rx_start, b.arrival) == (0.0, 1.0, 2.0, 4.0)
    assert (c.tx_start, c.arrival) == (1.0, 2.0)


def test_full_duplex_send_and_receive_overlap():
    loop = EventLoop()
    net = Network(loop, bandwidth=10.0, num_nodes=2)
    a, b = net.send(0, 1, 10), net.send(1, 0, 10)
    loop.run()
    assert a.tx_start == b.tx_start == 0.0 and a.arrival == b.arrival == 1.0


def test_topology_predicate_and_bad_input():
    loop = EventLoop()
    net = Network(loop, 10.0, num_nodes=3, num_nics=2, can_reach=lambda s, sn, d, dn: sn == dn)
    with pytest.raises(ValueError, match="topology"):
        net.send(0, 1, 5, src_nic=0, dst_nic=1)
    with pytest.raises(ValueError, match="itself"):
        net.send(1, 1, 5)
    with pytest.raises(ValueError, match="nbytes"):
        net.send(0, 1, -1)
    with pytest.raises(ValueError, match="NICs"):
        net.send(0, 1, 1, src_nic=2)
    with pytest.raises(ValueError, match="bandwidth"):
        Network(loop, np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="latency"):
        Network(loop, 1.0, latency=-1.0, num_nodes=2)
    with pytest.raises(ValueError, match="num_nodes"):
        Network(loop, 1.0)
    assert gbps_to_bytes_per_s(8.0) == 1e9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.integers(0, 3), st.integers(0, 3), st.integers(0, 1),
                          st.integers(0, 1), st.integers(0, 500)), min_size=1, max_size=40))
def test_random_load_never_overlaps_a_channel_and_conserves_bytes(sends):
    loop = EventLoop()
    bw = np.array([[100.0, 40.0], [80.0, 100.0], [100.0, 100.0], [60.0, 20.0]])
    net = Network(loop, bw, latency=0.01)
    arrived = []
    for t, s, d, sn, dn, nb in sends:
        if s == d:
            continue
        loop.at(t, lambda s=s, d=d, sn=sn, dn=dn, nb=nb: net.send(
            s, d, nb, src_nic=sn, dst_nic=dn, on_arrival=lambda tr: arrived.append((loop.now, tr))))
    loop.run()
    assert channel_overlaps(net.log) == []
    assert len(arrived) == len(net.log)
    assert sum(tr.nbytes for _, tr in arrived) == net.bytes_on_wire == int(net.rx_bytes.sum())
    eps = 1e-9
    for now, tr in arrived:
        assert math.isclose(now, tr.arrival)
        assert tr.tx_start >= tr.submit
        assert math.isclose(tr.tx_end - tr.tx_start, tr.nbytes / bw[tr.src, tr.src_nic], rel_tol=1e-9,
                            abs_tol=1e-12)
        assert tr.rx_start >= tr.tx_start + 0.01 - eps  # the head needs the link latency
        assert tr.arrival >= tr.rx_start + tr.nbytes / bw[tr.dst, tr.dst_nic] - eps
        assert tr.arrival >= tr.tx_end + 0.01 - eps  # never before the tail
    # FIFO: each tx channel serves in submission order, each rx port in order of head arrival
    for key, order, start in ((lambda t: (t.src, t.src_nic), lambda t: t.id, lambda t: t.tx_start),
                              (lambda t: (t.dst, t.dst_nic), lambda t: (t.tx_start + 0.01, t.id),
                               lambda t: t.rx_start)):
        groups: dict = {}
        for tr in net.log:
            groups.setdefault(key(tr), []).append(tr)
        for trs in groups.values():
            starts = [start(tr) for tr in sorted(trs, key=order)]
            assert starts == sorted(starts)
