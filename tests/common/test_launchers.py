"""Hydra launchers: a local joblib sweep with 2 jobs, and the SLURM (submitit) array config without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import submitit
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from common.repro.config import CONF_DIR, register_paper_schemas
from tests.conftest import ROOT


def test_joblib_sweep_two_jobs_writes_results(toy_conf, tmp_path):
    res = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "common.repro.main", "--config-dir", str(toy_conf), "-m",
           "experiment=toy/costs", "policy=toy/fast,toy/slow", "profile=smoke", "hydra/launcher=joblib",
           "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.results_dir={res}"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in out.stdout + out.stderr
    csvs = sorted((tmp_path / "sweep").rglob("costs.csv"))
    assert len(csvs) == 2
    policies = {pd.read_csv(p)["policy"].unique().item() for p in csvs}
    assert policies == {"fast", "slow"}
    assert not res.exists()  # sweeps never write the committed results tree


def test_slurm_array_config_generates_sbatch(tmp_path, monkeypatch):
    fake_bin = tmp_path / "bin"  # submitit only checks that `srun` exists; nothing is submitted
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    register_paper_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                           f"hydra.sweep.dir={tmp_path}", "hydra.job.name=repro"],
                      return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("SlurmLauncher")
    # Map the launcher config onto submitit's executor exactly as the plugin does, and render the sbatch file.
    base = {"submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes",
            "name", "stderr_to_stdout"}
    ex = submitit.AutoExecutor(folder=launcher["submitit_folder"], cluster="slurm")
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in launcher.items()
                            if k not in ("_target_", "submitit_folder", "max_num_timeout")})
    text = ex._executor._make_submission_file_text("python -m common.repro.main", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --cpus-per-task=8", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --time=240", "#SBATCH --mem=64GB", "#SBATCH --job-name=repro",
                 "export XLA_PYTHON_CLIENT_PREALLOCATE=false"):
        assert line in text, f"{line!r} not in sbatch file:\n{text}"


def test_sweep_over_experiments_writes_results_tree(toy_conf, tmp_path):
    """The SLURM-array command line, run with the basic launcher: one job per experiment, into results/."""
    res = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TOY_SKIP_SLEEP": "1"}
    sweep = subprocess.run([sys.executable, "-m", "common.repro.run_all", "toy", "--sweep-arg", "--conf-dir",
                            str(toy_conf)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert sweep.stdout.strip() == "experiment=toy/costs,toy/slow", sweep.stdout + sweep.stderr
    cmd = [sys.executable, "-m", "common.repro.main", "--config-dir", str(toy_conf), "-m", sweep.stdout.strip(),
           "profile=smoke", "output=results", f"paths.results_dir={res}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert sorted(p.name for p in (res / "toy").glob("*.csv")) == ["costs.csv", "slow.csv"]
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.stdout.count(": skipped ->") == 2, again.stdout
