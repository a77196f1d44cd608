"""Compute-time model, speed-ratio respreading, and the PAI calibration behind the shipped hardware profiles."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import yaml

from mlsys_repro.common.traces.errors import TraceFormatError
from mlsys_repro.papers.petrel.calibrate import fit, fit_pai, load_pai_minibatch
from mlsys_repro.papers.petrel.hardware import ComputeModel, assign_classes, prior_groups, with_speed_ratio
from mlsys_repro.papers.petrel.schemas import PSClusterHardware
from tests.conftest import DATA, ROOT


def test_compute_times_are_common_random_numbers():
    hw = PSClusterHardware(name="t", num_workers=8, straggler_prob=0.1, regime_shift_prob=0.05)
    a, b = ComputeModel(hw, 3), ComputeModel(hw, 3)
    ta = [[a.step_time(w) for _ in range(50)] for w in range(8)]
    # same draws whatever order the workers ask in (each worker has its own stream)
    tb = [[0.0] * 50 for _ in range(8)]
    for j in range(50):
        for w in reversed(range(8)):
            tb[w][j] = b.step_time(w)
    assert ta == tb
    c = ComputeModel(hw, 4)
    assert [c.step_time(0) for _ in range(50)] != ta[0]  # another hardware seed is another realisation


def test_classes_and_nominal_speeds():
    hw = PSClusterHardware(name="t", num_workers=10, class_speeds=[1.0, 0.5, 0.25], class_fractions=[0.5, 0.3, 0.2],
                           noise_sigma=0.0, straggler_prob=0.0, regime_shift_prob=0.0)
    c = assign_classes(hw, 0)
    assert np.bincount(c, minlength=3).tolist() == [5, 3, 2]
    m = ComputeModel(hw, 0, batch=64)
    times = np.array([m.step_time(w) for w in range(10)])
    assert np.allclose(times, 0.01 * 2 / np.array([1.0, 0.5, 0.25])[c])  # batch 64 = 2x base batch
    groups = prior_groups(hw, c)
    assert sorted(len(g) for g in groups) == [2, 3, 5]
    assert all(len({c[w] for w in g}) == 1 for g in groups)


def test_stragglers_and_regimes_follow_their_rates():
    hw = PSClusterHardware(name="t", num_workers=1, class_speeds=[1.0], noise_sigma=0.0, straggler_prob=0.1,
                           straggler_slowdown=3.0, regime_shift_prob=0.0)
    m = ComputeModel(hw, 1)
    t = np.array([m.step_time(0) for _ in range(5000)])
    assert set(np.round(t / 0.01, 9)) == {1.0, 3.0}
    assert np.mean(t > 0.015) == pytest.approx(0.1, abs=0.015)


@pytest.mark.parametrize("ratio", [1.0, 2.0, 8.0])
def test_with_speed_ratio(ratio):
    hw = with_speed_ratio(PSClusterHardware(name="t"), ratio)
    assert hw.class_speeds[0] == 1.0 and hw.class_speeds[-1] == pytest.approx(1 / ratio)
    assert len(hw.class_speeds) == 4 and np.all(np.diff(hw.class_speeds) <= 0)


def test_shipped_profiles_carry_the_pai_fit():
    f = fit_pai(DATA)
    assert f.jobs == 4 and f.worker_iterations == 29719
    for name in ("ps_4class_1gbe", "ps_gavel_1gbe", "ps_4class_resnet50_10gbe", "ps_gavel_resnet50_10gbe"):
        cfg = yaml.safe_load((ROOT / "conf" / "hardware" / f"{name}.yaml").read_text())
        assert cfg["noise_sigma"] == pytest.approx(f.noise_sigma, rel=5e-3)
        assert cfg["straggler_prob"] == pytest.approx(f.straggler_prob, rel=5e-3)
        assert cfg["straggler_slowdown"] == pytest.approx(f.straggler_slowdown, rel=5e-3)
        assert cfg["regime_shift_prob"] == pytest.approx(f.regime_shift_prob, rel=5e-3)
        assert cfg["regime_shift_factor"] == pytest.approx(f.regime_shift_factor, rel=5e-3)


def test_fit_known_answer():
    rng = np.random.default_rng(0)
    t = 100 * np.exp(0.05 * rng.standard_normal((2000, 4)))
    t[::100, 0] *= 3.0  # 1 % stragglers on worker 0
    t[1000:, 1] *= 4.0  # one regime shift on worker 1
    f = fit([t])
    assert f.noise_sigma == pytest.approx(0.05, rel=0.1)
    assert f.straggler_prob == pytest.approx(20 / 8000, rel=0.2)
    assert f.straggler_slowdown == pytest.approx(3.0, rel=0.1)
    assert f.regime_shift_prob == pytest.approx(1 / 8000)
    assert f.regime_shift_factor == pytest.approx(4.0, rel=0.1)


def test_malformed_trace_names_file_line_field(tmp_path):
    p = tmp_path / "bad.csv.gz"
    p.write_bytes(gzip.compress(b",worker,gpu,time,batch_time_norm\n0,0,25,1,476\n1,1,25,1,-3\n"))
    with pytest.raises(TraceFormatError, match=r"bad.csv.gz:3: field 'batch_time_norm'"):
        load_pai_minibatch(p)
    q = tmp_path / "nocol.csv.gz"
    q.write_bytes(gzip.compress(b",worker,gpu,time\n0,0,25,1\n"))
    with pytest.raises(TraceFormatError, match="batch_time_norm"):
        load_pai_minibatch(q)
    with pytest.raises(FileNotFoundError, match="vendored"):
        load_pai_minibatch(tmp_path / "missing.csv.gz")


@pytest.mark.parametrize("name", ["ps_4class_resnet50_10gbe", "ps_gavel_resnet50_10gbe"])
def test_resnet50_profiles_follow_the_timing_model(name):
    from mlsys_repro.common.timing import MODELS, effective_flops_per_s, step_time_s

    cfg = yaml.safe_load((ROOT / "conf" / "hardware" / f"{name}.yaml").read_text())
    m = MODELS[cfg["workload"]]()
    assert cfg["payload_bytes"] == m.grad_bytes() == 102_228_128
    assert cfg["base_step_s"] == pytest.approx(step_time_s(m, cfg["base_batch"], effective_flops_per_s("v100")))
