"""Sketch arithmetic in the discrete-event model: free at rate 0 (the schedules are bit for bit those without it),
hand-computed 2-worker schedules with it timed, fp32 policies never pay it, and it never delays the backward pass."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from mlsys_repro.papers.canary.compute_model import ComputeModel, Layer, make_layout
from mlsys_repro.papers.canary.protocols import SKETCH_PASS_SHARE, NetSpec, ProtocolSpec, simulate
from tests.papers.canary.test_protocols import CM, net, small_layout


def _h(a) -> str | None:
    return None if a is None else hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


SPECS = {
    "canary": ProtocolSpec("canary", sketch=True, staleness=1),
    "canary_sync": ProtocolSpec("canary", sketch=True),
    "canary_fp32": ProtocolSpec("canary", staleness=1),
    "canary_1nic": ProtocolSpec("canary", sketch=True, staleness=1, multi_nic=False),
    "canary_nopipe": ProtocolSpec("canary", sketch=True, staleness=1, pipeline=False),
    "ps": ProtocolSpec("ps"), "ps_sketch": ProtocolSpec("ps", sketch=True),
    "ring": ProtocolSpec("ring"), "ring_sketch": ProtocolSpec("ring", sketch=True),
    "bml": ProtocolSpec("bml"), "ako": ProtocolSpec("ako", staleness=4),
}
# sha256[:16] of fwd_start and of the visibility table, and bytes per iteration, of every protocol on small_layout()
# over BCube(3,1) with one 2x straggler, 12 iterations, computed by the code before the sketch timer existed (58ee34f)
GOLDEN = {
    ("canary", 1e6): ("6334bf65d663f086", "c1865f2b6c2070f8", 19456.0),
    ("canary", 1e8): ("642154276f4b9ee7", "8f81a20a8d168c80", 19456.0),
    ("canary_sync", 1e6): ("e255f836d60d8334", "43206b2e9afd4c04", 19456.0),
    ("canary_sync", 1e8): ("6d22a4bb52a61398", "43206b2e9afd4c04", 19456.0),
    ("canary_fp32", 1e6): ("d85a783314655d56", "ee99c3c9140a1a09", 66304.0),
    ("canary_fp32", 1e8): ("b16e123f6e65ae97", "0e0de2f7725aa5f6", 66304.0),
    ("canary_1nic", 1e6): ("7d8a012467867ab7", "8533e27442f571ce", 19456.0),
    ("canary_1nic", 1e8): ("8a250fffc4120fd3", "8f81a20a8d168c80", 19456.0),
    ("canary_nopipe", 1e6): ("45d31c8d852cf58a", "090247fc40f045f5", 19456.0),
    ("canary_nopipe", 1e8): ("7536b00e66e7d7a5", "6a10457ee09d4adf", 19456.0),
    ("ps", 1e6): ("eed391f425deb10a", None, 66432.0),
    ("ps", 1e8): ("0b7a92ef5dff0244", None, 66432.0),
    ("ps_sketch", 1e6): ("658d567d42cf366b", None, 19648.0),
    ("ps_sketch", 1e8): ("923ba2efdbad4041", None, 19648.0),
    ("ring", 1e6): ("644ccf0d17679fa0", None, 68608.0),
    ("ring", 1e8): ("5ccba71a5d58a5e4", None, 68608.0),
    ("ring_sketch", 1e6): ("26e263d11f576ffa", None, 22912.0),
    ("ring_sketch", 1e8): ("dc372cc8e4e6938e", None, 22912.0),
    ("bml", 1e6): ("5a4e3c809b394650", None, 66528.0),
    ("bml", 1e8): ("759326d021b5332f", None, 66528.0),
    ("ako", 1e6): ("17c0cd62858ce009", "b601ff31b88d5c20", 3456.0),
    ("ako", 1e8): ("d56f9dd67429e75c", "13b223614d49de6c", 145152.0),
}
STRAGGLER = np.array([1.0] * 8 + [2.0])


@pytest.mark.parametrize("name, bw", sorted(GOLDEN))
def test_rate_zero_reproduces_the_schedules_without_the_sketch_timer(name, bw):
    s = simulate(SPECS[name], net(bw=bw), small_layout(), replace(CM, sketch_bytes_per_s=0.0), 8, 12,
                 compute_scale=STRAGGLER)
    assert (_h(s.fwd_start), _h(s.visible), s.bytes_per_iteration) == GOLDEN[(name, bw)]
    assert s.extra["sketch_s_per_iteration"] == 0.0


# ---------------------------------------------------------------------------------------------- 2 workers by hand
# One layer of M = 1000 elements (one colayer, one piece), forward 1 ms and backward 2 ms (C = 3 ms), BCube(2,0) = two
# servers with one NIC of B = 1e6 B/s, latency a = 10 us, 16 B headers. Sketch rate R = 4e6 fp32 B/s per round trip,
# so a pass over m elements takes 0.5 * 4 m / R = m / 2e6 s: e = 0.5 ms for the whole piece, c = 0.25 ms for half.
M, C, A, HDR, R = 1000, 3e-3, 1e-5, 16, 4e6
E, HALF = SKETCH_PASS_SHARE * 4 * M / R, SKETCH_PASS_SHARE * 4 * (M // 2) / R


def _two_workers():
    lay = make_layout([Layer("l0", M, 0, 1e6)], colayer_bytes=10**9, piece_elems=1024)
    return lay, NetSpec(2, 0, 1e6, A, HDR), ComputeModel(1e9)


def test_hand_schedule_canary():
    """Worker 1 encodes its piece (e) and sends it (x = a + (M + 8 + 16) / B) to the owner 0, which decodes and adds
    it (e), sketches the aggregate (e), decodes it to apply it (e) and broadcasts the codes, which worker 1 decodes (e).
    """
    lay, ns, cm = _two_workers()
    x = A + (M + 8 + HDR) / 1e6
    spec = ProtocolSpec("canary", sketch=True, staleness=0)
    free = simulate(spec, ns, lay, cm, 1, 1)
    timed = simulate(spec, ns, lay, replace(cm, sketch_bytes_per_s=R), 1, 1)
    assert E == pytest.approx(0.5e-3, rel=1e-12)
    np.testing.assert_allclose(free.fwd_start[:, 1], [C + x, C + 2 * x], rtol=1e-12)
    np.testing.assert_allclose(timed.fwd_start[:, 1], [C + 4 * E + x, C + 4 * E + 2 * x], rtol=1e-12)
    # busy: worker 0 decodes, encodes and decodes (3 e), worker 1 encodes and decodes (2 e)
    assert timed.extra["sketch_s_per_iteration"] == pytest.approx(2.5 * E, rel=1e-12)
    assert timed.bytes_per_iteration == free.bytes_per_iteration == 2 * (M + 8 + HDR)


def test_hand_schedule_ring_sketch():
    """Each worker encodes its half (c) and sends it (x), decodes and adds the partial it gets (c), encodes the
    completed half (c) for the all-gather and decodes it to apply it (c); the half it then receives is decoded (c)."""
    lay, ns, cm = _two_workers()
    x = A + (M // 2 + 8 + HDR) / 1e6
    spec = ProtocolSpec("ring", sketch=True)
    free = simulate(spec, ns, lay, cm, 1, 1)
    timed = simulate(spec, ns, lay, replace(cm, sketch_bytes_per_s=R), 1, 1)
    np.testing.assert_allclose(free.fwd_start[:, 1], [C + 2 * x] * 2, rtol=1e-12)
    np.testing.assert_allclose(timed.fwd_start[:, 1], [C + 4 * HALF + 2 * x] * 2, rtol=1e-12)
    assert timed.extra["sketch_s_per_iteration"] == pytest.approx(5 * HALF, rel=1e-12)  # 2 encodes + 3 decodes


def test_hand_schedule_ps_sketch():
    """Shards of 500 elements on both servers. Worker 0's FIFO: encode its own shard's part (c), encode the push to
    1 (c, sent at C + 2c), decode its own part (c), decode 1's push (arrives C + c + x), encode shard 0 (c), decode it
    (c, pull sent at C + 2c + x) ... worker 0 ends decoding 1's pull, sent at C + 4c + x: C + 5c + 2x; worker 1 ends
    decoding 0's pull: C + 4c + 2x (x = a + 524 / B >= 2c, so the FIFOs are idle when the messages arrive)."""
    lay, ns, cm = _two_workers()
    x = A + (M // 2 + 8 + HDR) / 1e6
    spec = ProtocolSpec("ps", sketch=True)
    free = simulate(spec, ns, lay, cm, 1, 1)
    timed = simulate(spec, ns, lay, replace(cm, sketch_bytes_per_s=R), 1, 1)
    assert x > 2 * HALF
    np.testing.assert_allclose(free.fwd_start[:, 1], [C + 2 * x] * 2, rtol=1e-12)
    np.testing.assert_allclose(timed.fwd_start[:, 1], [C + 5 * HALF + 2 * x, C + 4 * HALF + 2 * x], rtol=1e-12)
    # per worker: 2 push encodes + 2 push decodes (its shard) + 1 shard encode + 2 pull decodes = 7 passes
    assert timed.extra["sketch_s_per_iteration"] == pytest.approx(7 * HALF, rel=1e-12)


# ---------------------------------------------------------------------------------------------- properties


@pytest.mark.parametrize("name", ["canary_fp32", "ps", "ring", "bml", "ako"])
def test_fp32_policies_do_not_pay_for_the_sketch(name):
    lay = small_layout()
    free = simulate(SPECS[name], net(bw=1e6), lay, CM, 8, 8)
    slow = simulate(SPECS[name], net(bw=1e6), lay, replace(CM, sketch_bytes_per_s=1e5), 8, 8)
    assert np.array_equal(free.fwd_start, slow.fwd_start) and slow.extra["sketch_s_per_iteration"] == 0.0


@pytest.mark.parametrize("name", ["canary", "canary_sync", "canary_1nic", "ps_sketch", "ring_sketch"])
def test_sketch_time_is_its_own_resource(name):
    """The sketch never stretches a backward pass (an iteration's compute takes the same time at every rate); its
    work per iteration is fixed by the protocol (busy time scales as 1 / rate); a slow enough sketch costs time.
    (A slower sketch is not always slower: delaying a send can reorder the NIC queues for the better, a list
    scheduling anomaly, so no monotonicity is asserted.)"""
    lay = small_layout()
    spec = SPECS[name]
    runs = [simulate(spec, net(bw=1e7), lay, replace(CM, sketch_bytes_per_s=r), 8, 8) for r in (0.0, 1e9, 1e8, 1e7)]
    _, compute = lay.colayer_ready(CM, 8)
    for s in runs:
        np.testing.assert_allclose(s.bwd_end - s.fwd_start[:, :-1], compute, rtol=1e-9)
    assert np.all(runs[-1].fwd_start[:, -1] > runs[0].fwd_start[:, -1])
    busy = [s.extra["sketch_s_per_iteration"] for s in runs[1:]]
    assert busy[1] == pytest.approx(10 * busy[0], rel=1e-9) and busy[2] == pytest.approx(100 * busy[0], rel=1e-9)


@pytest.mark.parametrize("staleness, multi_nic, rate", [(0, True, 1e8), (1, True, 3e7), (2, False, 1e8)])
def test_canary_invariants_hold_with_the_sketch_timed(staleness, multi_nic, rate):
    """GEI exactly-once, the staleness bound and FIFO NICs with passes that take time."""
    from mlsys_repro.common.sim.netsim import channel_overlaps

    lay = small_layout()
    T = 7
    s = simulate(ProtocolSpec("canary", sketch=True, staleness=staleness, multi_nic=multi_nic), net(bw=1e6), lay,
                 replace(CM, sketch_bytes_per_s=rate), 8, T, keep_log=True)
    g = s.gei
    assert g.retired == T and g.state_counts["applied"] == T * lay.num_pieces * 9
    assert channel_overlaps(s.log) == []
    t = np.arange(T)[:, None, None]
    assert np.all(s.visible >= t + 1) and np.all(s.visible <= t + 1 + staleness)


def test_canary_sketch_work_per_iteration_by_count():
    """Per piece and iteration Canary makes N encodes (N - 1 senders and the owner) and 2 N - 1 decodes (the N - 1
    partials merged on the way up, the aggregate at each of the N workers): 3 N - 1 passes over the piece."""
    lay = small_layout()
    s = simulate(SPECS["canary"], net(), lay, replace(CM, sketch_bytes_per_s=1e9), 8, 5)
    n = 9
    want = sum((3 * n - 1) * SKETCH_PASS_SHARE * 4 * int(m) / 1e9 for m in lay.piece_len) / n
    assert s.extra["sketch_s_per_iteration"] == pytest.approx(want, rel=1e-12)


def test_sketch_rate_must_be_finite_and_not_negative():
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="sketch_bytes_per_s"):
            ComputeModel(1e9, sketch_bytes_per_s=bad)
