"""The command line (#20 item 3): typos named with 'did you mean', known errors one line and exit 2 (tracebacks
only with --debug), Ctrl-C one line and exit 130, a locked result file refused, papers after ``--only``.

``run_all`` is called in-process; ``mlsys_repro.common.repro.main`` (a Hydra app) runs as a subprocess on the toy conf
tree.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mlsys_repro.common.repro.config import compose, unknown_experiment_message
from mlsys_repro.common.repro.errors import ConfigError
from mlsys_repro.common.repro.run_all import main as run_all
from mlsys_repro.common.repro.run_all import result_lock
from tests.conftest import ROOT, interrupt_when_started

# ----------------------------------------------------------------------------------------------- compose / run_all


def test_experiment_typo_is_named_not_silently_dropped(toy_conf):
    """``experiment`` is an optional group: a name matching no file used to compose to 'no experiment'."""
    with pytest.raises(ConfigError, match=r"unknown experiment 'toy/cost' \(did you mean 'toy/costs'\?\)"):
        compose(["experiment=toy/cost"], conf_dir=toy_conf)
    with pytest.raises(ConfigError, match=r"did you mean 'toy/costs'\?\)\. Known papers: .*toy"):
        compose(["experiment=tyo/costs"], conf_dir=toy_conf)


def test_unknown_experiment_message_lists_the_same_papers_experiments():
    known = ["a/headline", "a/sweep", "b/headline"]
    msg = unknown_experiment_message("a/headlin", known)
    assert msg == "unknown experiment 'a/headlin' (did you mean 'a/headline'?). Known: a/headline, a/sweep"
    msg = unknown_experiment_message("c/zzz", known)
    assert msg.startswith("unknown experiment 'c/zzz'. Known papers: a, b")


def _toy(toy_conf, tmp_path, *extra):
    return ["--conf-dir", str(toy_conf), "--results-dir", str(tmp_path / "res"), "--profile", "smoke",
            "--no-claims", *extra]


def test_only_typo_exits_2_naming_the_closest(toy_conf, tmp_path, capsys):
    assert run_all(["toy", *_toy(toy_conf, tmp_path, "--only", "costs,slwo")]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'slwo' (did you mean 'slow'?)" in err
    assert not (tmp_path / "res").exists()  # nothing ran, not even the valid name


def test_unknown_paper_exits_2_naming_the_closest(toy_conf, capsys):
    assert run_all(["tyo", "--list", "--conf-dir", str(toy_conf)]) == 2
    assert "unknown paper 'tyo' (did you mean 'toy'?)" in capsys.readouterr().err


def test_paper_names_may_follow_only(toy_conf, capsys):
    """``--only costs toy``: ``toy`` is a paper, not a second experiment name (nor an argparse error)."""
    assert run_all(["--only", "costs", "toy", "--list", "--conf-dir", str(toy_conf)]) == 0
    out = capsys.readouterr().out
    assert "toy/costs" in out and "toy/slow" not in out


def test_locked_result_file_refuses_a_second_writer(toy_conf, tmp_path, capsys):
    """Another process holding ``costs.csv.lock``: the run says so in one line, writes nothing, exits 2."""
    target = tmp_path / "res/toy/costs.csv"
    with result_lock(target):  # flock is per open file: a second open in this process is a second writer
        rc = run_all(["toy", *_toy(toy_conf, tmp_path, "--only", "costs")])
    out = capsys.readouterr()
    assert rc == 2
    assert "being written by another run right now" in out.out and "Traceback" not in out.out + out.err
    assert not target.exists()


# ----------------------------------------------------------------------------------------------- main.py (Hydra)


def _main(toy_conf, tmp_path, *args, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TOY_SKIP_SLEEP": "1"}
    cmd = [sys.executable, "-m", "mlsys_repro.common.repro.main", "--config-dir", str(toy_conf), *args,
           f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, **kw)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.mark.parametrize("args, needle", [
    (["experiment=toy/costs", "experiment.params.scale=abc"], "key 'scale'"),  # type-checked command-line value
    (["experiment=toy/cost"], "did you mean 'toy/costs'"),                     # typo in the experiment name
    (["experiment=toy/costs", "output=nowhere"], "output must be 'runs' or 'results'"),
    ([], "no experiment selected"),
])
def test_main_known_error_is_one_line_and_exit_2(toy_conf, tmp_path, args, needle):
    out = _main(toy_conf, tmp_path, *args, "profile=smoke")
    assert out.returncode == 2, out.stdout + out.stderr
    assert _lines(out.stderr) == [_lines(out.stderr)[0]] and _lines(out.stderr)[0].startswith("error: "), out.stderr
    assert needle in out.stderr and "Traceback" not in out.stdout + out.stderr


def test_main_debug_prints_the_traceback(toy_conf, tmp_path):
    out = _main(toy_conf, tmp_path, "experiment=toy/costs", "experiment.params.scale=abc", "--debug")
    assert out.returncode == 2 and "Traceback" in out.stderr and "ConfigError" in out.stderr


def test_main_hydra_config_error_exits_2(toy_conf, tmp_path):
    out = _main(toy_conf, tmp_path, "experiment=toy/costs", "profile=huge")
    assert out.returncode == 2 and "Could not find 'profile/huge'" in out.stderr and "Traceback" not in out.stderr


def test_main_sweep_runs_the_good_jobs_then_exits_2_naming_the_bad_one(toy_conf, tmp_path):
    out = _main(toy_conf, tmp_path, "-m", "experiment=toy/cost,toy/costs", "profile=smoke")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "did you mean 'toy/costs'" in out.stderr and "Traceback" not in out.stdout + out.stderr
    assert (tmp_path / "sweep/1/costs.csv").exists()  # the valid job still ran


def test_main_ctrl_c_stops_with_one_line(toy_conf, tmp_path):
    marker = tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TOY_STARTED_MARKER": str(marker)}
    cmd = [sys.executable, "-m", "mlsys_repro.common.repro.main", "--config-dir", str(toy_conf), "experiment=toy/slow",
           "profile=smoke", f"hydra.run.dir={tmp_path / 'run'}"]
    rc, out, err = interrupt_when_started(cmd, env, marker)
    assert rc == 130, out + err
    assert "Traceback" not in out + err and len(_lines(err)) == 1, err
    assert "toy/slow: interrupted" in err and "run the same command again to resume" in err
    assert not list((tmp_path / "run").glob("*.csv"))


def test_a_run_closes_with_its_counted_verdicts_and_the_page(toy_conf, tmp_path, capsys):
    assert run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path / "res"), "--profile", "smoke",
                    "--only", "costs"]) == 0
    out = capsys.readouterr().out
    last = [ln for ln in out.splitlines() if ln.startswith("== counted claims of toy:")]
    assert last and "REPRODUCED 1" in last[0] and str(tmp_path / "res" / "index.html") in last[0]


def test_version(capsys):
    from mlsys_repro.common.repro.cli import main
    from mlsys_repro.common.repro.results import package_version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mlsys-repro {package_version()}" != "mlsys-repro unknown"


@pytest.mark.parametrize("entry", ["run_all", "main"])
def test_ctrl_c_during_a_cold_xla_compile_exits_130_cleanly(toy_conf, tmp_path, entry):
    """A first-time user always has a cold compile cache: Ctrl-C while XLA compiles must flush its one line and exit
    130, not crash in interpreter teardown while XLA's threads still run (it segfaulted, rc 139)."""
    marker = tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "TOY_STARTED_MARKER": str(marker),
           "TOY_COMPILE": "3000", "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cold_cache")}
    if entry == "run_all":
        cmd = [sys.executable, "-m", "mlsys_repro.common.repro.run_all", "toy", "--conf-dir", str(toy_conf),
               "--only", "slow", "--profile", "smoke", "--results-dir", str(tmp_path / "res"), "--no-claims"]
    else:
        cmd = [sys.executable, "-m", "mlsys_repro.common.repro.main", "--config-dir", str(toy_conf),
               "experiment=toy/slow", "profile=smoke", f"hydra.run.dir={tmp_path / 'run'}"]
    rc, out, err = interrupt_when_started(cmd, env, marker)
    assert rc == 130, (rc, out[-2000:], err[-2000:])
    assert "interrupted" in err and "Traceback" not in out + err
