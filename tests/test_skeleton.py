"""The skeleton paper of templates/paper/ (issue #51): it follows the fixed paper layout, as shipped and as copied by
the shell block of templates/paper/README.md; its simulator is right on hand-made cases and against Lindley's
recursion; and it runs end to end through ``run_all`` (from a scratch copy of ``conf/`` with templates/paper/conf/
over it) to a verdict for its claim, and its benchmark runs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mlsys_repro.common.repro.claims.report import README_BEGIN, README_END
from mlsys_repro.common.repro.run_all import main as run_all
from tests.conftest import ROOT
from tests.test_layout import REQUIRED, layout_problems, module_caches, paper_imports

TEMPLATE = ROOT / "templates" / "paper"
PKG = TEMPLATE / "skeleton"


def _as_registered(source: str, key: str) -> str:
    """``source`` with the package's own imports as they read once it lives in ``mlsys_repro/papers/<key>/``."""
    return re.sub(r"\bskeleton\.(schemas|data|sim|pipeline|experiments|bench)\b", rf"mlsys_repro.papers.{key}.\1",
                  source).replace("from skeleton import", f"from mlsys_repro.papers.{key} import")


def test_the_skeleton_follows_the_fixed_layout():
    modules = {p.stem: p.read_text() for p in PKG.glob("*.py")}
    assert set(REQUIRED) | {"sim"} <= set(modules)
    readme = (PKG / "README.md").read_text()
    registered = {name: _as_registered(src, "skeleton") for name, src in modules.items()}
    assert layout_problems(registered, "skeleton", readme) == []
    assert paper_imports(registered["pipeline"], "skeleton") == {"data", "schemas", "sim"}  # the check saw them
    assert not {name: module_caches(src) for name, src in modules.items() if module_caches(src)}
    assert (PKG / "claims.yaml").is_file()
    assert README_BEGIN in readme and readme.index(README_BEGIN) < readme.index(README_END)


def test_the_readme_copy_makes_a_paper_in_the_fixed_layout(tmp_path: Path):
    """Run the README's copy block in a scratch tree: the copy is renamed through and still in the fixed layout."""
    block = re.search(r"```bash\n(.*?)```", (TEMPLATE / "README.md").read_text(), re.S).group(1)
    assert "KEY=mypaper\n" in block
    shutil.copytree(TEMPLATE, tmp_path / "templates/paper", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("KEY=mypaper", "KEY=toyq")], cwd=tmp_path,
                   check=True)
    pkg = tmp_path / "mlsys_repro/papers/toyq"
    modules = {p.stem: p.read_text() for p in pkg.glob("*.py")}
    assert set(modules) == {p.stem for p in PKG.glob("*.py")}
    assert layout_problems(modules, "toyq", (pkg / "README.md").read_text()) == []
    assert paper_imports(modules["pipeline"], "toyq") == {"data", "schemas", "sim"}
    assert paper_imports(modules["experiments"], "toyq") == {"pipeline"}
    copied = [*pkg.iterdir(), *(tmp_path / "conf").rglob("*.yaml")]
    assert len(copied) == len([p for p in PKG.iterdir() if p.is_file()]) + 5
    assert not [p.name for p in copied if "skeleton" in p.read_text()]
    paper = yaml.safe_load((tmp_path / "conf/paper/toyq.yaml").read_text())
    exp = yaml.safe_load((tmp_path / "conf/experiment/toyq/headline.yaml").read_text())
    assert paper["module"] == "mlsys_repro.papers.toyq" and paper["key"] == "toyq"
    assert exp["experiment"]["fn"] == "mlsys_repro.papers.toyq.experiments:headline"
    assert "override /hardware: toyq_queue" in (tmp_path / "conf/experiment/toyq/headline.yaml").read_text()


@pytest.fixture
def skeleton_conf(tmp_path: Path, monkeypatch) -> Path:
    """A copy of conf/ with the skeleton's conf files over it, and ``skeleton`` importable."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    shutil.copytree(TEMPLATE / "conf", conf, dirs_exist_ok=True)
    monkeypatch.syspath_prepend(str(TEMPLATE))
    return conf


def test_the_simulator_on_hand_made_queues(skeleton_conf):
    from skeleton import sim

    arrival, service = np.array([[0.0, 0.1, 0.2], [0.0, 5.0, 5.5]]), np.array([[1.0, 0.5, 0.2], [1.0, 1.0, 0.25]])
    fifo = np.asarray(sim.simulate_seeds(arrival, service, sim.FIFO))
    sjf = np.asarray(sim.simulate_seeds(arrival, service, sim.SJF))
    np.testing.assert_allclose(fifo, [[0.0, 0.9, 1.3], [0.0, 0.0, 0.5]], atol=1e-6)  # idle until 5 s in seed 1
    np.testing.assert_allclose(sjf, [[0.0, 1.1, 0.8], [0.0, 0.0, 0.5]], atol=1e-6)  # non-preemptive: job 0 runs on


def test_fifo_matches_lindleys_recursion_and_sjf_waits_less(skeleton_conf):
    from skeleton import sim
    from skeleton.data import draw_jobs
    from skeleton.pipeline import sim_inputs
    from skeleton.schemas import QueueServer

    arrival, service = sim_inputs(QueueServer(name="q", service_rate=2.0), draw_jobs((0, 1, 2), 300), 0.8)
    a, s = np.asarray(arrival, np.float64), np.asarray(service, np.float64)
    lindley = np.zeros_like(a)
    for k in range(1, a.shape[1]):
        lindley[:, k] = np.maximum(0.0, lindley[:, k - 1] + s[:, k - 1] - (a[:, k] - a[:, k - 1]))
    np.testing.assert_allclose(np.asarray(sim.simulate_seeds(arrival, service, sim.FIFO)), lindley, atol=1e-3)
    sjf = np.asarray(sim.simulate_seeds(arrival, service, sim.SJF))
    assert (sjf.mean(axis=1) < lindley.mean(axis=1)).all()


def test_the_skeleton_runs_end_to_end_to_a_verdict(skeleton_conf, tmp_path, capsys):
    res = tmp_path / "res"
    assert run_all(["skeleton", "--conf-dir", str(skeleton_conf), "--results-dir", str(res), "--profile",
                    "smoke"]) == 0
    out = capsys.readouterr().out
    rows = pd.read_csv(res / "skeleton/headline.csv")
    assert set(rows.policy) == {"sjf", "fifo"} and set(rows.metric) == {"mean_wait_s", "p95_wait_s"}
    assert sorted(rows.seed.unique()) == [0, 1] and np.isfinite(rows.value).all()
    assert (res / "skeleton/headline_wait.png").is_file()
    verdicts = pd.read_csv(res / "skeleton/claims.csv").set_index("claim")
    # smoke: 64 jobs from an empty queue wait less than the steady state, so only the direction is expected
    assert verdicts.loc["sjf_mean_wait_gain", "verdict"] in ("REPRODUCED", "DIRECTION_ONLY")
    assert verdicts.loc["sjf_mean_wait_gain", "mean"] > 1.0
    last = [ln for ln in out.splitlines() if ln.startswith("== counted claims of skeleton:")]
    assert last and re.search(r"(REPRODUCED|DIRECTION_ONLY) 1", last[0]), out[-2000:]
    assert str(res / "index.html") in last[0]


def test_the_skeleton_bench_prints_its_figures(skeleton_conf, monkeypatch, capsys):
    monkeypatch.setattr("mlsys_repro.common.repro.config.CONF_DIR", skeleton_conf)  # where bench_context composes
    from skeleton import bench

    bench.main(["--jobs", "64", "--seeds", "2", "--repeats", "1"])
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "fifo: 2 seeds x 64 jobs" in out and "sjf: 2 seeds x 64 jobs" in out
