"""Hydra launchers: a local joblib sweep with 2 jobs, and the SLURM (submitit) array config without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
import submitit
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mlsys_repro.common.repro.config import CONF_DIR, register_paper_schemas
from tests.conftest import ROOT


def test_joblib_sweep_two_jobs_writes_results(toy_conf, tmp_path):
    res = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "mlsys_repro.common.repro.main", "--config-dir", str(toy_conf), "-m",
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
    text = ex._executor._make_submission_file_text("python -m mlsys_repro.common.repro.main", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --cpus-per-task=8", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --time=240", "#SBATCH --mem=64GB", "#SBATCH --job-name=repro",
                 "export XLA_PYTHON_CLIENT_PREALLOCATE=false"):
        assert line in text, f"{line!r} not in sbatch file:\n{text}"


def test_sweep_over_experiments_writes_results_tree(toy_conf, tmp_path):
    """The SLURM-array command line, run with the basic launcher: one job per experiment, into results/."""
    res = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TOY_SKIP_SLEEP": "1"}
    sweep = subprocess.run([sys.executable, "-m", "mlsys_repro.common.repro.run_all", "toy", "--sweep-arg",
                            "--conf-dir", str(toy_conf)], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert sweep.stdout.strip() == "experiment=toy/costs,toy/slow", sweep.stdout + sweep.stderr
    cmd = [sys.executable, "-m", "mlsys_repro.common.repro.main", "--config-dir", str(toy_conf), "-m",
           sweep.stdout.strip(), "profile=smoke", "output=results", f"paths.results_dir={res}",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert sorted(p.name for p in (res / "toy").glob("*.csv")) == ["costs.csv", "slow.csv"]
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.stdout.count(": skipped ->") == 2, again.stdout


def _main_cmd(toy_conf, *args):
    return [sys.executable, "-m", "mlsys_repro.common.repro.main", "--config-dir", str(toy_conf), *args]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TOY_SKIP_SLEEP": "1"}


def test_submitit_local_sweep_then_collect(toy_conf, tmp_path):
    """A 2-point sweep through the submitit local launcher (the SLURM code path, run locally), flat job folders,
    then ``mlsys_repro.common.repro.collect`` gathers it into one table and checks the toy claim on the pooled
    policies."""
    sweep = tmp_path / "sweep"
    cmd = _main_cmd(toy_conf, "-m", "experiment=toy/costs", "policy=toy/fast,toy/slow", "profile=smoke",
                    "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}")
    out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (sweep / ".submitit").is_dir()  # really went through submitit
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["0", "1"]  # flat
    col = subprocess.run([sys.executable, "-m", "mlsys_repro.common.repro.collect", str(sweep)], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert col.returncode == 0, col.stdout + col.stderr
    df = pd.read_csv(sweep / "collected.csv")
    assert df["job"].astype(str).nunique() == 2 and set(df["policy"]) == {"fast", "slow"}
    assert set(df["override.policy"]) == {"toy/fast", "toy/slow"}
    assert len(df) == 2 * 3  # 2 policies x 3 smoke seeds x 1 metric
    verdicts = pd.read_csv(sweep / "collected/toy/verdicts.csv")
    assert verdicts.set_index("claim").loc["fast_is_2x", "verdict"] == "REPRODUCED"  # 5.0 vs 10.0 s: a 2x ratio


def test_joblib_sweep_over_a_setting_is_collected_but_not_pooled(toy_conf, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = _main_cmd(toy_conf, "-m", "experiment=toy/costs", "experiment.params.scale=1.0,3.0", "profile=smoke",
                    "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}")
    out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    col = subprocess.run([sys.executable, "-m", "mlsys_repro.common.repro.collect", str(sweep)], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert col.returncode == 0, col.stdout + col.stderr
    assert "claims not checked" in col.stdout
    assert not (sweep / "collected").exists()
    df = pd.read_csv(sweep / "collected.csv")
    by_scale = df.groupby("override.experiment.params.scale")["value"].mean()
    assert by_scale[3.0] == pytest.approx(3 * by_scale[1.0], rel=0.05)  # the setting really changed per job


def test_collect_on_a_folder_without_jobs_exits_2(tmp_path, capsys):
    from mlsys_repro.common.repro.collect import main as collect_main

    assert collect_main([str(tmp_path)]) == 2
    assert "no Hydra job folder" in capsys.readouterr().err


def test_cfg_job_shows_what_will_run(toy_conf, tmp_path):
    """``--cfg job`` prints the profile-merged experiment with the command line's values on top."""
    cmd = _main_cmd(toy_conf, "experiment=toy/costs", "profile=smoke", "experiment.num_seeds=2",
                    "experiment.params.scale=4.5", f"hydra.run.dir={tmp_path / 'run'}", "--cfg", "job")
    out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    exp = OmegaConf.create(out.stdout).experiment
    assert exp.num_seeds == 2  # the smoke profile says 3; the command line wins
    assert exp.params.scale == 4.5 and "profiles" not in exp


def test_single_run_uses_compile_cache_and_logs_to_hydra_file(toy_conf, tmp_path):
    """main.py turns on the same persistent compile cache as ./reproduce.sh, and its progress and status lines go
    through ``logging`` into Hydra's job log file."""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in _env().items() if k != "JAX_COMPILATION_CACHE_DIR"}
    args = ["--config-dir", str(toy_conf), "experiment=toy/costs", "profile=smoke", f"hydra.run.dir={run_dir}"]
    probe = ("import sys, jax, mlsys_repro.common.repro.main as m\n"
             "orig = m.enable_compile_cache\n"
             "def spy(root):\n"
             "    orig(root)\n"
             "    print('CACHE_DIR=' + str(jax.config.jax_compilation_cache_dir))\n"
             "m.enable_compile_cache = spy\n"
             "sys.argv = ['main.py', *sys.argv[1:]]\n"
             "m.main()\n")
    out = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"CACHE_DIR={ROOT / '.jax_cache'}" in out.stdout
    logs = list(run_dir.glob("*.log"))
    assert len(logs) == 1, logs
    text = logs[0].read_text()
    assert "[toy/costs] 2/2 policies" in text and "toy/costs: ran ->" in text


def test_only_the_default_profile_and_whole_experiments_write_results(toy_conf, tmp_path):
    """``output=results`` with the smoke profile, or with one policy, is refused with a one-line reason before
    anything runs; so is ``run_all --profile smoke --results-dir results``. The committed results stay as they are."""
    from mlsys_repro.common.repro.run_all import main as run_all_main

    before = {p: p.read_bytes() for p in (ROOT / "results").glob("*/*.csv")}
    for extra, needle in ((["profile=smoke"], "default-profile runs only"),
                          (["policy=toy/fast"], "narrows the policy list")):
        cmd = _main_cmd(toy_conf, "experiment=toy/costs", "output=results", *extra,
                        f"hydra.run.dir={tmp_path / 'run'}")
        out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
        assert out.returncode == 2 and needle in out.stderr, out.stdout + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert run_all_main(["toy", "--conf-dir", str(toy_conf), "--profile", "smoke",
                         "--results-dir", str(ROOT / "results")]) == 2
    assert {p: p.read_bytes() for p in (ROOT / "results").glob("*/*.csv")} == before
    assert not (ROOT / "results" / "toy").exists()
