"""Hydra command-line entry point for one experiment: single runs, sweeps, and cluster arrays.

    python -m common.repro.main experiment=swallow/headline profile=smoke
    python -m common.repro.main -m experiment=swallow/headline policy=swallow/fvdf,swallow/sebf
    python -m common.repro.main -m $(python -m common.repro.run_all swallow --sweep-arg) profile=full \\
        output=results hydra/launcher=slurm hydra.launcher.partition=gpu

By default results go to Hydra's run directory (``runs/...``, git-ignored). ``output=results`` writes
``results/<paper>/<experiment>.csv`` instead, skipping experiments whose stored config hash matches, exactly like
``./reproduce.sh`` does; run ``python -m common.repro.claims`` afterwards to refresh the verdicts.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from common.repro.config import CONF_DIR, pin_explicit_overrides, register_paper_schemas, validate
from common.repro.run_all import run_experiment

register_paper_schemas()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> str:
    pin_explicit_overrides(cfg, list(HydraConfig.get().overrides.task))
    validate(cfg)
    if cfg.output == "results":
        out, force = Path(cfg.paths.results_dir) / cfg.experiment.paper, False
    elif cfg.output == "runs":
        out, force = Path(HydraConfig.get().runtime.output_dir), True
    else:
        raise ValueError(f"output must be 'runs' or 'results', got {cfg.output!r}")
    status, path, secs = run_experiment(cfg, out, force=force)
    print(f"{cfg.experiment.paper}/{cfg.experiment.name}: {status} -> {path} ({secs:.1f}s)", flush=True)
    return str(path)


if __name__ == "__main__":
    main()
