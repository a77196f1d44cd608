"""mlsys_repro/common/timing.py: parameters, FLOPs and bytes of layer stacks against hand-computed and published
values."""

from __future__ import annotations

import pytest

from mlsys_repro.common.timing import (
    GAVEL_RESNET50_STEPS_PER_S,
    Stack,
    comm_compute_ratio,
    effective_flops_per_s,
    layer_positions,
    mlp,
    nnx_param_count,
    resnet50,
    step_time_s,
    transfer_s,
    vgg16,
)


def test_small_stack_by_hand():
    # 8x8x3 input; conv 3x3 -> 4 channels (SAME, stride 1), 2x2 pool, dense 10.
    m = Stack("t", (8, 8), 3).conv(4, 3).pool(2).flatten().dense(10).cost()
    conv_params = 3 * 3 * 3 * 4 + 4  # 112
    conv_flops = 2 * (8 * 8 * 4) * (3 * 3 * 3)  # 2 x (outputs x MACs per output) = 13,824
    dense_params = 4 * 4 * 4 * 10 + 10  # 650
    dense_flops = 2 * 64 * 10  # 1,280
    assert m.params == conv_params + dense_params == 762
    assert m.fwd_flops == conv_flops + dense_flops == 15_104
    assert m.grad_bytes() == 4 * 762
    assert m.train_flops(32) == 3 * 15_104 * 32
    # strided SAME conv: ceil(8 / 2) = 4
    s = Stack("s", (8, 8), 3).conv(2, 3, stride=2, bias=False)
    assert (s.h, s.w) == (4, 4) and s.cost().params == 54 and s.cost().fwd_flops == 2 * 16 * 2 * 27


def test_mlp_proxy_matches_the_engine_model(task):
    # the simulator's real proxy (784-16-16-10 in the test fixture) has exactly the timing model's parameter count
    assert mlp(784, [16, 16], 10).params == task.num_params
    assert mlp(784, [32, 32], 10).params == 26_506  # the default proxy, as the README says


def test_published_counts():
    v, r = vgg16(), resnet50()
    assert v.params == 138_357_544  # torchvision vgg16
    assert r.params == 25_557_032  # torchvision resnet50 (BN scale + offset counted)
    assert v.fwd_flops / 2 == pytest.approx(15.47e9, rel=0.005)  # 15.47 GMACs
    assert r.fwd_flops / 2 == pytest.approx(4.09e9, rel=0.005)  # 4.09 GMACs
    assert r.grad_bytes() == 102_228_128


def test_nnx_eval_shape_agrees_with_the_stack():
    from flax import nnx

    def build():
        class Net(nnx.Module):
            def __init__(self, rngs):
                self.c = nnx.Conv(3, 4, (3, 3), rngs=rngs)
                self.d = nnx.Linear(64, 10, rngs=rngs)

        return Net(nnx.Rngs(0))

    assert nnx_param_count(build) == Stack("t", (8, 8), 3).conv(4, 3).pool(2).flatten().dense(10).cost().params


def test_rates_ratios_and_positions():
    r = resnet50()
    rate = effective_flops_per_s("v100")
    # calibrated so that ResNet-50 at batch 64 runs at Gavel's measured V100 steps/s
    assert step_time_s(r, 64, rate) == pytest.approx(1 / GAVEL_RESNET50_STEPS_PER_S["v100"])
    assert transfer_s(1e9 / 8, 1.0, latency_s=0.5) == pytest.approx(1.5)
    ratio = comm_compute_ratio(r, 32, rate, 10.0)
    assert ratio == pytest.approx(transfer_s(r.grad_bytes(), 10.0) / step_time_s(r, 32, rate))
    assert 0.5 < ratio < 1.0  # ResNet-50 on 10 GbE, V100, batch 32: communication ~ compute
    pos = layer_positions(mlp(4, [2], 3))  # l1: 10 params, out: 9 params
    assert pos == [("l1", 0.0, 10 / 19), ("out", 10 / 19, 1.0)]
