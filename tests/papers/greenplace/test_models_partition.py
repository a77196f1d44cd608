"""NNX models (shapes, FLOPs, weights), latency regressors, and the partition solvers (DADS vs brute force)."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.traces.energy import load_latency_table
from mlsys_repro.papers.greenplace.latency import DEVICES, TABLE_TYPES, fit_all, layer_latency_s
from mlsys_repro.papers.greenplace.models import LayerProfile, build, profile, xla_flops
from mlsys_repro.papers.greenplace.partition import (
    closed,
    dads_min_cut,
    neurosurgeon_latency,
    prefix_sets,
    segment_stats,
)
from tests.conftest import DATA

# weights of the reference implementations (torchvision; MobileNet-v1 as in its paper), plus the BN running
# statistics NNX keeps as state, plus the biases our convolutions keep before batch norm (the references drop them)
WEIGHTS = {"alexnet": 61_100_840, "vgg16": 138_357_544, "resnet18": 11_689_512 + 9_600 + 4_800,
           "mobilenet_v1": 4_231_976 + 10_944 + 21_888}


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_profiles_match_the_reference_architectures(name):
    p = profile(name)
    assert p.out_shapes[-1] == (1, 1, 1000)
    assert p.param_bytes.sum() / 4 == WEIGHTS[name]
    assert p.block_end[-1] and (p.flops > 0).all() and (p.out_bytes > 0).all()


@pytest.mark.parametrize("name, j", [("resnet18", 0), ("vgg16", 3), ("mobilenet_v1", 2), ("alexnet", 8)])
def test_flops_agree_with_xla_cost_analysis(name, j):
    assert profile(name).flops[j] == pytest.approx(xla_flops(name, j), rel=0.05)


def test_real_forward_pass_matches_the_profile_shapes():
    net = build("mobilenet_v1")
    outs = net.forward_all(jnp.ones((1, 224, 224, 3)))
    assert tuple(o.shape[1:] for o in outs) == profile("mobilenet_v1").out_shapes
    assert bool(jnp.isfinite(outs[-1]).all())


@pytest.fixture(scope="module")
def latency_models():
    tabs = {f"{d}/{k}": load_latency_table(DATA / f"energy/neurosurgeon-tjyy/{d}_{k}_lat.csv.gz", k)
            for d in DEVICES for k in TABLE_TYPES}
    return fit_all(tabs)


def test_latency_regressors_generalise_and_cloud_is_faster(latency_models):
    for (dev, kind), m in latency_models.items():
        assert m.holdout_median_ape < 0.35, (dev, kind, m.holdout_median_ape)
        assert m.n_test > 0.15 * (m.n_train + m.n_test)
    for name in ("alexnet", "vgg16", "resnet18", "mobilenet_v1"):
        lat = layer_latency_s(profile(name), latency_models)
        assert (lat > 0).all() and lat[:, 0].sum() > 3 * lat[:, 1].sum()


def test_segments_partition_the_model(latency_models):
    p = profile("resnet18")
    lat = layer_latency_s(p, latency_models)
    for s in prefix_sets(p):
        st_ = segment_stats(p, lat, s)
        assert st_.front_lat + st_.back_lat == pytest.approx(lat.sum(0))
        assert st_.front_flops + st_.back_flops == pytest.approx(p.flops.sum())
        assert st_.front_params + st_.back_params == pytest.approx(p.param_bytes.sum())
    with pytest.raises(ValueError, match="not closed"):
        bad = np.zeros(p.num_layers, bool)
        bad[5] = True
        segment_stats(p, lat, bad)


def _random_dag(draw_edges, n):
    inputs = [(-1,)]
    for j in range(1, n):
        preds = tuple(sorted({j - 1, *[i for i in draw_edges[j] if i < j]}))
        inputs.append(preds)
    return inputs


def _toy_profile(inputs, out_bytes):
    n = len(inputs)
    return LayerProfile(
        name="toy", kinds=("conv",) * n, inputs=tuple(inputs), out_shapes=((1, 1, 1),) * n,
        in_shapes=((1, 1, 1),) * n, flops=np.ones(n), out_bytes=np.asarray(out_bytes, float),
        param_bytes=np.zeros(n), features=({},) * n, block_end=np.ones(n, bool), input_bytes=50.0)


def _brute_force(prof, te, tc, bw, inb, outb):
    n = prof.num_layers
    cons = prof.consumers()
    best = np.inf
    for bits in itertools.product([False, True], repeat=n):
        s = np.array(bits)
        if not closed(prof, s):
            continue
        cost = te[s].sum() + tc[~s].sum()
        cost += sum(prof.out_bytes[i] / bw for i in np.flatnonzero(s) if any(not s[j] for j in cons[i]))
        cost += inb / bw if not s[0] else 0.0
        cost += outb / bw if not s[-1] else 0.0
        best = min(best, cost)
    return best


@given(st.integers(2, 8), st.data())
@settings(max_examples=40, deadline=None)
def test_dads_min_cut_is_optimal_on_random_dags(n, data):
    edges = [data.draw(st.lists(st.integers(0, n), max_size=2)) for _ in range(n)]
    prof = _toy_profile(_random_dag(edges, n), data.draw(st.lists(st.floats(1, 100), min_size=n, max_size=n)))
    te = np.asarray(data.draw(st.lists(st.floats(0.01, 2), min_size=n, max_size=n)))
    tc = np.asarray(data.draw(st.lists(st.floats(0.01, 2), min_size=n, max_size=n)))
    bw = data.draw(st.floats(5, 500))
    s, value = dads_min_cut(prof, te, tc, bw, 50.0, 7.0)
    assert closed(prof, s)
    assert value == pytest.approx(_brute_force(prof, te, tc, bw, 50.0, 7.0), rel=1e-6, abs=1e-9)


@given(st.integers(1, 12), st.data())
@settings(max_examples=40, deadline=None)
def test_dads_equals_neurosurgeon_on_chains(n, data):
    fl = st.lists(st.floats(0.001, 1.0), min_size=n, max_size=n)
    te, tc = np.asarray(data.draw(fl)), np.asarray(data.draw(fl))
    ob = np.asarray(data.draw(st.lists(st.floats(1, 1e4), min_size=n, max_size=n)))
    prof = _toy_profile([(-1,)] + [(j - 1,) for j in range(1, n)], ob)
    _, v = dads_min_cut(prof, te, tc, 1e3, 500.0, 10.0)
    assert v == pytest.approx(neurosurgeon_latency(te, tc, ob, 500.0, 10.0, 1e3).min(), rel=1e-6)



def _per_frame_latency(tables, hw_nodes, bw, m, s, cloud):
    """Per-frame edge + transfer + cloud seconds of every candidate of model m between site s and the cloud."""
    a = tables.arrays
    fe, be = a["front_empty"][m], a["back_empty"][m]
    t_e = a["front_lat"][m, :, 0] / hw_nodes[s].speed
    t_c = a["back_lat"][m, :, 1] / hw_nodes[cloud].speed
    tx = np.where(fe, a["in_bytes"][m], np.where(be, 0.0, a["cross_bytes"][m])) + np.where(be, 0.0, a["out_bytes"][m])
    return np.where(a["cand_ok"][m], t_e + tx / bw + t_c, np.inf)


def test_dads_cut_is_the_min_cut_at_the_regimes_bandwidth(latency_models):
    """The model tables of a regime are built on its hardware: DADS's cut is the latency-optimal partition at the
    regime's WAN bandwidth (not the configured one's), and on a slow WAN it differs from the 50 Mbps cut."""
    from mlsys_repro.papers.greenplace.scenario import model_tables, regime_hardware
    from mlsys_repro.papers.greenplace.schemas import EdgeCloudHardware, NodeSpec, Regime

    nodes = [NodeSpec(name="a", kind="edge", speed=1.0, p_idle_w=10, p_max_w=30, memory_gb=4, job_share=0.6),
             NodeSpec(name="b", kind="edge", speed=0.6, p_idle_w=8, p_max_w=20, memory_gb=2, job_share=0.4),
             NodeSpec(name="dc", kind="cloud", lanes=4, p_idle_w=100, p_max_w=300, memory_gb=32)]
    base = EdgeCloudHardware(name="t", nodes=nodes, wan_mbps=50.0)
    models = ("alexnet", "vgg16", "resnet18", "mobilenet_v1")
    stale = 0
    fast = model_tables(models, latency_models, base)
    for scale in (1.0, 0.25, 0.02):
        hw = regime_hardware(base, Regime(name="r", wan_scale=scale, link_fifo=scale < 1))
        tab = model_tables(models, latency_models, hw)
        bw = hw.wan_mbps * 1e6 / 8
        for m in range(len(models)):
            for s in (0, 1):
                lat = _per_frame_latency(tab, nodes, bw, m, s, 2)
                assert lat[tab.arrays["dads_cut"][m, s]] == pytest.approx(lat.min(), rel=1e-9)
                lat_fast_tables = _per_frame_latency(fast, nodes, bw, m, s, 2)
                stale += lat_fast_tables[fast.arrays["dads_cut"][m, s]] > lat_fast_tables.min() * (1 + 1e-9)
    assert stale > 0  # the 50 Mbps cuts are not optimal on the slow WANs
