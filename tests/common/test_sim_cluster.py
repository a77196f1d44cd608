"""mlsys_repro.common.sim.cluster: placement known answers, capacity invariants, speed interpolation, whole
simulations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.sim import cluster as C

CPU_LEVELS = [1.0, 3.0, 6.0]
MEM_LEVELS = [20.0, 62.5, 125.0]


def small_cluster(n=2, gpus=4, cpus=12.0, mem=250.0):
    return C.ClusterSpec.uniform(1, n, gpus, cpus, mem).arrays()


def flat_speed(m=2, penalty=1.0):
    t = np.ones((m, 3, 3), np.float32)
    return C.speed_model(t, CPU_LEVELS, MEM_LEVELS, np.full(m, penalty))


# ---------------------------------------------------------------------------------------------- spec


@pytest.mark.parametrize("cap, rack, msg", [
    (np.ones((2, 2)), np.zeros(2), r"\[servers, 3\]"),
    (np.ones((2, 3)), np.zeros(3), "one id per server"),
    (np.array([[1, 0, 1], [1, 1, 1]]), np.zeros(2), "positive"),
    (np.array([[1.5, 1, 1]]), np.zeros(1), "integers"),
])
def test_cluster_spec_rejects_bad_capacity(cap, rack, msg):
    with pytest.raises(ValueError, match=msg):
        C.ClusterSpec(cap, rack)


def test_heterogeneous_cluster_marks_absent_gpus():
    spec = C.ClusterSpec.from_servers([2, 4], [8, 16], [64, 128])
    assert spec.max_gpus == 4 and spec.total_gpus == 6
    occ = C.empty_occupancy(spec.arrays())
    assert (np.asarray(occ.owner) == C.ABSENT).sum() == 2
    np.testing.assert_allclose(np.asarray(C.server_free(spec.arrays(), occ)), [[2, 8, 64], [4, 16, 128]])


# ---------------------------------------------------------------------------------------------- placement


def test_fill_plan_consolidates_on_the_fullest_server_that_fits():
    free = jnp.array([[4, 12, 250], [2, 6, 125], [3, 9, 200]], jnp.float32)
    take, ok = C.fill_plan(free, 2, jnp.full(3, 3.0), jnp.full(3, 62.5), True)
    assert bool(ok) and np.asarray(take).tolist() == [0, 2, 0]


def test_fill_plan_spreads_fewest_free_first_and_respects_cpu():
    free = jnp.array([[4, 12, 250], [1, 3, 62.5], [2, 3, 125]], jnp.float32)
    # 4 GPUs at 3 CPUs each: server 1 hosts 1, server 2 only 1 (CPU-bound), server 0 the remaining 2
    take, ok = C.fill_plan(free, 4, jnp.full(3, 3.0), jnp.full(3, 62.5), False)
    assert bool(ok) and np.asarray(take).tolist() == [2, 1, 1]
    _, ok = C.fill_plan(free, 7, jnp.full(3, 3.0), jnp.full(3, 62.5), True)
    assert not bool(ok)


def test_assign_usage_release_round_trip():
    cl = small_cluster()
    occ = C.assign(C.empty_occupancy(cl), 3, jnp.array([2, 1]), jnp.array([3.0, 4.0]), jnp.array([60.0, 50.0]))
    u = C.job_usage(occ, 5)
    assert int(u.gpus[3]) == 3 and int(u.servers[3]) == 2
    assert float(u.cpu[3]) == pytest.approx(10.0) and float(u.mem[3]) == pytest.approx(170.0)
    free = np.asarray(C.server_free(cl, occ))
    np.testing.assert_allclose(free, [[2, 6, 130], [3, 8, 200]])
    occ = C.release(occ, jnp.arange(5) == 3)
    np.testing.assert_allclose(np.asarray(C.server_free(cl, occ)), [[4, 12, 250], [4, 12, 250]])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0.5, 6.0), st.floats(10.0, 120.0)), min_size=1, max_size=6),
       st.integers(0, 10_000))
def test_top_up_never_exceeds_capacity_and_only_grows(jobs, seed):
    cl = small_cluster()
    occ = C.empty_occupancy(cl)
    for slot, (srv, cpu, mem) in enumerate(jobs):
        take = jnp.zeros(2, jnp.int32).at[srv % 2].set(1)
        free = C.server_free(cl, occ)[srv % 2]
        if free[0] >= 1 and free[1] >= cpu and free[2] >= mem:
            occ = C.assign(occ, slot, take, jnp.full(2, cpu), jnp.full(2, mem))
    rng = np.random.default_rng(seed)
    tgt_c = jnp.asarray(rng.uniform(0, 12, size=occ.cpu.shape), jnp.float32)
    tgt_m = jnp.asarray(rng.uniform(0, 250, size=occ.mem.shape), jnp.float32)
    grown = C.top_up(cl, occ, tgt_c, tgt_m, jnp.asarray(rng.permutation(8), jnp.int32))
    assert float(C.overcommit(cl, grown)) <= 1e-3
    assert np.all(np.asarray(grown.cpu) >= np.asarray(occ.cpu) - 1e-6)
    held = np.asarray(occ.owner) >= 0
    assert np.all(np.asarray(grown.cpu)[held] <= np.maximum(np.asarray(tgt_c)[held], np.asarray(occ.cpu)[held]) + 1e-4)


def test_top_up_serves_lower_rank_first():
    cl = small_cluster(n=1, gpus=2, cpus=8.0)
    occ = C.assign(C.empty_occupancy(cl), 0, jnp.array([1]), jnp.array([1.0]), jnp.array([10.0]))
    occ = C.assign(occ, 1, jnp.array([1]), jnp.array([1.0]), jnp.array([10.0]))
    tgt = jnp.full(occ.cpu.shape, 6.0)  # 6 free CPUs, both want +5
    grown = C.top_up(cl, occ, tgt, occ.mem, jnp.array([1, 0], jnp.int32))  # slot 1 first
    u = C.job_usage(grown, 2)
    assert float(u.cpu[1]) == pytest.approx(6.0) and float(u.cpu[0]) == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------- speed


def test_profile_interpolation_known_points_and_clamping():
    t = np.array([[[0.1, 1.0, 1.0], [0.3, 1.0, 2.0], [0.5, 2.0, 3.0]]], np.float32)
    sm = C.speed_model(t, CPU_LEVELS, MEM_LEVELS, [0.5])
    m = jnp.zeros(5, jnp.int32)
    got = C.profile_tput(sm, m, jnp.array([3.0, 6.0, 4.5, 100.0, 0.1]), jnp.array([62.5, 125.0, 62.5, 500.0, 1.0]))
    np.testing.assert_allclose(np.asarray(got), [1.0, 3.0, 1.5, 3.0, 0.1], rtol=1e-6)


def test_speed_applies_placement_penalty_only_when_spread():
    sm = flat_speed(penalty=0.5)
    u = C.JobUsage(jnp.array([2, 2, 0]), jnp.array([6.0, 6.0, 0.0]), jnp.array([125.0, 125.0, 0.0]),
                   jnp.array([1, 2, 0]))
    np.testing.assert_allclose(np.asarray(C.job_speed(sm, jnp.zeros(3, jnp.int32), u)), [1.0, 0.5, 0.0])


@pytest.mark.parametrize("bad", [
    dict(tput=np.ones((1, 2, 3))), dict(penalty=[1.5]), dict(cpu_levels=[3.0, 1.0, 6.0]),
    dict(tput=-np.ones((1, 3, 3))),
])
def test_speed_model_validation(bad):
    kw = dict(tput=np.ones((1, 3, 3)), cpu_levels=CPU_LEVELS, mem_levels=MEM_LEVELS, penalty=[1.0])
    kw.update(bad)
    with pytest.raises(ValueError):
        C.speed_model(**kw)


# ---------------------------------------------------------------------------------------------- keys


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=2, max_size=40))
def test_float_key_is_monotone(xs):
    x = np.asarray(xs, np.float32)
    k = np.asarray(C.float_key(jnp.asarray(x), 20))
    o = np.argsort(x, kind="stable")
    assert np.all(np.diff(k[o]) >= 0)
    assert k.min() >= 0 and k.max() < 2 ** 20


def test_priority_order_sorts_and_puts_ineligible_last():
    prio = C.int_key(jnp.array([5, 1, 3, 0]), C.prio_bits(4))
    order, valid = C.priority_order(C.pack_keys(prio, jnp.array([True, True, True, False])))
    assert np.asarray(order)[:3].tolist() == [1, 2, 0] and np.asarray(valid).tolist() == [True, True, True, False]


# ---------------------------------------------------------------------------------------------- simulation


def fifo_fair(cl, jobs):
    """A minimal FIFO policy for the tests: place pending jobs in slot order at fair share."""
    fair = cl.fair_per_gpu

    def schedule(state):
        def body(i, s):
            ok_pending = s.status[i] == C.PENDING
            g = jobs.gpus[jnp.maximum(s.slot_job[i], 0)]
            take, ok = C.fill_plan(C.server_free(cl, s.occ), g, fair[:, 0], fair[:, 1], g > 1)
            return C.place(s, jobs, i, take, fair[:, 0], fair[:, 1], ok & ok_pending)

        return jax.lax.fori_loop(0, state.status.shape[0], body, state)

    return schedule


def run(cl, sm, jobs, **kw):
    cfg = C.SimConfig(round_s=100.0, **kw)
    return jax.jit(lambda j: C.simulate(cl, sm, j, cfg, fifo_fair(cl, j)))(jobs)


def test_two_jobs_on_one_gpu_known_finish_times():
    cl = C.ClusterSpec.uniform(1, 1, 1, 3.0, 62.5).arrays()
    jobs = C.make_jobs([0.0, 50.0], [250.0, 120.0], [1, 1], [0, 0])
    st_ = run(cl, flat_speed(), jobs)
    # job 0 runs 0..250; job 1 arrives at 50, admitted at the 100 s boundary, waits until the 300 s boundary
    np.testing.assert_allclose(np.asarray(st_.finish), [250.0, 420.0])
    np.testing.assert_allclose(np.asarray(st_.start), [0.0, 300.0])
    r = C.summarize(cl, jobs, st_)
    assert r.finished and r.makespan == pytest.approx(420.0)
    assert r.util["gpu"] == pytest.approx(370.0 / 420.0, rel=1e-5)


def test_idle_gaps_are_jumped_not_simulated():
    cl = small_cluster()
    jobs = C.make_jobs([0.0, 1e6], [10.0, 10.0], [1, 1], [0, 0])
    st_ = run(cl, flat_speed(), jobs)
    assert np.asarray(st_.finish).tolist() == [10.0, 1e6 + 10.0]
    assert int(st_.stats.rounds) == 2  # one round per job; the 10^4 idle rounds in between were jumped


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000))
def test_random_workloads_complete_within_capacity_and_deterministically(seed):
    rng = np.random.default_rng(seed)
    n = 12
    cl = small_cluster(n=3)
    arr = np.sort(rng.uniform(0, 2000, n))
    jobs = C.make_jobs(arr, rng.uniform(50, 3000, n), rng.choice([1, 2, 4, 8], n), rng.integers(0, 2, n))
    a = run(cl, flat_speed(), jobs, num_slots=5)  # fewer slots than jobs: admission waits for free slots
    b = run(cl, flat_speed(), jobs, num_slots=5)
    fin = np.asarray(a.finish)
    assert np.all(fin >= arr + np.asarray(jobs.work) - 1e-2), "a job finished faster than its fair-share work"
    assert float(a.stats.max_overcommit) <= 1e-3
    assert np.array_equal(fin, np.asarray(b.finish))


def test_make_jobs_rejects_bad_rows():
    with pytest.raises(ValueError, match="sorted"):
        C.make_jobs([5.0, 1.0], [1, 1], [1, 1], [0, 0])
    with pytest.raises(ValueError, match="work > 0"):
        C.make_jobs([0.0], [0.0], [1], [0])
    with pytest.raises(ValueError, match="work > 0"):
        C.make_jobs([0.0], [5.0], [0], [0])
    with pytest.raises(ValueError, match="pad_to"):
        C.make_jobs([0.0, 1.0], [1, 1], [1, 1], [0, 0], pad_to=1)
