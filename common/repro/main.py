"""Hydra command-line entry point for one experiment: single runs, sweeps, and cluster arrays.

    python -m common.repro.main experiment=swallow/headline profile=smoke
    python -m common.repro.main -m experiment=swallow/headline policy=swallow/fvdf,swallow/sebf
    python -m common.repro.main -m $(python -m common.repro.run_all swallow --sweep-arg) profile=full \\
        output=results hydra/launcher=slurm hydra.launcher.partition=gpu

By default results go to Hydra's run directory (``runs/...``, git-ignored). ``output=results`` writes
``results/<paper>/<experiment>.csv`` instead, skipping experiments whose stored config hash matches, exactly like
``./reproduce.sh`` does; run ``python -m common.repro.claims`` afterwards to refresh the verdicts. A multirun
writes one flat folder per job (``runs/multirun/<date>_<time>/<job number>/``); gather them into one table with
``python -m common.repro.collect RUNDIR``.

Like ``./reproduce.sh`` it uses the persistent XLA compile cache (``.jax_cache``, or JAX_COMPILATION_CACHE_DIR), and
it reports through Python ``logging``, so Hydra's job log (``<run dir>/main.log``) holds the progress lines.
``--cfg job`` prints the configuration that will run: the experiment node with the profile's block merged and the
command line's values on top (Hydra's own ``--cfg hydra`` / ``--cfg all`` are unchanged).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from common.repro.config import (
    CONF_DIR,
    experiment_node,
    pin_explicit_overrides,
    register_paper_schemas,
    validate,
)
from common.repro.run_all import enable_compile_cache, run_experiment
from common.repro.schema import work_root

register_paper_schemas()
log = logging.getLogger("mlsys_repro.main")
_SHOW_JOB_CONFIG = False


def effective_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` as it will run: ``experiment`` replaced by its profile-merged node (command-line values pinned)."""
    out = cfg.copy()
    with open_dict(out):
        out.experiment = experiment_node(cfg)
    return out


def _take_cfg_job(argv: list[str]) -> tuple[list[str], bool]:
    """Remove ``--cfg job`` / ``-c job`` (either spelling) from ``argv``; say whether it was there."""
    out, found, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        if a in ("--cfg", "-c") and i + 1 < len(argv) and argv[i + 1] == "job":
            found, i = True, i + 2
            continue
        if a in ("--cfg=job", "-c=job"):
            found, i = True, i + 1
            continue
        out.append(a)
        i += 1
    return out, found


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> str:
    pin_explicit_overrides(cfg, list(HydraConfig.get().overrides.task))
    validate(cfg)
    if _SHOW_JOB_CONFIG:
        print(OmegaConf.to_yaml(effective_config(cfg), resolve=False), end="")
        return ""
    enable_compile_cache(Path(work_root()))
    if cfg.output == "results":
        out, force = Path(cfg.paths.results_dir) / cfg.experiment.paper, False
    elif cfg.output == "runs":
        out, force = Path(HydraConfig.get().runtime.output_dir), True
    else:
        raise ValueError(f"output must be 'runs' or 'results', got {cfg.output!r}")
    status, path, secs = run_experiment(cfg, out, force=force, log=log.info)
    log.info(f"{cfg.experiment.paper}/{cfg.experiment.name}: {status} -> {path} ({secs:.1f}s)")
    return str(path)


if __name__ == "__main__":
    sys.argv[1:], _SHOW_JOB_CONFIG = _take_cfg_job(sys.argv[1:])
    main()
