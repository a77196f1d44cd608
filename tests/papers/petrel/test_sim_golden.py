"""The issue #50 options (``ps_shards``, ``permute_speeds_at_steps``, the per-unit leaders behind ``hier_bsp``) leave
every existing mechanism as it was: the values below were recorded with the simulator *before* those changes
(commit 81e5305) on two small clusters, and the defaults must reproduce them (event order exactly, times and bytes
exactly up to float rounding, the trained parameters up to XLA's)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from mlsys_repro.papers.petrel.schemas import SyncPolicy
from tests.papers.petrel.conftest import every_kind, run, small_hw

HW = {
    "cpu": small_hw(),
    # network-bound: the PS NIC and the workers' NICs are slow, so link contention shapes the event order
    "net": small_hw(name="n", ps_bandwidth_gbps=0.05, worker_bandwidth_gbps=0.2),
}
POLICIES = {k: v for k, v in every_kind().items() if k != "hier_bsp"} | {
    "casp_a3c": SyncPolicy(name="casp", kind="casp", grouping="a3c")}
# (updates, gradients applied, PS in bytes, PS out bytes, wire bytes, leader-tier bytes, staleness sum,
#  sha256 of the applied (gid, worker, iteration, version, applied_version) sequence)
EXACT = {
    "net/bsp": (4, 24, 1249728, 1249728, 2499456, 0, 0, "1cf28dde4da06813"),
    "net/asp": (35, 35, 1978736, 1822520, 3801256, 0, 160, "c66927c57821f95f"),
    "net/ssp": (35, 35, 1978736, 1822520, 3801256, 0, 160, "c66927c57821f95f"),
    "net/dssp": (35, 35, 1978736, 1770448, 3749184, 0, 152, "990f5a207595de85"),
    "net/casp_kmeans": (14, 44, 729008, 729008, 4686480, 3228464, 38, "638fe37b2f37281a"),
    "net/casp_prior": (25, 50, 1353872, 1301800, 5259272, 2603600, 94, "549a7d6f52e445ce"),
    "net/casp_random": (24, 48, 1249728, 1249728, 4946840, 2447384, 90, "a7680d2b4928072f"),
    "net/casp_a3c": (17, 42, 885224, 833152, 4530264, 2811888, 52, "92f31addf718939e"),
    "cpu/ssp": (63, 63, 3280536, 3020176, 6300712, 0, 188, "dc1c1899bbe3ad8a"),
    "cpu/casp_kmeans": (31, 108, 1614232, 1614232, 11247552, 8019088, 74, "f64c1ca14edc1031"),
}
# (last event time, summed idle seconds, PS ingress busy seconds, sum and norm of the final parameters)
FLOATS = {
    "net/bsp": (0.2920605786931613, 1.182348118607167, 0.19995648000000005, -3.189153969149629, 6.574973542235307),
    "net/asp": (0.29796011661345095, 1.2120400821443544, 0.31659775999999995, -4.466152052860707,
                6.609596316739311),
    "net/ssp": (0.29796011661345095, 1.1753716946137307, 0.31659775999999995, -4.466152052860707,
                6.609596316739311),
    "net/dssp": (0.29754171150148945, 1.2191375894441152, 0.31659775999999995, -4.204797578895523,
                 6.614950912744343),
    "net/casp_kmeans": (0.3, 1.1703376175128464, 0.11664127999999997, -3.532788265918498, 6.6636039925029475),
    "net/casp_prior": (0.29902020009146635, 1.141283259329949, 0.21661952000000007, -4.262861278431956,
                       6.675066740680849),
    "net/casp_random": (0.29716241018990563, 1.1394692928986356, 0.19995648000000005, -2.1578556340355135,
                        6.68489115985444),
    "net/casp_a3c": (0.3, 1.1562995150403357, 0.14163583999999999, -4.152219603136473, 6.647156393374976),
    "cpu/ssp": (0.2999866758092769, 0.819246473447218, 0.02624428799999996, -6.661190882932715, 6.713905406981152),
    "cpu/casp_kmeans": (0.3, 0.5485885376567252, 0.012913856000000001, -7.356921698788938, 6.906123891331442),
}


@pytest.mark.parametrize("case", sorted(EXACT))
def test_defaults_reproduce_the_pre_issue50_simulator(make_sim, case):
    from mlsys_repro.papers.petrel.a3c import SharedAgent
    from mlsys_repro.papers.petrel.schemas import A3CConfig

    hw_name, pol_name = case.split("/")
    hw = HW[hw_name]
    for opt, default in (("ps_shards", 1), ("permute_speeds_at_steps", None)):  # the #50 options, where they exist
        assert getattr(hw, opt, default) == default
    agent = SharedAgent(A3CConfig(), levels=9, seed=0) if pol_name == "casp_a3c" else None
    sim, engine = make_sim(POLICIES[pol_name], hw=hw, seed=3, agent=agent, eval_every_grads=32, max_time_s=0.3,
                           decision_every_s=0.05)
    run(sim, engine)
    seq = [(g.gid, g.worker, g.iteration, g.version, g.applied_version) for g in sim.applied]
    got = (sim.version, sim.grads_applied, sim.ps_in.bytes, sim.ps_out.bytes, sim.bytes_sent, sim.tier_sent["leader"],
           int(sim.staleness_sum), hashlib.sha256(repr(seq).encode()).hexdigest()[:16])
    assert got == EXACT[case]
    now, idle, busy, wsum, wnorm = FLOATS[case]
    assert sim.now == pytest.approx(now, rel=1e-12)
    assert float(sim.idle_time.sum()) == pytest.approx(idle, rel=1e-12)
    assert sim.ps_in.busy == pytest.approx(busy, rel=1e-12)
    assert float(np.sum(sim.w, dtype=np.float64)) == pytest.approx(wsum, rel=1e-5)
    assert float(np.linalg.norm(sim.w.astype(np.float64))) == pytest.approx(wnorm, rel=1e-6)
