"""The context an experiment function receives.

An experiment is registered in its YAML (``fn:`` and ``params_class:``, see :mod:`mlsys_repro.common.repro.config`); its
function takes a :class:`RunContext`, returns rows in the long format of :mod:`mlsys_repro.common.repro.results` (the
runner adds paper, experiment and provenance columns) and may save figures with :meth:`RunContext.save_figure`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.progress import Progress


@dataclass
class RunContext:
    """Everything an experiment needs, already validated.

    Attributes:
      paper, experiment, profile: names (profile is ``smoke``, ``default`` or ``full``).
      num_seeds, seed: the experiment runs seeds ``seed .. seed + num_seeds - 1`` (see :meth:`seeds`).
      params: instance of the experiment's params dataclass, profile overrides applied.
      policies: ordered ``{name: policy dataclass}``; the experiment's list, or the one chosen with ``policy=``.
      trace, hardware: the selected group configs as dataclass instances (``None`` if the paper has none).
      data_dir: vendored data root; out_dir: where this run writes results and figures.
      cfg: the full composed config, for provenance only.
      checkpoint_dir: where long trainings keep resumable state for *this* configuration (it contains the config
        hash, so a changed config never resumes stale state); ``None`` turns checkpointing off. See
        :meth:`checkpointer`.
      cache: the run-scoped :class:`mlsys_repro.common.repro.cache.RunCache` shared with the other experiments of this
        run (tasks, compiled trainers, trained agents), in place of module-level caches.
    """

    paper: str
    experiment: str
    profile: str
    num_seeds: int
    seed: int
    params: Any
    policies: dict[str, Any]
    trace: Any
    hardware: Any
    data_dir: Path
    out_dir: Path
    cfg: DictConfig
    progress: Progress = dataclasses.field(default_factory=Progress)
    figures: list[Path] = dataclasses.field(default_factory=list)
    checkpoint_dir: Path | None = None
    cache: RunCache = dataclasses.field(default_factory=RunCache)

    def seeds(self) -> np.ndarray:
        return np.arange(self.seed, self.seed + self.num_seeds, dtype=np.int64)

    def checkpointer(self, name: str, keep: int = 2):
        """An orbax :class:`mlsys_repro.common.repro.checkpoint.Checkpointer` for the training called ``name`` in this
        run, or ``None`` when checkpointing is off. Pass it to :func:`mlsys_repro.common.repro.checkpoint.run_chunked`:
        a killed run restarted with the same configuration resumes from the newest saved chunk, bit-identically."""
        if self.checkpoint_dir is None:
            return None
        from mlsys_repro.common.repro.checkpoint import Checkpointer

        return Checkpointer(self.checkpoint_dir / name, keep=keep)

    def save_figure(self, fig, name: str) -> Path:
        """Save a matplotlib figure as ``<out_dir>/<experiment>_<name>.png`` atomically and close it, titled with
        the experiment, profile and number of seeds, and what its error bars are."""
        from mlsys_repro.common.repro.plots import CI_NOTE, ONE_RUN_NOTE, save_figure

        path = self.out_dir / f"{self.experiment}_{name}.png"
        bars = CI_NOTE if self.num_seeds > 1 else ONE_RUN_NOTE
        note = f"{self.paper}/{self.experiment}, profile {self.profile}, {self.num_seeds} seed(s); {bars}"
        save_figure(fig, path, note=note)
        self.figures.append(path)
        return path
