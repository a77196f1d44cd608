"""Progress lines: the ETA leaves out the first step, which includes XLA compilation."""

from __future__ import annotations

import io

import pytest

from mlsys_repro.common.repro import progress as progress_mod
from mlsys_repro.common.repro.progress import Progress


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    return now


def test_eta_excludes_the_compile_of_the_first_step(clock):
    out = io.StringIO()
    p = Progress("toy/x", stream=out, min_interval=0.0)
    p.start(10, "runs")
    clock[0] += 92.0  # first step: 90 s of compiling + 2 s of work
    p.update()
    clock[0] += 1.0  # every later step: 1 s
    p.update()
    clock[0] += 1.0
    p.update()
    lines = out.getvalue().splitlines()
    assert "1/10 runs (10%) elapsed 1:32 eta ? (first step compiled)" in lines[0]
    assert "2/10 runs (20%) elapsed 1:33 eta 0:08" in lines[1]  # 8 left at 1 s each, not 8 x 46.5 s
    assert "3/10 runs (30%) elapsed 1:34 eta 0:07" in lines[2]


def test_a_single_step_job_ends_with_eta_zero(clock):
    out = io.StringIO()
    p = Progress("toy/x", stream=out, min_interval=0.0)
    p.start(1)
    clock[0] += 5.0
    p.update(1, "done")
    assert out.getvalue().strip().endswith("1/1 steps (100%) elapsed 0:05 eta 0:00  done")
