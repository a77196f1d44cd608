"""The proxy's pieces on a realistic model's gradient (mlsys_repro/papers/canary/compute_model.timing_layout): known
answers."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.timing import effective_flops_per_s, mlp, resnet50, step_time_s, vgg16
from mlsys_repro.papers.canary.compute_model import ComputeModel, Layer, make_layout, realistic_layers, timing_layout
from mlsys_repro.papers.canary.data import layout_for_shape
from mlsys_repro.papers.canary.experiments import compute_model, des_layout
from mlsys_repro.papers.canary.protocols import NetSpec, ProtocolSpec, payload_bytes, simulate
from mlsys_repro.papers.canary.schemas import BCubeCluster


def _tiny_proxy():
    # two proxy layers of 5 elements, one colayer, pieces [0,4) [4,8) [8,10)
    return make_layout([Layer("a", 5, 0, 1.0), Layer("b", 5, 5, 1.0)], colayer_bytes=10**6, piece_elems=4)


def test_known_stack_maps_pieces_by_fractional_position():
    cost = mlp(4, [3], 2)  # l1: 4*3+3 = 15 params, 24 FLOPs; out: 3*2+2 = 8 params, 12 FLOPs
    assert [(l.name, l.size, l.offset, l.fwd_flops) for l in realistic_layers(cost)] == [
        ("l1", 15, 0, 24.0), ("out", 8, 15, 12.0)]
    lay = timing_layout(_tiny_proxy(), cost)
    # R = 23 / 10: boundaries 0, 4, 8, 10 -> 0, 9, 18, 23 (floor)
    assert lay.piece_start.tolist() == [0, 9, 18] and lay.piece_len.tolist() == [9, 9, 5]
    assert lay.size == 23 and lay.num_pieces == 3
    # piece starts lie in l1, l1, out: colayers (backward) = [out], [l1]; pieces 0, 1 go with l1, piece 2 with out
    assert lay.colayers == ((1,), (0,)) and lay.piece_colayer.tolist() == [1, 1, 0]
    assert lay.colayer_ranges == (((15, 23),), ((0, 15),))
    # FLOPs on a 1 FLOP/s worker, batch 1: forward 36 s, backward of out 24 s, of l1 48 s
    ready, total = lay.colayer_ready(ComputeModel(1.0), 1)
    assert ready.tolist() == [60.0, 108.0] and total == 108.0 == 3 * cost.fwd_flops
    # bytes on the wire follow the realistic gradient: fp32 4 B per realistic element, 8-bit 1 B + 8 B per 4 elements
    assert sum(payload_bytes(int(n), False, lay.piece_elems) for n in lay.piece_len) == 4 * 23
    assert sum(payload_bytes(int(n), True, lay.piece_elems) for n in lay.piece_len) == 23 + 8 * (3 + 3 + 2)


@pytest.mark.parametrize("cost_fn", [resnet50, vgg16])
def test_realistic_models_keep_the_proxy_pieces_and_the_timing_model(cost_fn):
    cost = cost_fn()
    proxy = layout_for_shape("mlp", (28, 28, 1), 65536, 16384)
    lay = timing_layout(proxy, cost)
    assert lay.num_pieces == proxy.num_pieces  # one schedule entry per proxy piece
    cover = np.zeros(lay.size, np.int8)
    for s, n in zip(lay.piece_start, lay.piece_len, strict=True):
        cover[s: s + n] += 1
    assert lay.size == cost.params and np.all(cover == 1)
    # fractional positions agree to within one realistic element
    frac_p = proxy.piece_start / proxy.size
    assert np.all(np.abs(lay.piece_start / lay.size - frac_p) <= 1.0 / lay.size)
    # every colayer's range is whole layers; pieces of a colayer start inside it
    for c, ((a, b),) in enumerate(lay.colayer_ranges):
        starts = lay.piece_start[lay.piece_colayer == c]
        assert np.all((starts >= a) & (starts < b))
    # with zero overheads the iteration is exactly mlsys_repro.common.timing's step time; colayers become ready in order
    rate = effective_flops_per_s("p100")
    ready, total = lay.colayer_ready(ComputeModel(rate), 32)
    assert total == pytest.approx(step_time_s(cost, 32, rate), rel=1e-12)
    assert np.all(np.diff(ready) > 0) and ready[-1] == pytest.approx(total)


def test_hardware_workload_drives_the_discrete_event_model():
    hw = BCubeCluster(workload="resnet50", gpu="p100")
    proxy = layout_for_shape("mlp", (28, 28, 1), 65536, 16384)
    lay, cm = des_layout(hw, proxy), compute_model(hw)
    assert lay.size == 25_557_032 and cm.kernel_overhead_s == 0.0 and cm.iteration_overhead_s == 0.0
    # 25 Gbps: compute-bound (BML's exchange is not hidden, Canary's is); 1 Gbps: network-bound
    step = step_time_s(resnet50(), 32, effective_flops_per_s("p100"))
    fast = simulate(ProtocolSpec("canary", sketch=True, staleness=1), NetSpec(3, 1, 25e9 / 8, 5e-6), lay, cm, 32, 20)
    assert fast.steady_iteration_time() == pytest.approx(step, rel=1e-6)
    slow = simulate(ProtocolSpec("bml"), NetSpec(3, 1, 1e9 / 8, 5e-6), lay, cm, 32, 20)
    # BML starts after the backward pass; over both parts' reduce-scatter and all-gather stages each of the two NICs
    # carries 4 B x D x (2/3 + 2/9) / 2 x 2 = 4 B x D x 8/9 per iteration, so the iteration is at least that longer
    assert slow.steady_iteration_time() > step + 2 * 4 * 25_557_032 * (8 / 9) / 2 / (1e9 / 8) * 0.99
    assert des_layout(BCubeCluster(), proxy) is proxy  # no workload: the proxy's own layout


def test_bad_timing_input():
    with pytest.raises(ValueError, match="smaller than the proxy"):
        timing_layout(layout_for_shape("mlp", (28, 28, 1), 65536, 16384), mlp(4, [3], 2))
    with pytest.raises(ValueError, match="hardware.workload"):
        BCubeCluster(workload="resnet51")
    with pytest.raises(ValueError, match="hardware.gpu"):
        BCubeCluster(gpu="h100")


def test_heterogeneous_workers_in_the_discrete_event_model():
    hw = BCubeCluster(workload="resnet50", gpu="p100")
    lay, cm = des_layout(hw, layout_for_shape("mlp", (28, 28, 1), 65536, 16384)), compute_model(hw)
    step = step_time_s(resnet50(), 32, effective_flops_per_s("p100"))
    ns = NetSpec(3, 1, 25e9 / 8, 5e-6)
    spec = ProtocolSpec("bml")
    base = simulate(spec, ns, lay, cm, 32, 12)
    same = simulate(spec, ns, lay, cm, 32, 12, compute_scale=np.ones(9))
    np.testing.assert_array_equal(base.fwd_start, same.fwd_start)  # all-ones = homogeneous, bit for bit
    scale = np.ones(9)
    scale[-1] = 2.0
    slow = simulate(spec, ns, lay, cm, 32, 12, compute_scale=scale)
    # synchronous: BML's exchange starts only after the straggler's 2x backward, so each iteration is at least the
    # homogeneous one plus one more step time
    assert slow.steady_iteration_time() >= (base.steady_iteration_time() + step) * (1 - 1e-9)
    # bounded staleness 1: worker 0 runs at most one iteration ahead of the straggler
    can = simulate(ProtocolSpec("canary", sketch=True, staleness=1), ns, lay, cm, 32, 12, compute_scale=scale)
    assert can.steady_iteration_time() >= 2 * step * 0.999
    with pytest.raises(ValueError, match="compute_scale"):
        simulate(spec, ns, lay, cm, 32, 4, compute_scale=np.ones(8))
