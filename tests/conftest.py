"""Shared fixtures: CPU-only JAX, and a scratch conf tree with the toy paper for runner/claims tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# CI time is mostly XLA:CPU compilation of small programs: backend optimisation level 1 compiles them about twice
# as fast (measured on the FedFoA programs), and XLA:CPU's legacy loop emitters instead of the MLIR fusion emitters
# another ~30 % (jaxlib 0.10.2, 2-core EPYC: three slow tests 133 -> 96 s, maifs/headline_philly's smoke compile
# 85 -> 45 s; level 0 on top is slower to run). Inherited by the subprocesses tests start; results are compared
# only within one setting (never against committed default-profile numbers).
for _flag in ("--xla_backend_optimization_level=1", "--xla_cpu_use_fusion_emitters=false"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
# Persistent XLA compile cache shared by the xdist workers and the subprocesses tests start (same programs are
# compiled by several tests); git-ignored.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".jax_cache"))

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def interrupt_when_started(cmd: list[str], env: dict[str, str], marker: Path) -> tuple[int, str, str]:
    """Run ``cmd`` from the repository root, send it SIGINT once ``marker`` exists (the toy experiment writes it
    when it starts), and return ``(returncode, stdout, stderr)``.

    A shell's background job (``pytest ... &``) starts with SIGINT ignored and children inherit that: the child
    gets the default handler, as an interactive Ctrl-C would find it."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@pytest.fixture
def toy_conf(tmp_path: Path) -> Path:
    """A copy of conf/ plus the toy paper (two policies, two experiments)."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    write(conf / "paper/toy.yaml", """
        defaults:
          - /schema/paper/default@_here_
          - _self_
        key: toy
        title: Toy paper for runner tests
        module: tests.fixtures.toy_paper
    """)
    for name in ("fast", "slow"):
        write(conf / f"policy/toy/{name}.yaml", f"""
            defaults:
              - /schema/policy/base@_here_
              - _self_
            name: {name}
        """)
    toy = "tests.fixtures.toy_paper.experiments"  # each experiment registered in its YAML (fn, params_class)
    registration = {e: f"\n              fn: {toy}:{e}\n              params_class: {toy}:ToyParams"
                    for e in ("costs", "slow")}
    # the path names an experiment; a file may still state the same name and paper (slow does)
    identity = {"costs": "", "slow": "\n              name: slow\n              paper: toy"}
    for exp, sleep in (("costs", 0.0), ("slow", 30.0)):
        write(conf / f"experiment/toy/{exp}.yaml", f"""
            # @package _global_
            defaults:
              - /schema/experiment/default@experiment
              - override /paper: toy
              - _self_
            experiment:{identity[exp]}
              title: toy {exp}{registration[exp]}
              policies: [fast, slow]
              params:
                scale: 1.0
                sleep_s: {sleep}
              profiles:
                smoke:
                  num_seeds: 3
        """)
    return conf


# Tests that each take a minute or more on the 2-core CI machine (end-to-end smoke runs, kill-and-resume,
# installs), measured with `pytest --durations`. They are scheduled first, so that the two xdist workers end on
# short tests instead of one worker idling while the other finishes a long one.
LONG_FIRST = ("tests/test_configs.py::test_experiment_smoke_run", "tests/test_determinism.py", "tests/test_resume.py",
              "tests/test_packaging.py", "tests/papers/maifs/")


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda it: not it.nodeid.startswith(LONG_FIRST))  # stable: the order within each group is kept
