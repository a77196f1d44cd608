"""hier_bsp (issue #50): BSP whose gradients are aggregated in fixed speed-blind groups at their first worker. Bytes
per tier and per NIC by hand, BSP's numerics bit for bit, the groups (index blocks or seeded random), the policy
file and the schema checks."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.papers.petrel.schemas import PSClusterHardware, SyncPolicy
from tests.papers.petrel.conftest import run

HW = PSClusterHardware(name="t", num_workers=6, class_speeds=[1.0, 0.5, 0.2], straggler_prob=0.05,
                       regime_shift_prob=0.02)
HIER = SyncPolicy(name="hier_bsp", kind="hier_bsp", grouping="index", num_communities=2)
BSP = SyncPolicy(name="bsp", kind="bsp")


def test_hier_bsp_bytes_by_hand(make_sim):
    """6 workers in 2 index blocks {0,1,2} (leader 0) and {3,4,5} (leader 3), stopped at the 3rd update.
    Per round: 4 member -> leader gradients, 2 leader pushes, then 2 pulls to the leaders and 4 leader -> member
    broadcasts. At the stop, 3 rounds of gradients and pushes have been sent, and the 3rd round's pulls (sent at
    the update) but only 2 rounds of broadcasts."""
    sim, engine = make_sim(HIER, hw=HW, seed=0, max_updates=3, max_time_s=1e9)
    run(sim, engine)
    m = sim.msg_bytes
    (g,) = sim.groups
    assert g.units == [[0, 1, 2], [3, 4, 5]] and g.leaders == [0, 3] and g.via_leader
    assert sim.version == 3 and sim.grads_applied == 18 and sim.staleness_max == 0
    assert sim.ps_in.bytes == 3 * 2 * m  # k = 2 pushes per round, BSP: N = 6
    assert sim.ps_out.bytes == 3 * 2 * m
    assert sim.leader_bytes == (3 * 4 + 2 * 4) * m
    assert sim.wire_bytes == sim.ps_bytes + sim.leader_bytes == 32 * m  # BSP: 36 m
    # per NIC: a member sends 3 gradients to its leader and has received 2 broadcasts; a leader sends 3 pushes and
    # 2 x 2 broadcasts and receives 3 pulls and 3 x 2 gradients
    for w in (1, 2, 4, 5):
        assert (sim.w_out[w].bytes, sim.w_in[w].bytes) == (3 * m, 2 * m)
    for w in (0, 3):
        assert (sim.w_out[w].bytes, sim.w_in[w].bytes) == (7 * m, 9 * m)
    s = sim.summary()
    assert s["ps_bytes_to_target"] == 12 * m and s["wire_bytes_to_target"] == 32 * m


def test_hier_bsp_equals_bsp_numerics_and_cuts_ps_tier(make_sim):
    a, ea = make_sim(BSP, hw=HW, seed=4, max_updates=4, max_time_s=1e9, mode="map")
    b, eb = make_sim(HIER, hw=HW, seed=4, max_updates=4, max_time_s=1e9, mode="map")
    run(a, ea)
    run(b, eb)
    assert a.version == b.version == 4
    assert np.array_equal(a.w, b.w)  # the sum of all N gradients in worker order, as BSP
    assert {g.iteration for g in b.applied} == set(range(4)) and b.staleness_max == 0
    assert b.ps_in.bytes * 3 == a.ps_in.bytes  # 2 aggregated pushes per round instead of 6


def test_hier_bsp_exactly_once_under_regime_shifts(make_sim):
    sim, engine = make_sim(HIER, hw=HW, seed=3, max_time_s=0.8)
    run(sim, engine)
    assert sim.stop_reason == "horizon" and sim.grads_applied == sim.version * sim.n
    gids = [g.gid for g in sim.applied]
    assert len(gids) == len(set(gids))
    assert sim.bytes_sent == sim.bytes_delivered + sim.bytes_in_flight


@pytest.mark.parametrize("k, units", [(1, [[0, 1, 2, 3, 4, 5, 6]]), (3, [[0, 1, 2], [3, 4], [5, 6]]),
                                      (7, [[w] for w in range(7)])])
def test_index_groups_are_contiguous_blocks(make_sim, k, units):
    hw = PSClusterHardware(name="u", num_workers=7, class_speeds=[1.0, 0.5, 0.2])
    pol = SyncPolicy(name="h", kind="hier_bsp", grouping="index", num_communities=k)
    sim, _ = make_sim(pol, hw=hw, max_time_s=0.01)
    (g,) = sim.groups
    assert g.units == units and g.leaders == [u[0] for u in units]


def test_groups_ignore_speeds(make_sim):
    """The same groups and leaders whatever the speed classes: the leader is the first worker even when it is the
    slowest (CASP's leader is its community's fastest)."""
    pol = SyncPolicy(name="h", kind="hier_bsp", grouping="random", num_communities=2)
    seen = []
    for speeds in ([1.0, 0.5, 0.2], [0.1, 1.0], [1.0]):
        hw = PSClusterHardware(name="s", num_workers=6, class_speeds=speeds)
        sim, _ = make_sim(pol, hw=hw, seed=8, max_time_s=0.01)
        (g,) = sim.groups
        assert sorted(m for u in g.units for m in u) == list(range(6)) and [len(u) for u in g.units] == [3, 3]
        assert g.leaders == [min(u) for u in g.units]
        seen.append(g.units)
    assert seen[0] == seen[1] == seen[2]
    assert seen[0] != [[0, 1, 2], [3, 4, 5]]  # seeded random, not index blocks (for this seed)
    other, _ = make_sim(pol, hw=hw, seed=9, max_time_s=0.01)
    assert other.groups[0].units != seen[0]


def test_policy_file_and_schema():
    from mlsys_repro.common.repro.config import compose
    from mlsys_repro.papers.petrel.protocols import HierarchicalGroups, make_protocol

    pol = compose(["experiment=petrel/heterogeneity", "profile=smoke", "policy=petrel/hier_bsp"]).policy
    assert (pol.name, pol.kind, pol.grouping, pol.num_communities) == ("hier_bsp", "hier_bsp", "index", 0)
    grouper, _ = make_protocol(SyncPolicy(name="h", kind="hier_bsp", grouping="index"), 16, 4, seed=0)
    assert isinstance(grouper, HierarchicalGroups) and grouper.k == 4  # 0 = the prior community count
    with pytest.raises(ValueError, match="hier_bsp"):
        SyncPolicy(name="h", kind="hier_bsp", grouping="kmeans")
    with pytest.raises(ValueError, match="only for kind hier_bsp"):
        SyncPolicy(name="c", kind="casp", grouping="index")
    with pytest.raises(ValueError, match="more communities than workers"):
        make_protocol(SyncPolicy(name="h", kind="hier_bsp", grouping="index", num_communities=9), 8, 4, seed=0)
