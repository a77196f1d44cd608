"""Baseline schedulers: known answers on hand-made jobs, Synergy's tune/greedy semantics, and properties of every
heuristic on random workloads (all jobs complete, capacity never exceeded, deterministic)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlsys_repro.common.sim.cluster import (
    PENDING,
    RUNNING,
    SimConfig,
    assign,
    empty_occupancy,
    init_state,
    job_usage,
    make_jobs,
    server_free,
    simulate,
    summarize,
)
from mlsys_repro.papers.maifs.baselines import (
    ALLOCATIONS,
    ORDERS,
    Heuristic,
    allocate,
    best_demand,
    make_schedule,
    reclaim_from_peers,
    skip_greedy,
    tiresias_queue,
)

CFG = SimConfig(round_s=100.0)


@functools.partial(jax.jit, static_argnames=())
def _sim(hp, cl, sm, md, jobs):
    return simulate(cl, sm, jobs, CFG, make_schedule(hp, cl, md, jobs, lookahead=8))


def sim(h, tiny, jobs):
    _, cl, sm, md = tiny
    return _sim(h.params(), cl, sm, md, jobs)


def test_heuristic_config_validation():
    with pytest.raises(ValueError, match="order"):
        Heuristic(order="lifo")
    with pytest.raises(ValueError, match="allocation"):
        Heuristic(allocation="lavish")
    with pytest.raises(ValueError, match="increasing"):
        Heuristic(tiresias_thresholds_gpu_h=(10.0, 1.0))


def test_skip_greedy_takes_prefix_then_backfills():
    order = jnp.array([0, 1, 2, 3, 4])
    gpus = jnp.array([4, 3, 4, 1, 1])
    sel = skip_greedy(order, jnp.ones(5, bool), gpus, 8, lookahead=4)
    # 4 + 3 fit (7), the next 4 does not, then a 1 fills the budget
    assert np.asarray(sel).tolist() == [True, True, False, True, False]


def test_tiresias_queues_on_attained_gpu_time():
    q = tiresias_queue(jnp.array([0.0, 3599.0, 3600.0, 36000.0, 1e9]), jnp.array([3600.0, 36000.0, jnp.inf]))
    assert np.asarray(q).tolist() == [0, 0, 1, 2, 2]


def test_best_demand_is_capped_to_one_server(tiny):
    _, cl, _, md = tiny
    c, m = best_demand(cl, md, 0, 4)  # 4 GPUs x 6 CPUs > 12 CPUs: capped at 12 / 4
    assert np.asarray(c).tolist() == [3.0, 3.0]
    c, _ = best_demand(cl, md, 0, 8)  # wider than a server: fair share
    assert np.asarray(c).tolist() == [3.0, 3.0]
    c, _ = best_demand(cl, md, 0, 1)
    assert np.asarray(c).tolist() == [6.0, 6.0]


def test_fifo_runs_in_arrival_order_and_srtf_runs_short_first(tiny):
    # 8-GPU jobs span both servers (speed 0.8 for model 1); 100 s rounds. FIFO keeps arrival order; SRTF
    # preempts job 0 (220 s of work left at t=100) for job 2 (200 s), then runs job 0 before job 1
    jobs = make_jobs([0.0, 10.0, 20.0], [300.0, 1000.0, 200.0], [8, 8, 8], [1, 1, 1])
    fifo = np.asarray(sim(Heuristic("fifo", "fair"), tiny, jobs).finish)
    srtf = np.asarray(sim(Heuristic("srtf", "fair"), tiny, jobs).finish)
    np.testing.assert_allclose(fifo, [375.0, 1650.0, 1950.0])
    np.testing.assert_allclose(srtf, [675.0, 1950.0, 350.0])


def test_las_preempts_the_job_with_most_service(tiny):
    jobs = make_jobs([0.0, 250.0], [800.0, 80.0], [4, 4], [1, 1])  # 4 GPUs: one server, no penalty
    jobs = jobs._replace(gpus=jnp.array([8, 8]))  # both need the whole cluster (spread: speed 0.8)
    st = sim(Heuristic("las", "fair"), tiny, jobs)
    fin = np.asarray(st.finish)
    # job 1 arrives at 250, is admitted at 300, preempts job 0 (2400 GPU-s attained) and runs 100 s
    assert fin[1] == pytest.approx(400.0) and fin[0] == pytest.approx(1100.0)
    assert int(st.stats.preemptions) == 1


def _holding(tiny, cpu_held):
    """Slot 0 runs a 2-GPU job (one GPU per server, ``cpu_held`` CPUs each); slot 1 is a pending 1-GPU job of the
    CPU-sensitive model (best demand 6 CPUs/GPU; fair share is 3)."""
    _, cl, _, _ = tiny
    jobs = make_jobs([0.0, 0.0], [1e4, 600.0], [2, 1], [0, 0])
    st = init_state(cl, jobs, CFG)
    occ = assign(empty_occupancy(cl), 0, jnp.array([1, 1]), jnp.full(2, cpu_held), jnp.full(2, 62.5))
    return jobs, st._replace(status=jnp.array([RUNNING, PENDING]), slot_job=jnp.array([0, 1]), occ=occ)


def test_greedy_waits_where_tune_falls_back_to_fair_share(tiny):
    _, cl, _, md = tiny
    jobs, st = _holding(tiny, 9.0)  # 3 CPUs free per server: best demand (6) does not fit, fair share (3) does
    g = allocate(Heuristic("fifo", "greedy").params(), cl, md, jobs, st, 1)
    assert int(g.status[1]) == PENDING
    t = allocate(Heuristic("fifo", "tune").params(), cl, md, jobs, st, 1)
    assert int(t.status[1]) == RUNNING
    assert float(job_usage(t.occ, 2).cpu[1]) == pytest.approx(3.0)


def test_tune_reclaims_cpus_held_above_fair_share(tiny):
    _, cl, _, md = tiny
    jobs, st = _holding(tiny, 12.0)  # the peer holds every CPU: only reclaiming makes room
    f = allocate(Heuristic("fifo", "fair").params(), cl, md, jobs, st, 1)
    assert int(f.status[1]) == PENDING
    r = reclaim_from_peers(st, cl, 1, jnp.full(2, 3.0), jnp.full(2, 62.5))
    assert float(server_free(cl, r.occ)[:, 1].max()) == pytest.approx(9.0)  # peer reset to 3 CPUs per GPU
    t = allocate(Heuristic("fifo", "tune").params(), cl, md, jobs, st, 1)
    assert int(t.status[1]) == RUNNING and int(t.status[0]) == RUNNING  # the peer keeps its GPUs
    u = job_usage(t.occ, 2)
    assert float(u.cpu[1]) == pytest.approx(3.0) and float(u.cpu[0]) < 24.0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.sampled_from(ORDERS), st.sampled_from(ALLOCATIONS), st.booleans())
def test_every_heuristic_completes_within_capacity_deterministically(tiny, seed, order, alloc, preempt):
    rng = np.random.default_rng(seed)
    n = 10
    arr = np.sort(rng.uniform(0, 1500, n))
    jobs = make_jobs(arr, rng.uniform(50, 2000, n), rng.choice([1, 2, 4, 8], n), rng.integers(0, 2, n))
    h = Heuristic(order, alloc, preempt)
    a = sim(h, tiny, jobs)
    b = sim(h, tiny, jobs)
    r = summarize(tiny[1], jobs, a)
    assert r.finished, "every admitted job must complete"
    assert r.counters["max_overcommit"] <= 1e-3, "a server went over capacity"
    assert np.array_equal(np.asarray(a.finish), np.asarray(b.finish))
    assert np.all(r.jct > 0)
