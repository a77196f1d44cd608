"""The benchmark harness: first call separate from repeats, min/median of the repeats, the config it builds from."""

from __future__ import annotations

import pytest

from mlsys_repro.common.repro import bench


def test_time_it_separates_the_first_call_and_takes_min_and_median(monkeypatch):
    ticks = iter([0.0, 5.0,   10.0, 13.0,   20.0, 21.0,   30.0, 32.0])  # first call 5 s, then 3, 1, 2
    monkeypatch.setattr(bench, "_clock", lambda: next(ticks))
    calls = []
    t = bench.time_it("x", lambda: calls.append(1), repeats=3, per="step")
    assert len(calls) == 4
    assert (t.first_s, t.min_s, t.median_s, t.repeats) == (5.0, 1.0, 2.0, 3)
    assert "first 5.000 s" in t.line() and "per step" in t.line() and "(load " in t.line()


def test_time_it_waits_for_jax_outputs():
    import jax.numpy as jnp

    t = bench.time_it("matmul", lambda: jnp.ones((64, 64)) @ jnp.ones((64, 64)), repeats=2)
    assert t.min_s <= t.median_s and t.first_s > 0


def test_time_it_rejects_zero_repeats():
    with pytest.raises(ValueError, match="repeats"):
        bench.time_it("x", lambda: None, repeats=0)


def test_bench_context_is_the_experiments_own_config():
    ctx = bench.bench_context("swallow/headline", profile="smoke")
    assert (ctx.paper, ctx.experiment, ctx.profile) == ("swallow", "headline", "smoke")
    assert ctx.params.max_coflows == 8  # the smoke profile's value, as the experiment gets it


def test_machine_line_names_cpus_and_load():
    line = bench.machine_line()
    assert line.startswith("machine: ") and "CPUs" in line and "load" in line and "jax" in line
