"""BML with backward-pass pipelining (``bml_overlap``): a hand-computed schedule, equal to BML with one colayer,
the same payload bytes, and never slower than BML in the configurations the "vs BML" claims read (where the claims
use it as the baseline)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from mlsys_repro.common.sim.netsim import gbps_to_bytes_per_s
from mlsys_repro.common.timing import resnet50
from mlsys_repro.papers.canary.compute_model import ComputeModel, Layer, make_layout, timing_layout
from mlsys_repro.papers.canary.data import SHAPES, layout_for_shape
from mlsys_repro.papers.canary.experiments import compute_model, net_spec, ratio_gbps
from mlsys_repro.papers.canary.protocols import NetSpec, ProtocolSpec, simulate
from mlsys_repro.papers.canary.schemas import BCubeCluster, ExchangePolicy
from tests.conftest import ROOT
from tests.papers.canary.test_protocols import CM, net, small_layout

BML, OVERLAP = ProtocolSpec("bml"), ProtocolSpec("bml", overlap=True)


def test_hand_schedule_two_workers_two_colayers():
    """BCube(2,0), one NIC of 1e6 B/s, 10 us, 16 B headers; layers of 600 and 400 elements, each 1 ms forward and
    2 ms backward. The 400-element colayer is ready at 4 ms, the 600-element one at C = 6 ms. BML exchanges all 1000
    elements at C: a reduce and a gather stage of 500 elements each way, C + 2 (a + (2000 + 16) / B). With overlap
    the 400-element bucket is done by 5.652 ms and the last one takes C + 2 (a + (1200 + 16) / B)."""
    lay = make_layout([Layer("l0", 600, 0, 1e6), Layer("l1", 400, 600, 1e6)], colayer_bytes=1, piece_elems=1024)
    assert [lay.colayer_size(c) for c in range(2)] == [400, 600]
    ns, cm, a, b = NetSpec(2, 0, 1e6, 1e-5, 16), ComputeModel(1e9), 1e-5, 1e6
    plain = simulate(BML, ns, lay, cm, 1, 1)
    over = simulate(OVERLAP, ns, lay, cm, 1, 1)
    np.testing.assert_allclose(plain.fwd_start[:, 1], 6e-3 + 2 * (a + 2016 / b), rtol=1e-12)
    np.testing.assert_allclose(over.fwd_start[:, 1], 6e-3 + 2 * (a + 1216 / b), rtol=1e-12)
    # the same elements over the same links; four more messages, so four more headers
    assert plain.bytes_per_iteration == 2 * 2 * 2016 and over.bytes_per_iteration == 2 * 2 * (816 + 1216)


@pytest.mark.parametrize("nk", [(3, 1), (2, 1), (2, 2)])
@pytest.mark.parametrize("bw", [1e6, 1e8])
def test_one_colayer_is_plain_bml(nk, bw):
    lay = small_layout(colayer_bytes=10**9)
    assert lay.num_colayers == 1
    plain = simulate(BML, net(*nk, bw=bw), lay, CM, 8, 6)
    over = simulate(OVERLAP, net(*nk, bw=bw), lay, CM, 8, 6)
    assert np.array_equal(plain.fwd_start, over.fwd_start) and plain.bytes_per_iteration == over.bytes_per_iteration


@pytest.mark.parametrize("nk", [(3, 1), (2, 2)])
def test_the_same_payload_bytes(nk):
    """Colayer sizes divisible by (k + 1) N: without headers the bytes are identical; with headers they differ by
    one header per extra message (each of the C colayers repeats BML's (k + 1) parts x 2 (k + 1) stages x (n - 1)
    peers messages per server)."""
    n, k = nk
    per = (k + 1) * n ** (k + 1)
    lay = small_layout((3 * per, 5 * per, 2 * per), colayer_bytes=1, piece=64)
    assert lay.num_colayers == 3
    no_hdr = NetSpec(n, k, 1e7, 2e-6, 0)
    assert simulate(BML, no_hdr, lay, CM, 8, 4).bytes_per_iteration == \
        simulate(OVERLAP, no_hdr, lay, CM, 8, 4).bytes_per_iteration
    hdr = net(n, k)
    extra = (3 - 1) * n ** (k + 1) * (k + 1) * 2 * (k + 1) * (n - 1) * hdr.header_bytes
    assert simulate(OVERLAP, hdr, lay, CM, 8, 4).bytes_per_iteration == \
        simulate(BML, hdr, lay, CM, 8, 4).bytes_per_iteration + extra


def test_overlap_is_an_option_of_bml_only():
    with pytest.raises(ValueError, match="overlap"):
        ProtocolSpec("ring", overlap=True)
    with pytest.raises(ValueError, match="pipeline"):
        ProtocolSpec("bml", overlap=True, pipeline=False)
    with pytest.raises(ValueError, match="overlap"):
        ExchangePolicy(protocol="canary", sketch=True, overlap=True)
    with pytest.raises(ValueError, match="overlap"):
        ExchangePolicy(protocol="bml", overlap=True, pipeline=False)


def _experiment(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf/experiment/canary" / f"{name}.yaml").read_text())["experiment"]


def _hardware(name: str) -> BCubeCluster:
    cfg = yaml.safe_load((ROOT / "conf/hardware" / f"{name}.yaml").read_text())
    fields = set(BCubeCluster.__dataclass_fields__)
    return BCubeCluster(**{k: v for k, v in cfg.items() if k in fields})


def _never_slower(exp: str, hardware: str, rates: list[float], slowdowns: list[float], pilot: bool = True) -> None:
    hw = _hardware(hardware)
    p = _experiment(exp)["params"]
    lay = timing_layout(layout_for_shape(p["model"], SHAPES["mnist"], p["colayer_bytes"], p["piece_elems"]),
                        resnet50())
    for gbps in rates:
        for sd in slowdowns:
            scale = np.ones(hw.num_servers)
            scale[-1] = sd
            kw = dict(max_simulated=p.get("des_max_simulated", 60) if pilot else None, compute_scale=scale)
            plain = simulate(BML, net_spec(hw, gbps), lay, compute_model(hw), p["batch"], p["iterations"], **kw)
            over = simulate(OVERLAP, net_spec(hw, gbps), lay, compute_model(hw), p["batch"], p["iterations"], **kw)
            assert np.all(over.fwd_start <= plain.fwd_start), (exp, gbps, sd)
            assert over.steady_iteration_time() < plain.steady_iteration_time(), (exp, gbps, sd)


def test_overlap_is_never_slower_where_the_9_server_claims_read_it():
    """Every iteration of every worker starts no later with overlap, at every NIC rate of tta_bcube9 and every
    ratio and slowdown of comm_ratio: with the same numerics (the fp32 mean, one training for both), every seed's
    time to target is then no longer, so the "vs BML" claims read bml_overlap as the stronger BML."""
    assert "bml_overlap" in _experiment("tta_bcube9")["policies"]
    _never_slower("tta_bcube9", "bcube3_1_resnet50_p100", _experiment("tta_bcube9")["params"]["bandwidths_gbps"],
                  [1.0])
    cr = _experiment("comm_ratio")["params"]
    hw = _hardware("bcube3_1_resnet50_p100")
    _never_slower("comm_ratio", "bcube3_1_resnet50_p100", [ratio_gbps(hw, cr["batch"], r) for r in cr["comm_ratios"]],
                  cr["slowdowns"])


@pytest.mark.slow
def test_overlap_is_never_slower_where_the_27_server_claim_reads_it():
    assert "bml_overlap" in _experiment("tta_bcube27")["policies"]
    # neither schedule is periodic within the experiment's des_max_simulated pilot iterations (extrapolate finds no
    # period), so the experiment simulates every iteration after the pilot: the test simulates them without it
    # (the pilot was 60 of 210 simulated iterations; CI time)
    _never_slower("tta_bcube27", "bcube3_2_resnet50_p100", _experiment("tta_bcube27")["params"]["bandwidths_gbps"],
                  [1.0], pilot=False)


def test_gbps_helper_matches_the_net_spec():
    hw = _hardware("bcube3_1_resnet50_p100")
    assert net_spec(hw, 1.0).nic_bytes_per_s == gbps_to_bytes_per_s(1.0) == 1.25e8
