"""Freshness of the stored result of each experiment, as the current checkout would run it.

``python -m mlsys_repro.common.repro.run_all --status`` (``./reproduce.sh --status``) prints one line per experiment and
exits non-zero unless every one is fresh; the claims report shows the same state beside every verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from omegaconf import OmegaConf

from mlsys_repro.common.repro.config import RunSpec, compose_run, experiments_of
from mlsys_repro.common.repro.freshness import (
    Freshness,
    code_fingerprint,
    data_changed_since,
    data_fingerprint,
    data_paths,
    read_manifest,
    status,
)


def spec_data(spec: RunSpec) -> tuple[str, tuple[str, ...]]:
    """``(fingerprint, paths)`` of the data files the experiment of ``spec`` can read (see
    :func:`mlsys_repro.common.repro.freshness.data_paths`)."""
    cfg = spec.cfg
    nodes = [OmegaConf.to_container(n, resolve=True) for n in (cfg.get("trace"), cfg.get("hardware"), spec.experiment)
             if n is not None]
    nodes += [OmegaConf.to_container(p, resolve=True) for p in spec.policies.values()]
    paths = data_paths(cfg.paths.root, cfg.paper.module, cfg.paths.data_dir, nodes)
    return data_fingerprint(cfg.paths.data_dir, paths), paths


def spec_status(spec: RunSpec, csv_path: Path, profile: str) -> Freshness:
    """Freshness of ``csv_path`` against the run ``spec`` would make now: config, code and data."""
    cfg = spec.cfg
    code, _ = code_fingerprint(cfg.paths.root, cfg.paper.module)
    data, paths = spec_data(spec)
    return status(csv_path, config_hash=spec.config_hash, code_hash=code, profile=profile, data_hash=data,
                  data_since=partial(data_changed_since, cfg.paths.root, data_dir=cfg.paths.data_dir, paths=paths))


def experiment_status(paper: str, name: str, results_dir: Path, profile: str = "default",
                      overrides: Sequence[str] = (), conf_dir: Path | None = None) -> Freshness:
    """Freshness of ``<results_dir>/<paper>/<name>.csv`` against the run ``profile`` would make now."""
    spec = compose_run([f"experiment={paper}/{name}", f"profile={profile}", *overrides], conf_dir=conf_dir)
    return spec_status(spec, Path(results_dir) / paper / f"{name}.csv", profile)


def paper_status(paper: str, results_dir: Path, profile: str = "default",
                 conf_dir: Path | None = None) -> dict[str, Freshness]:
    """``{experiment: Freshness}`` for every experiment of ``paper``."""
    return {e: experiment_status(paper, e, results_dir, profile, conf_dir=conf_dir)
            for e in experiments_of(paper, conf_dir)}


def recorded_status(paper: str, results_dir: Path, root: Path | str, module: str, profile: str = "default",
                    conf_dir: Path | None = None) -> dict[str, Freshness]:
    """``{experiment: Freshness}`` for every experiment of ``paper`` judged without importing its code or composing
    its config (for a paper that a check of other papers only shows): missing, incomplete, profile, a dirty tree and
    the code fingerprint (its sources are read, not imported) as :func:`paper_status` judges them; its config and
    data are taken as each run's manifest records them (only a check of that paper composes them)."""
    code, _ = code_fingerprint(root, module)
    out = {}
    for e in experiments_of(paper, conf_dir):
        csv = Path(results_dir) / paper / f"{e}.csv"
        recorded = (read_manifest(csv) or {}).get("config_hash")
        out[e] = status(csv, config_hash=str(recorded), code_hash=code, profile=profile)
    return out
