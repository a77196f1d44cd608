"""``pip install .`` works without a checkout: the wheel carries conf/, data/ and every claims.yaml, and the
``mlsys-repro`` console script runs from any directory (results would go to that directory, not site-packages)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlsys_repro.common.repro.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
PAPERS = sorted(p.stem for p in (ROOT / "conf/paper").glob("*.yaml"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from this checkout, installed (without dependencies) into a scratch folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    try:
        import setuptools
        import wheel  # noqa: F401
    except ImportError:
        pytest.skip("setuptools/wheel not installed (the dev extra has them)")
    if int(setuptools.__version__.split(".")[0]) < 68:
        pytest.skip("setuptools < 68 cannot build from pyproject.toml")
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    # setuptools builds in the checkout's build/ folder: test workers (pytest-xdist) take turns, or two builds race
    lock = ROOT / "build" / ".wheel-build.lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(ROOT)],
                       check=True, cwd=ROOT, capture_output=True, timeout=600)
    (whl,) = (tmp / "dist").glob("mlsys_repro-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp / "site"), str(whl)], check=True,
                   capture_output=True, timeout=600)
    return whl, tmp / "site"


def _run_installed(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("MLSYS_REPRO_ROOT", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_wheel_carries_conf_data_and_claims(installed):
    whl, _ = installed
    names = set(zipfile.ZipFile(whl).namelist())
    for key in PAPERS:
        assert f"mlsys_repro/papers/{key}/claims.yaml" in names
        assert f"mlsys_repro/common/repro/_bundled/conf/paper/{key}.yaml" in names
    assert "mlsys_repro/common/repro/_bundled/conf/config.yaml" in names
    # every config file of the checkout (what composing any experiment may read: the test below composes one paper's)
    conf = {f"mlsys_repro/common/repro/_bundled/conf/{p.relative_to(ROOT / 'conf').as_posix()}"
            for p in (ROOT / "conf").rglob("*.yaml")}
    assert conf <= names, sorted(conf - names)[:5]
    assert any(n.startswith("mlsys_repro/common/repro/_bundled/data/coflow/") for n in names)
    assert not any("__pycache__" in n for n in names)
    entry = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "mlsys-repro = mlsys_repro.common.repro.cli:entry" in entry


def test_installed_command_lists_every_experiment_from_any_directory(installed, tmp_path):
    _, site = installed
    probe = _run_installed(site, tmp_path, "-c", "import mlsys_repro.common.repro.schema as s; "
                           "print(s.__file__, s.installed(), s.asset_root(), s.work_root(), sep='|')")
    path, flag, assets, work = probe.stdout.strip().split("|")
    assert Path(path).is_relative_to(site) and flag == "True"  # the wheel's copy, not this checkout
    assert Path(assets) == site / "mlsys_repro/common/repro/_bundled" and Path(work) == tmp_path
    expected = {f"{p.parent.name}/{p.stem}" for p in (ROOT / "conf/experiment").glob("*/*.yaml")}
    script = site / "bin" / "mlsys-repro"  # the console script pip generated from the wheel's entry point
    assert script.is_file()
    # the console script finds every experiment of the bundled conf tree (``--sweep-arg`` prints the plan without
    # composing: a listing of all 48 experiments composes each, ~30 s on 2 cores) ...
    out = _run_installed(site, tmp_path, str(script), "run", "--sweep-arg")
    assert out.returncode == 0, out.stderr
    prefix, _, plan = out.stdout.strip().partition("=")
    assert prefix == "experiment" and set(plan.split(",")) == expected
    # ... and composes them from it: the listing of one paper (its four experiments' titles and policies)
    out = _run_installed(site, tmp_path, str(script), "run", "labelavg", "--list")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert {line.split()[0] for line in lines} == {e for e in expected if e.startswith("labelavg/")}
    assert all("[policies: " in line for line in lines)


def test_unknown_command_exits_2_and_names_the_closest(capsys):
    assert main(["clams"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'clams'" in err and "did you mean 'claims'" in err


def test_no_command_prints_usage_and_exits_2(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_status_subcommand_is_run_status(monkeypatch):
    seen = []
    import mlsys_repro.common.repro.run_all as run_all

    monkeypatch.setattr(run_all, "main", lambda argv: seen.append(argv) or 7)
    assert main(["status", "swallow"]) == 7 and seen == [["--status", "swallow"]]


def test_lock_file_pins_what_is_installed():
    """requirements.lock (used by .ci/run and reproduce.sh as pip constraints) matches this environment."""
    from importlib.metadata import PackageNotFoundError, version

    pins = [ln.split("==") for ln in (ROOT / "requirements.lock").read_text().splitlines()
            if ln and not ln.startswith("#")]
    assert pins and all(len(p) == 2 for p in pins), "every line is name==version"
    names = {n.lower() for n, _ in pins}
    assert {"jax", "jaxlib", "flax", "optax", "hydra-core", "numpy"} <= names
    wrong = []
    for name, ver in pins:
        try:
            if version(name) != ver:
                wrong.append(f"{name}: lock {ver}, installed {version(name)}")
        except PackageNotFoundError:
            wrong.append(f"{name}: locked but not installed")
    assert not wrong, wrong


def test_output_cut_short_by_a_pipe_is_quiet():
    """``mlsys-repro run --list | head -1``: the reader leaves early; no BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-m", "mlsys_repro.common.repro.cli", "run", "--list"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "/" in proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
