"""Freshness of the stored result of each experiment, as the current checkout would run it.

``python -m mlsys_repro.common.repro.run_all --status`` (``./reproduce.sh --status``) prints one line per experiment and
exits non-zero unless every one is fresh; the claims report shows the same state beside every verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mlsys_repro.common.repro.config import compose_run, experiments_of
from mlsys_repro.common.repro.freshness import Freshness, code_fingerprint, status


def experiment_status(paper: str, name: str, results_dir: Path, profile: str = "default",
                      overrides: Sequence[str] = (), conf_dir: Path | None = None) -> Freshness:
    """Freshness of ``<results_dir>/<paper>/<name>.csv`` against the run ``profile`` would make now."""
    spec = compose_run([f"experiment={paper}/{name}", f"profile={profile}", *overrides], conf_dir=conf_dir)
    code, _ = code_fingerprint(spec.cfg.paths.root, spec.cfg.paper.module)
    return status(Path(results_dir) / paper / f"{name}.csv", config_hash=spec.config_hash, code_hash=code,
                  profile=profile)


def paper_status(paper: str, results_dir: Path, profile: str = "default",
                 conf_dir: Path | None = None) -> dict[str, Freshness]:
    """``{experiment: Freshness}`` for every experiment of ``paper``."""
    return {e: experiment_status(paper, e, results_dir, profile, conf_dir=conf_dir)
            for e in experiments_of(paper, conf_dir)}
