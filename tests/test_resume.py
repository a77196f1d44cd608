"""Long trainings checkpoint with orbax and resume bit-identically after a kill, through the real runner.

For the (paper, experiment) below, three smoke runs of ``run_all``: uninterrupted; SIGKILLed right after
checkpoint step K; restarted with the same configuration. The restarted run must resume from step K (not start
over) and write exactly the uninterrupted run's numbers; its checkpoints are removed once the result is written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mlsys_repro.common.repro.checkpoint import Checkpointer

ROOT = Path(__file__).resolve().parents[1]

# (paper, experiment, extra overrides, kill after checkpoint step)
# One subprocess case keeps CI short; the other long trainings are killed and resumed in-process on the same
# run_chunked/orbax path: greenplace (tests/papers/greenplace/test_agents.py), MAIFS
# (tests/papers/maifs/test_env_model.py), FedFoA (tests/papers/fedfoa/test_federation.py).
CASES = [
    # EvoGWP alone on the smoke slice (hourly, 8 VMs), 9 steps = 3 rounds of 3 = 3 checkpointed chunks; on Azure
    # (100 VMs x 8,004 steps) rather than the experiment's Bitbrains (402 x 17,856), whose CSV each of the three
    # processes would parse (~5 CPU s each, CI time #51): what is tested is the runner's resume, not the data set
    ("evogwp", "ablation", ["policy=evogwp/evogwp", "policy.hparams.shapelet_steps=20",
                            "policy.hparams.shapelet_samples=64", "experiment.profiles.smoke.params.train.steps=9",
                            "experiment.params.datasets=[azure]"], 2),
]


def _run(paper, exp, overrides, results, ckpt, die_after=-1):
    head = [sys.executable, "-m", "tests.fixtures.kill_after_checkpoint", str(die_after)]
    args = [paper, "--profile", "smoke", "--only", exp, "--results-dir", str(results), "--no-claims",
            "-o", f"paths.checkpoint_dir={ckpt}"] + [a for o in overrides for a in ("-o", o)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(head + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("paper, exp, overrides, die_after", CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_killed_experiment_resumes_bit_identically(paper, exp, overrides, die_after, tmp_path):
    ref = _run(paper, exp, overrides, tmp_path / "ref", tmp_path / "ck_ref")
    assert ref.returncode == 0, ref.stderr[-3000:]

    killed = _run(paper, exp, overrides, tmp_path / "res", tmp_path / "ck", die_after)
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-3000:])
    csv = tmp_path / "res" / paper / f"{exp}.csv"
    assert not csv.exists()
    assert _saved_steps(killed)[-1] == die_after
    dirs = {d.parent for d in (tmp_path / "ck").rglob("*") if d.is_dir() and d.name.isdigit()}
    assert len(dirs) == 1 and Checkpointer(dirs.pop()).latest_step() == die_after

    resumed = _run(paper, exp, overrides, tmp_path / "res", tmp_path / "ck")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = _saved_steps(resumed)
    assert steps and steps[0] > die_after, f"restarted instead of resuming after step {die_after}: saved {steps}"
    assert _saved_steps(ref)[-1] == steps[-1]
    a = pd.read_csv(tmp_path / "ref" / paper / f"{exp}.csv")
    b = pd.read_csv(csv)
    cols = ["policy", "seed", "metric", "value"]
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)
    assert not [p for p in (tmp_path / "ck").rglob("*") if p.is_file()], "checkpoints left after success"


def _saved_steps(proc) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in proc.stderr.splitlines() if line.startswith("checkpoint saved:")]
