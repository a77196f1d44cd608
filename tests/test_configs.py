"""Every experiment config composes under every profile; every paper's claims.yaml is valid and points at
experiments that exist; and every experiment runs end to end on the smoke profile with a valid result frame."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.claims import load_claims
from mlsys_repro.common.repro.claims.evaluate import evaluate
from mlsys_repro.common.repro.config import (
    CONF_DIR,
    build_context,
    compose,
    compose_run,
    experiments_of,
    papers_in_conf,
)
from mlsys_repro.common.repro.results import to_frame

PAPERS = papers_in_conf()
EXPERIMENTS = [(p, e) for p in PAPERS for e in experiments_of(p)]


def test_conf_tree_has_the_groups():
    for group in ("paper", "trace", "hardware", "policy", "profile", "experiment", "paths"):
        assert (CONF_DIR / group).is_dir(), group
    assert compose([]).profile.name == "default"


@pytest.mark.parametrize("profile", ["smoke", "default", "full"])
@pytest.mark.parametrize("paper, exp", EXPERIMENTS, ids=[f"{p}/{e}" for p, e in EXPERIMENTS])
def test_experiment_composes(paper, exp, profile):
    spec = compose_run([f"experiment={paper}/{exp}", f"profile={profile}"])
    ctx = build_context(spec)
    assert ctx.paper == paper and ctx.experiment == exp and len(spec.config_hash) == 16
    assert ctx.num_seeds >= 1


@pytest.mark.parametrize("paper", PAPERS)
def test_paper_package_and_claims(paper):
    pcfg = compose([f"paper={paper}"]).paper
    mod = importlib.import_module(pcfg.module)
    pkg = Path(mod.__file__).parent
    assert (pkg / "README.md").is_file(), f"{paper} has no README.md"
    _, claims = load_claims(pkg / pcfg.claims)
    known = set(experiments_of(paper))
    for c in claims:
        assert c.experiment in known, f"claim {c.id} refers to unknown experiment {c.experiment}"


# smoke runs that another test already makes end to end through the runner (CI time): tests/test_determinism.py
# runs these two experiments' smoke profile twice and compares the result tables
RUN_ELSEWHERE = {("greenplace", "pareto"), ("petrel", "headline"),
                 ("labelavg", "attack")}  # tests/papers/labelavg/test_experiments.py runs its smoke profile
SMOKE_RUNS = [pe for pe in EXPERIMENTS if pe not in RUN_ELSEWHERE]
# a paper's smoke runs share one RunCache, as the experiments of one run_all process do (CI time: loaded traces and
# tasks, trained predictors and agents, simulated configurations; every entry is keyed by what built it), one paper
# at a time; for the papers whose smoke runs were checked with it (#51), the others get a fresh cache per run
SHARED_RUN_CACHE = {"canary", "fedfoa", "greenplace", "labelavg", "maifs", "petrel", "swallow"}
_run_cache: dict[str, RunCache] = {}


def _cache_for(paper: str) -> RunCache:
    if paper not in SHARED_RUN_CACHE:
        return RunCache()
    if paper not in _run_cache:
        _run_cache.clear()
        _run_cache[paper] = RunCache()
    return _run_cache[paper]


# one xdist worker runs a paper's smoke runs one after the other (CI time): the experiments of a paper compile many
# of the same programs, which the persistent compile cache (tests/conftest.py) then serves instead of two workers
# compiling them side by side
@pytest.mark.parametrize("paper, exp", [pytest.param(p, e, marks=pytest.mark.xdist_group(p), id=f"{p}/{e}")
                                        for p, e in SMOKE_RUNS])
def test_experiment_smoke_run(paper, exp, tmp_path):
    spec = compose_run([f"experiment={paper}/{exp}", "profile=smoke", f"paths.checkpoint_dir={tmp_path / 'ckpt'}"])
    ctx = build_context(spec, out_dir=tmp_path, cache=_cache_for(paper))
    rows = spec.fn(ctx)
    df = to_frame(rows, trace=getattr(ctx.trace, "name", "none"), hardware=getattr(ctx.hardware, "name", "none"))
    assert len(df) > 0
    # every claim that sweeps a condition (``over``) finds that column in what the code writes (no stale selector);
    # ``where``/policy filters may name columns only some profiles' rows carry (e.g. canary's ``reference``)
    pcfg = compose([f"paper={paper}"]).paper
    _, claims = load_claims(Path(importlib.import_module(pcfg.module).__file__).parent / pcfg.claims)
    for c in (c for c in claims if c.experiment == exp and not c.skip):
        v = evaluate(c, df, paper)
        assert "'over' column" not in v.note, f"{c.id}: {v.note}"
