"""Hydra command-line entry point for one experiment, single runs and sweeps.

    python -m common.repro.main experiment=swallow/headline profile=smoke
    python -m common.repro.main -m experiment=swallow/headline policy=swallow/fvdf,swallow/sebf

Results go to Hydra's run directory (``runs/...``, git-ignored), never to ``results/``: only ``./reproduce.sh``
writes the committed results.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from common.repro.config import CONF_DIR, register_paper_schemas, validate
from common.repro.run_all import run_experiment

register_paper_schemas()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    validate(cfg)
    out = Path(HydraConfig.get().runtime.output_dir)
    status, path, secs = run_experiment(cfg, out, force=True)
    print(f"{cfg.experiment.paper}/{cfg.experiment.name}: {status} -> {path} ({secs:.1f}s)")


if __name__ == "__main__":
    main()
