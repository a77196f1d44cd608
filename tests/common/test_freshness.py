"""Freshness: code fingerprints follow imports, manifests catch stale, changed, truncated, NaN and stitched files,
and only the default profile writes results/."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from mlsys_repro.common.repro.freshness import (
    code_fingerprint,
    data_changed_since,
    data_fingerprint,
    data_paths,
    manifest_path,
    module_closure,
    status,
    write_manifest,
)
from mlsys_repro.common.repro.run_all import main as run_all
from tests.conftest import write


@pytest.fixture
def mini_repo(tmp_path):
    r = tmp_path / "repo"
    write(r / "mlsys_repro/common/__init__.py", "")
    write(r / "mlsys_repro/common/maths.py", "X = 1\n")
    write(r / "mlsys_repro/common/unused.py", "Y = 2\n")
    write(r / "mlsys_repro/common/repro/__init__.py", "")
    write(r / "mlsys_repro/common/repro/plots.py", "import mlsys_repro.common.maths\n")
    write(r / "mlsys_repro/papers/__init__.py", "")
    write(r / "mlsys_repro/papers/x/__init__.py", "")
    write(r / "mlsys_repro/papers/x/method.py",
          "from mlsys_repro.common import maths\n\ndef f():\n    from . import helper\n")
    write(r / "mlsys_repro/papers/x/helper.py", "from ..x import method\n")
    write(r / "mlsys_repro/papers/x/experiments.py",
          "from mlsys_repro.common.repro.plots import *\nfrom mlsys_repro.papers.x.method import f\n")
    return r


def test_closure_follows_absolute_relative_and_function_level_imports(mini_repo):
    files = {str(p.relative_to(mini_repo)) for p in module_closure(mini_repo, ["mlsys_repro.papers.x.experiments"])}
    assert files == {"mlsys_repro/common/__init__.py", "mlsys_repro/common/maths.py", "mlsys_repro/papers/__init__.py",
                     "mlsys_repro/papers/x/__init__.py", "mlsys_repro/papers/x/experiments.py",
                     "mlsys_repro/papers/x/method.py", "mlsys_repro/papers/x/helper.py"}


def test_fingerprint_changes_with_imported_code_only(mini_repo):
    fp, n = code_fingerprint(mini_repo, "mlsys_repro.papers.x")
    assert n == 7
    (mini_repo / "mlsys_repro/common/unused.py").write_text("Y = 3\n")  # not imported by the paper
    # excluded
    (mini_repo / "mlsys_repro/common/repro/plots.py").write_text("import mlsys_repro.common.maths  # reporting only\n")
    assert code_fingerprint(mini_repo, "mlsys_repro.papers.x")[0] == fp
    (mini_repo / "mlsys_repro/common/maths.py").write_text("X = 2\n")  # the method's dependency
    assert code_fingerprint(mini_repo, "mlsys_repro.papers.x")[0] != fp


def _result(path, *, chash="h1", sha="abc123", profile="default", values=(1.0, 2.0, 3.0)):
    rows = [{"paper": "p", "experiment": "e", "policy": "a", "trace": "t", "hardware": "h", "seed": s, "metric": "m",
             "value": v, "unit": "s", "profile": profile, "git_sha": sha, "jax_version": "0", "config_hash": chash}
            for s, v in enumerate(values)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _status(path, **kw):
    args = {"config_hash": "h1", "code_hash": "c1", "profile": "default", **kw}
    return status(path, **args)


def test_status_states(tmp_path):
    p = tmp_path / "p/e.csv"
    assert _status(p).state == "missing"
    _result(p)
    f = _status(p)
    assert f.state == "stale" and "no manifest" in f.why and not f.reusable
    write_manifest(p, config_hash="h1", code_hash="c1", profile="default")
    assert _status(p).fresh
    s = _status(p, config_hash="h2")
    assert s.state == "stale" and "config changed" in s.why
    s = _status(p, code_hash="c2")
    assert s.state == "stale" and "code changed" in s.why and not s.reusable
    s = _status(p, profile="smoke")
    assert s.state == "stale" and "profile" in s.why


def test_dirty_tree_results_are_stale_but_reusable(tmp_path):
    p = _result(tmp_path / "p/e.csv", sha="abc123-dirty")
    write_manifest(p, config_hash="h1", code_hash="c1", profile="default")
    f = _status(p)
    assert f.state == "stale" and "uncommitted" in f.why and f.reusable


@pytest.mark.parametrize("damage, needle", [
    (lambda p: p.write_text("\n".join(p.read_text().splitlines()[:-1]) + "\n"), "file changed"),  # truncated
    (lambda p: p.write_text(p.read_text().replace(",2.0,", ",nan,")), "NaN"),
    (lambda p: p.write_text(p.read_text().replace(",h1\n", ",h9\n", 1)), "stitched"),
    (lambda p: p.write_text(p.read_text() + p.read_text().splitlines()[1] + "\n"), "file changed"),  # extra row
    (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "unreadable"),
])
def test_damaged_files_are_incomplete(tmp_path, damage, needle):
    p = _result(tmp_path / "p/e.csv")
    write_manifest(p, config_hash="h1", code_hash="c1", profile="default")
    damage(p)
    f = _status(p)
    assert f.state == "incomplete" and needle in f.why and not f.reusable


def test_data_paths_are_the_files_config_or_code_name_under_data(mini_repo):
    data = mini_repo / "data"
    write(data / "coflow/trace.txt", "1 2 3\n")
    write(data / "codecs/table.csv", "a,b\n1,2\n")
    write(data / "images/mnist/train.gz", "x")
    write(data / "images/mnist/test.gz", "y")
    write(data / "unused/other.csv", "z")
    write(mini_repo / "mlsys_repro/papers/x/helper.py", "from ..x import method\nTABLE = 'codecs/table.csv'\n")
    got = data_paths(mini_repo, "mlsys_repro.papers.x", data,
                     [{"files": {"trace": "coflow/trace.txt"}, "name": "fb", "n": 3}, ["images/mnist"]])
    assert got == ("codecs/table.csv", "coflow/trace.txt", "images/mnist/test.gz", "images/mnist/train.gz")
    fp = data_fingerprint(data, got)
    assert data_fingerprint(data, got) == fp
    (data / "unused/other.csv").write_text("w")  # not read by the experiment
    assert data_fingerprint(data, got) == fp
    (data / "codecs/table.csv").write_text("a,b\n1,nan\n")  # the side table the code reads
    assert data_fingerprint(data, got) != fp


def test_a_data_edit_makes_the_result_stale(tmp_path):
    p = _result(tmp_path / "p/e.csv")
    write_manifest(p, config_hash="h1", code_hash="c1", profile="default", data_hash="d1")
    assert _status(p, data_hash="d1").fresh
    s = _status(p, data_hash="d2")
    assert s.state == "stale" and "data changed (stored d1, now d2)" in s.why and not s.reusable


def _commit_all(repo) -> str:
    """``git init`` + commit everything in ``repo``; the short commit id."""
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_result_without_a_data_fingerprint_is_checked_against_git(tmp_path):
    """Manifests written before data fingerprints: the data files changed since the commit that made the result."""
    repo = tmp_path / "repo"
    write(repo / "data/coflow/trace.txt", "48\n")
    sha = _commit_all(repo)
    since = lambda s: data_changed_since(repo, s, repo / "data", ["coflow/trace.txt"])  # noqa: E731
    p = _result(tmp_path / "p/e.csv", sha=sha)
    write_manifest(p, config_hash="h1", code_hash="c1", profile="default", git_sha=sha)
    assert _status(p, data_hash="d1", data_since=since).fresh
    (repo / "data/coflow/trace.txt").write_text("4800\n")  # an uncommitted edit of one flow
    s = _status(p, data_hash="d1", data_since=since)
    assert s.state == "stale" and "data changed since its run: data/coflow/trace.txt" in s.why


def test_manifest_records_the_file(tmp_path):
    p = _result(tmp_path / "p/e.csv")
    man = write_manifest(p, config_hash="h1", code_hash="c1", profile="default", wall_s=1.5)
    assert json.loads(manifest_path(p).read_text()) == man and man["rows"] == 3 and len(man["csv_sha256"]) == 64


def test_smoke_never_writes_results_and_status_reports_it(toy_conf, tmp_path, capsys):
    res, runs = tmp_path / "results", tmp_path / "runs"
    paths = ["-o", f"paths.results_dir={res}", "-o", f"paths.runs_dir={runs}"]
    argv = ["toy", "--conf-dir", str(toy_conf), "--only", "costs", *paths]
    assert run_all([*argv, "--profile", "smoke"]) == 0
    assert (runs / "smoke/toy/costs.csv").exists() and (runs / "smoke/toy/costs.manifest.json").exists()
    assert not res.exists()
    capsys.readouterr()
    assert run_all([*argv, "--status"]) == 1  # the default profile has nothing yet
    assert "missing" in capsys.readouterr().out
    assert run_all([*argv, "--status", "--profile", "smoke"]) in (0, 1)  # 1 only because the tree may be dirty
    out = capsys.readouterr().out
    assert "toy/costs" in out and ("fresh" in out or "uncommitted" in out)


def test_only_takes_a_comma_list_and_names_typos(toy_conf, tmp_path, capsys):
    argv = ["toy", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path), "--no-claims"]
    assert run_all([*argv, "--only", "cost"]) == 2
    assert "did you mean 'costs'" in capsys.readouterr().err
    assert run_all([*argv, "--only", "costs,slow", "--list"]) == 0
    out = capsys.readouterr().out
    assert "toy/costs" in out and "toy/slow" in out
    assert run_all(["toi", "--conf-dir", str(toy_conf)]) == 2
    assert "did you mean 'toy'" in capsys.readouterr().err


def test_the_dirty_label_covers_data(tmp_path):
    from mlsys_repro.common.repro.results import git_sha

    repo = tmp_path / "repo"
    write(repo / "data/codecs/table.csv", "a\n1\n")
    write(repo / "mlsys_repro/x.py", "X = 1\n")
    _commit_all(repo)
    assert not git_sha(str(repo)).endswith("-dirty")
    (repo / "data/codecs/table.csv").write_text("a\nnan\n")
    git_sha.cache_clear()  # memoised per process
    assert git_sha(str(repo)).endswith("-dirty")
