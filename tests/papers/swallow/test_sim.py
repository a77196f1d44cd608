"""The jit-compiled simulator: agreement with the literal quantum-by-quantum reference, MADD, FVDF = SEBF without
compression, compression physics, orderings, the greedy back-fill, and invariants on random coflow sets."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mlsys_repro.common.traces import parse_coflow_text
from mlsys_repro.papers.swallow import sim
from mlsys_repro.papers.swallow.flows import MIB, build_flow_table
from tests.papers.swallow.reference import simulate_reference

P = 150  # the FB fabric's port count, so every test shares the experiments' compiled programs
CAP = 2.0**30
MADD_POLICIES = ["fifo", "scf", "ncf", "lcf", "sebf"]


def trace_text(coflows) -> str:
    lines = [f"{P} {len(coflows)}"]
    for i, (arr, maps, reds) in enumerate(coflows):
        red = " ".join(f"{p}:{mb}" for p, mb in reds)
        lines.append(f"{i + 1} {arr} {len(maps)} {' '.join(map(str, maps))} {len(reds)} {red}")
    return "\n".join(lines) + "\n"


@st.composite
def coflow_sets(draw, max_coflows=7, ports=6):
    n = draw(st.integers(2, max_coflows))
    out = []
    for _ in range(n):
        maps = draw(st.lists(st.integers(0, ports - 1), min_size=1, max_size=3, unique=True))
        rp = draw(st.lists(st.integers(0, ports - 1), min_size=1, max_size=3, unique=True))
        reds = [(p, draw(st.integers(1, 60))) for p in rp]
        out.append((draw(st.integers(0, 30000)), maps, reds))
    return build_flow_table(parse_coflow_text(trace_text(out)))


def run(ft, kind, policies=("sebf",), **kw):
    ps = sim.stack_params([sim.params(CAP, policy=p, num_ports=P, **kw) for p in policies])
    return sim.simulate_batch(ft, sim.Static(kind=kind), ps)


SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def flows(coflows):
    return build_flow_table(parse_coflow_text(trace_text(coflows)))


# DARK: coflow 2 has sent exactly 10 MiB (the first queue threshold) when coflow 1 departs at 72 ms; the reference's
# per-quantum sum of 1/3 MiB shares rounded to 10 MiB + 1 ulp and moved it down a queue, the jitted one did not
THRESHOLD_TIE = [(0, [0], [(0, 1), (1, 1), (3, 1)]), (0, [2], [(2, 9)]), (1, [0, 1], [(0, 1), (1, 1), (3, 9)]),
                 (2, [0], [(0, 1)])]


@SLOW
@example(flows(THRESHOLD_TIE))
@given(coflow_sets())
def test_matches_reference_on_random_coflow_sets(ft):
    madd = run(ft, "madd", MADD_POLICIES)
    got = dict(zip(MADD_POLICIES, madd, strict=True))
    got["dark"] = run(ft, "dark")[0]
    got["fair"] = run(ft, "fair")[0]
    for pol, r in got.items():
        ref = simulate_reference(ft, pol)
        np.testing.assert_array_equal(r.cct_ms, ref["finish_ms"] - ref["start_ms"], err_msg=pol)


@SLOW
@given(coflow_sets(), st.sampled_from(["madd", "dark", "fair", "sincronia", "fvdf"]))
def test_invariants_capacity_bytes_termination_determinism(ft, which):
    if which == "fvdf":
        kw = dict(compress="swallow", ratio=0.5, speed_Bps=100e6, cores=1.0)
        a, b = run(ft, "madd", ["fvdf", "fvdf"], **kw)
    else:
        a, b = run(ft, which, ["sebf", "sebf"])
    assert np.all(np.isfinite(a.cct_ms)), "every coflow finishes"
    assert a.peak_port_load <= 1.0 + 1e-9, "no port above capacity"
    np.testing.assert_allclose(a.sent_bytes, ft.cof_bytes, rtol=1e-12)  # all bytes delivered
    np.testing.assert_array_equal(a.cct_ms, b.cct_ms)  # identical inputs, identical results
    np.testing.assert_array_equal(a.wire_bytes, b.wire_bytes)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coflow_sets())
def test_one_configuration_per_core_equals_vmapped_batches(ft):
    """The large-trace path (each configuration alone, unbatched, two worker threads, results in input order)
    gives the small-trace path's results (padded vmapped batches) for every simulator kind: the same finish time
    for every coflow and the same number of events; wire bytes to rounding (the two programs are compiled apart,
    and XLA may fuse the per-event byte sums differently: 1 ulp was seen)."""
    kw = dict(compress="swallow", ratio=0.5, speed_Bps=100e6, cores=1.0)
    jobs = [(sim.Static(kind="madd"), sim.params(CAP, policy="sebf", num_ports=P)),
            (sim.Static(kind="fair"), sim.params(CAP, num_ports=P)),
            (sim.Static(kind="madd"), sim.params(CAP / 10, policy="fvdf", num_ports=P, **kw)),
            (sim.Static(kind="dark"), sim.params(CAP, num_ports=P)),
            (sim.Static(kind="madd"), sim.params(CAP, policy="fifo", num_ports=P))]
    done = []
    batched = sim.simulate_many(ft, jobs)
    alone = sim.simulate_many(ft, jobs, workers=2, batch_below=0, on_result=done.append)
    assert sorted(done) == list(range(len(jobs)))
    for a, b in zip(batched, alone, strict=True):
        np.testing.assert_array_equal(a.finish_ms, b.finish_ms)
        np.testing.assert_allclose(a.wire_bytes, b.wire_bytes, rtol=1e-12, atol=0)
        assert a.events == b.events


@pytest.mark.parametrize("b_mib, want", [(9, [24, 72, 104, 88]), (10, [24, 80, 112, 88])])
def test_dark_queue_threshold_exact_tie_stays(b_mib, want):
    # A: 0->{0,1,3} 1 MiB each; B: 2->2; C: {0,1}->{0,1} 1 MiB per flow, {0,1}->3 5 MiB per flow; D: 0->0 1 MiB.
    # One port moves 1 MiB per 8 ms quantum. A departs at 24 ms (C has 3 MiB sent), B at 8 * b_mib ms.
    # b_mib = 9: at 72 ms C has sent exactly 10 MiB (3 + 2 + 6 x (1/3 + 1/2)): a tie is not "more than the
    #   threshold", so C stays in queue 0 ahead of D: C's two flows into port 3 get half of it each, D the other
    #   half of port 0 and ends at 88 ms (80 ms had C moved down); then C's 0->3 (2 MiB left) has port 0: 104 ms.
    # b_mib = 10: at 80 ms C has sent 10 + 5/6 MiB and moves to queue 1 behind D: D takes port 0 and ends at 88 ms
    #   (96 ms if C had stayed), C's 0->3 (8/3 MiB left) then needs 3 quanta: 112 ms.
    ft = flows([(0, [0], [(0, 1), (1, 1), (3, 1)]), (0, [2], [(2, b_mib)]), (1, [0, 1], [(0, 1), (1, 1), (3, 9)]),
                (2, [0], [(0, 1)])])
    ref = simulate_reference(ft, "dark")
    np.testing.assert_array_equal(ref["finish_ms"] - ref["start_ms"], want)
    np.testing.assert_array_equal(run(ft, "dark")[0].cct_ms, want)


def test_fvdf_without_compression_equals_sebf():
    ft = build_flow_table(parse_coflow_text(trace_text([
        (0, [0, 1], [(2, 40), (3, 10)]), (0, [1], [(2, 30)]), (100, [0, 4], [(3, 7)]), (12000, [2], [(0, 50)]),
        (12000, [3, 0], [(1, 22), (4, 8)]), (30000, [1, 2, 3], [(0, 9), (4, 61)])])))
    sebf = run(ft, "madd", ["sebf"])[0]
    for kw in (dict(compress="none"), dict(compress="swallow", ratio=1.0, speed_Bps=1e9, cores=4.0)):
        fvdf = run(ft, "madd", ["fvdf"], **kw)[0]
        np.testing.assert_array_equal(fvdf.cct_ms, sebf.cct_ms)
        np.testing.assert_array_equal(fvdf.wire_bytes, sebf.wire_bytes)


def _admitted_state(ft, policy):
    with jax.enable_x64(True):
        tr = sim.device_trace(ft)
        p = sim.Params(*(jnp.asarray(x) for x in sim.params(CAP, policy=policy, num_ports=P)))
        s = sim._admit(sim.Static(), tr, sim.init_state(tr, sim.K_MIN), p, P)
        return tr, p, s


def test_madd_finishes_an_isolated_coflow_at_gamma():
    # mappers 0, 1; reducers 2 (30 MB) and 3 (12 MB): flows 15, 15, 6, 6 MB; bottleneck: 30 MB into port 2
    ft = build_flow_table(parse_coflow_text(trace_text([(0, [0, 1], [(2, 30), (3, 12)])])))
    tr, p, s = _admitted_state(ft, "sebf")
    with jax.enable_x64(True):
        order = jnp.argsort(s.rank)
        rate, sf, rf = sim._madd(sim.Static(), tr, s, s.rem, p.port_bps, P, order, 1)
        gamma = 30 * MIB * 8 / CAP  # seconds
        a = np.asarray(s.alive)
        np.testing.assert_allclose(np.asarray(s.rem)[a] * 8 / np.asarray(rate)[a], gamma, rtol=1e-12)
        assert float(rf[2]) == pytest.approx(0.0, abs=1e-3)  # the bottleneck is saturated
    r = run(ft, "madd", ["sebf"])[0]
    assert r.cct_ms[0] == np.ceil(gamma * 1024 / 8 - 1e-9) * 8  # finishes at the end of the quantum holding Gamma


@pytest.mark.parametrize("policy, key", [
    ("sebf", lambda ft: ft.cof_alpha), ("fifo", lambda ft: np.zeros(ft.num_coflows)),
    ("scf", lambda ft: ft.cof_scf_key), ("ncf", lambda ft: ft.cof_ncf_key), ("lcf", lambda ft: ft.cof_orig_bytes)])
def test_orderings_obey_their_definitions(policy, key):
    # all arrive in the first epoch: the priority list is the stable sort by the policy's key (ties: arrival)
    cof = [(0, [0], [(1, 50)]), (5, [2, 3], [(1, 10)]), (9, [0, 1, 2], [(4, 90)]), (20, [5], [(2, 10)]),
           (30, [1, 4], [(0, 3), (2, 3)]), (40, [3], [(5, 10)])]
    ft = build_flow_table(parse_coflow_text(trace_text(cof)))
    _, _, s = _admitted_state(ft, policy)
    rank = np.asarray(s.rank)[: ft.num_coflows]
    assert np.argsort(rank).tolist() == np.argsort(key(ft), kind="stable").tolist()


def test_compression_physics_single_flow():
    ft = build_flow_table(parse_coflow_text(trace_text([(0, [0], [(1, 100)])])))
    raw = run(ft, "madd", ["sebf"])[0]
    assert raw.cct_ms[0] == 100 * 8  # 1 MiB per 8 ms quantum at 2**30 bit/s
    fast = run(ft, "madd", ["fvdf"], compress="swallow", ratio=0.5, speed_Bps=1e12, cores=1.0)[0]
    assert fast.cct_ms[0] == 50 * 8  # CPU to spare: every byte compressed, link carries half
    assert fast.wire_bytes[0] == pytest.approx(50 * MIB)
    # CPU at half the link rate: Swallow compresses what it can (g = 1.25), always-on is CPU-bound (g = 0.5)
    half = dict(ratio=0.5, speed_Bps=CAP / 8 / 2, cores=1.0)
    sw = run(ft, "madd", ["fvdf"], compress="swallow", **half)[0]
    al = run(ft, "madd", ["sebf"], compress="always", **half)[0]
    assert sw.cct_ms[0] == 80 * 8 and al.cct_ms[0] == 200 * 8
    assert sw.wire_bytes[0] == pytest.approx(100 * MIB * 0.8)
    assert al.wire_bytes[0] == pytest.approx(100 * MIB * 0.5)  # always-on sends every byte compressed
    # no free CPU: every compressor time-shares CPU_FLOOR of the cores. Always-on is bound by it (5 % of 1 MiB per
    # quantum); Swallow compresses what the floor allows and sends the rest raw (g = 1 + 0.5 * 0.05 = 1.025)
    slow = dict(ratio=0.5, speed_Bps=CAP / 8, cores=1.0, cpu_free=np.zeros((sim.CPU_SAMPLES, P)))
    stalled = run(ft, "madd", ["sebf"], compress="always", **slow)[0]
    assert sim.CPU_FLOOR == 0.05 and stalled.cct_ms[0] == 2000 * 8
    assert stalled.wire_bytes[0] == pytest.approx(100 * MIB * 0.5)
    floor = run(ft, "madd", ["fvdf"], compress="swallow", **slow)[0]
    assert floor.cct_ms[0] == np.ceil(100 / 1.025) * 8


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 1.0), st.floats(0.0, 1.0), st.floats(1e6, 1e10), st.floats(1e6, 1e10))
def test_swallow_never_disposes_slower_than_always_on(ratio, cpu, speed, load):
    """Same CPU allowance for both (the floor included): compress-what-you-can is at least as fast per host."""
    with jax.enable_x64(True):
        p = {m: sim.params(CAP, policy="fvdf", compress=m, ratio=ratio, speed_Bps=speed, cores=2.0, num_ports=1)
             for m in ("swallow", "always")}
        g = {m: float(sim._speedup(sim.Static(), q, jnp.asarray([cpu]), jnp.asarray([load]))[0]) for m, q in p.items()}
    assert g["swallow"] >= g["always"] * (1 - 1e-12) and g["swallow"] >= 1.0


@SLOW
@given(coflow_sets())
def test_fvdf_with_cpu_to_spare_and_an_exact_forecast_is_always_on_in_sebf_order(ft):
    """Plentiful CPU, exact forecast: FVDF disposes like always-on compression and orders like SEBF, so every
    coflow finishes exactly when always-on compression (SEBF order) finishes it: FVDF is never worse."""
    rng = np.random.default_rng(0)
    cpu = rng.uniform(0.5, 1.0, (sim.CPU_SAMPLES, P))
    kw = dict(ratio=0.5, speed_Bps=CAP, cores=8.0, cpu_free=cpu, cpu_pred=cpu)
    fvdf = run(ft, "madd", ["fvdf"], compress="swallow", **kw)[0]
    always = run(ft, "madd", ["sebf"], compress="always", **kw)[0]
    np.testing.assert_array_equal(fvdf.cct_ms, always.cct_ms)


def test_greedy_fill_equals_the_sequential_pass():
    rng = np.random.default_rng(3)
    K = sim.K_MIN
    n = 300
    src, dst = rng.integers(0, 8, n), rng.integers(0, 8, n)
    order = rng.permutation(n)
    sf0 = rng.choice([0.0, 5.0, 10.0, 20.0], P)
    rf0 = rng.choice([0.0, 7.0, 10.0], P)
    # sequential reference
    sf, rf, want = sf0.copy(), rf0.copy(), np.zeros(n)
    for i in np.argsort(order):
        x = min(sf[src[i]], rf[dst[i]])
        x = x if x > 1e-3 else 0.0
        want[i] += x
        sf[src[i]] -= x
        rf[dst[i]] -= x
    with jax.enable_x64(True):
        pad = lambda x, fill=0: jnp.asarray(np.concatenate([x, np.full(K - n, fill, x.dtype)]))
        tr = sim.device_trace(build_flow_table(parse_coflow_text(trace_text([(0, [0], [(1, 1)])]))))
        s = sim.init_state(tr, K)._replace(src=pad(src.astype(np.int32)), dst=pad(dst.astype(np.int32)),
                                           alive=pad(np.ones(n, bool), False), gid=pad(np.arange(n, dtype=np.int32)))
        rate, sf_got, rf_got = sim._greedy_fill(sim.Static(), s, jnp.zeros(K), jnp.asarray(sf0), jnp.asarray(rf0),
                                               pad(order.astype(np.int64)), P)
    np.testing.assert_allclose(np.asarray(rate)[:n], want)
    np.testing.assert_allclose(np.asarray(sf_got), sf)


def test_bssi_orders_one_bottleneck_smallest_first():
    ft = build_flow_table(parse_coflow_text(trace_text([(0, [0], [(1, 30)]), (0, [0], [(2, 10)]),
                                                       (0, [0], [(3, 20)])])))
    tr, p, s = _admitted_state(ft, "sebf")
    with jax.enable_x64(True):
        rank = np.asarray(sim._bssi_rank(tr, s, P))[:3]
    assert rank.tolist() == [2.0, 0.0, 1.0]


def test_bad_params_are_rejected():
    with pytest.raises(ValueError):
        sim.params(0.0)
    with pytest.raises(ValueError):
        sim.params(CAP, policy="nope")
    with pytest.raises(ValueError):
        sim.params(CAP, compress="swallow", ratio=0.5)  # no CPU speed
    with pytest.raises(ValueError):
        sim.params(CAP, ratio=1.5)
    with pytest.raises(ValueError):
        sim.Static(kind="nope")
    with pytest.raises(ValueError):
        sim.Static(epoch_ms=10.0, quantum_ms=8.0)


def test_per_coflow_compressibility_orders_fvdf_and_sets_wire_bytes():
    """Two 100 MiB coflows share sender port 0; only coflow 1's payload compresses (r = 0.5). FVDF sends the one
    with less expected wire volume first; with one ratio for both it keeps arrival order."""
    ft = flows([(0, [0], [(1, 100)]), (0, [0], [(2, 100)])])
    plenty = dict(speed_Bps=1e12, cores=1.0)
    per = run(ft, "madd", ["fvdf"], compress="swallow", ratio=np.array([1.0, 0.5]), **plenty)[0]
    assert per.cct_ms.tolist() == [150 * 8, 50 * 8]  # 50 MiB on the wire first, then 100 MiB raw
    assert per.wire_bytes.tolist() == pytest.approx([100 * MIB, 50 * MIB])
    same = run(ft, "madd", ["fvdf"], compress="swallow", ratio=0.5, **plenty)[0]
    assert same.cct_ms.tolist() == [50 * 8, 100 * 8]
    with pytest.raises(ValueError, match="ratio"):
        sim.params(CAP, compress="swallow", ratio=np.array([0.5, 0.0]), speed_Bps=1e9, cores=1.0)
