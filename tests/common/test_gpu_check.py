"""bench/gpu_check.sh: valid bash, and its per-paper full-profile steps name experiments that exist, one per paper."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from mlsys_repro.common.repro.config import experiments_of, papers_in_conf

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.sh"


def _steps() -> dict[str, str]:
    text = SCRIPT.read_text()
    block = re.search(r'STEPS="([^"]*)"', text)
    assert block, "STEPS=... not found in gpu_check.sh"
    return dict(pair.split(":") for pair in block.group(1).split())


def test_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_paper_has_an_existing_step_experiment():
    steps = _steps()
    assert set(steps) == set(papers_in_conf()), "gpu_check.sh STEPS must list every paper exactly once"
    for paper, exp in steps.items():
        assert exp in experiments_of(paper), f"{paper}/{exp} is not an experiment"
