"""The runner: compose/validation errors, the long result format, resume and atomic writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from mlsys_repro.common.repro.config import build_context, compose, compose_run
from mlsys_repro.common.repro.errors import ConfigError, ResultSchemaError
from mlsys_repro.common.repro.results import PROVENANCE_COLUMNS, RESULT_COLUMNS, metric_rows, to_frame
from mlsys_repro.common.repro.run_all import main as run_all
from tests.conftest import ROOT, interrupt_when_started, write


def test_compose_applies_profile_overrides(toy_conf):
    spec = compose_run(["experiment=toy/costs", "profile=smoke"], conf_dir=toy_conf)
    ctx = build_context(spec)
    assert ctx.num_seeds == 3 and list(ctx.seeds()) == [0, 1, 2]
    assert list(ctx.policies) == ["fast", "slow"]
    spec2 = compose_run(["experiment=toy/costs", "profile=default"], conf_dir=toy_conf)
    assert build_context(spec2).num_seeds == 5 and spec2.config_hash != spec.config_hash


def test_policy_override_runs_only_that_policy(toy_conf):
    ctx = build_context(compose_run(["experiment=toy/costs", "policy=toy/slow"], conf_dir=toy_conf))
    assert list(ctx.policies) == ["slow"]


@pytest.mark.parametrize("override, needle", [
    ("experiment.params.scael=2", "scael"),           # typo in a params key
    ("experiment.params.scale=abc", "scale"),         # wrong type
    ("profile.num_seeds=0", "num_seeds"),             # invalid value (post-init check)
    ("profile=huge", "huge"),                         # unknown group option
    ("experiment.nme=x", "nme"),                      # typo in a schema'd node
])
def test_bad_config_fails_at_compose(toy_conf, override, needle):
    with pytest.raises(ConfigError, match=needle):
        compose(["experiment=toy/costs", override], conf_dir=toy_conf)


def test_policy_nodes_are_memoised_per_file_version(toy_conf):
    first = compose_run(["experiment=toy/costs"], conf_dir=toy_conf).policies
    again = compose_run(["experiment=toy/costs", "profile=smoke"], conf_dir=toy_conf).policies
    assert first["fast"] is again["fast"]  # composed once
    with pytest.raises(Exception, match="read-only"):  # shared, so nobody may change it
        first["fast"].name = "changed"
    p = toy_conf / "policy/toy/fast.yaml"
    p.write_text(p.read_text().replace("name: fast", "name: quick"))
    assert list(compose_run(["experiment=toy/costs"], conf_dir=toy_conf).policies) == ["quick", "slow"]


def test_typo_in_yaml_file_fails_at_compose(toy_conf):
    p = toy_conf / "policy/toy/fast.yaml"
    p.write_text(p.read_text() + "nmae: oops\n")
    with pytest.raises(ConfigError, match="nmae"):
        compose(["experiment=toy/costs"], conf_dir=toy_conf)


def test_unregistered_experiment_is_a_clear_error(toy_conf):
    write(toy_conf / "experiment/toy/ghost.yaml", """
        # @package _global_
        defaults:
          - /schema/experiment/default@experiment
          - override /paper: toy
          - _self_
        experiment:
          name: ghost
          paper: toy
    """)
    with pytest.raises(ConfigError, match=r"toy/ghost: its YAML must name its function, "
                                          r"fn: tests.fixtures.toy_paper.experiments:<function>"):
        compose(["experiment=toy/ghost"], conf_dir=toy_conf)


def test_result_rows_validation():
    rows = metric_rows("a", {"m": ([1.0, 2.0], "s")}, seeds=[0, 1])
    df = to_frame(rows, trace="t", hardware="h")
    assert list(df.columns) == list(RESULT_COLUMNS[2:])
    with pytest.raises(ResultSchemaError, match="non-finite"):
        to_frame(metric_rows("a", {"m": ([1.0, float("nan")], "s")}), trace="t", hardware="h")
    with pytest.raises(ResultSchemaError, match="lack columns"):
        to_frame([{"policy": "a", "value": 1.0}], trace="t", hardware="h")
    with pytest.raises(ResultSchemaError, match="set by the runner"):
        to_frame([{**rows[0], "paper": "x"}], trace="t", hardware="h")
    with pytest.raises(ResultSchemaError, match="2 values for 3 seeds"):
        metric_rows("a", {"m": ([1.0, 2.0], "s")}, seeds=[0, 1, 2])


def test_run_all_writes_long_format_and_resumes(toy_conf, tmp_path, capsys):
    res = tmp_path / "results"
    argv = ["--conf-dir", str(toy_conf), "--results-dir", str(res), "--profile", "smoke", "--only", "costs"]
    assert run_all(["toy", *argv]) == 0
    df = pd.read_csv(res / "toy/costs.csv")
    assert list(df.columns) == [*RESULT_COLUMNS, *PROVENANCE_COLUMNS]
    assert set(df["policy"]) == {"fast", "slow"} and df["seed"].nunique() == 3
    assert (res / "toy/claims.md").exists() and (res / "SUMMARY.md").exists()
    mtime = (res / "toy/costs.csv").stat().st_mtime_ns
    assert run_all(["toy", *argv]) == 0
    assert "fresh, skipped" in capsys.readouterr().out
    assert (res / "toy/costs.csv").stat().st_mtime_ns == mtime
    assert run_all(["toy", *argv, "-o", "experiment.params.scale=2.0"]) == 0  # new hash -> rerun
    assert pd.read_csv(res / "toy/costs.csv")["value"].mean() > df["value"].mean() * 1.5


def test_list_prints_every_experiment(toy_conf, capsys):
    assert run_all(["toy", "--list", "--conf-dir", str(toy_conf)]) == 0
    out = capsys.readouterr().out
    assert "toy/costs" in out and "toy/slow" in out


def test_unknown_paper_exits_2(toy_conf):
    assert run_all(["nopaper", "--conf-dir", str(toy_conf)]) == 2


def test_kill_midway_then_rerun_loses_nothing(toy_conf, tmp_path):
    """SIGKILL during the slow experiment: finished files stay intact, no temp/corrupt file; rerun completes."""
    res = tmp_path / "results"
    marker = tmp_path / "started"
    env = {**os.environ, "TOY_STARTED_MARKER": str(marker), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mlsys_repro.common.repro.run_all", "toy", "--profile", "smoke", "--no-claims",
           "--conf-dir", str(toy_conf), "--results-dir", str(res)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "slow experiment never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    costs = pd.read_csv(res / "toy/costs.csv")  # finished before the kill: complete and parseable
    assert len(costs) == 2 * 3
    assert not (res / "toy/slow.csv").exists()
    assert [p.name for p in (res / "toy").iterdir() if p.name.endswith(".tmp")] == []
    # Rerun (without the sleep, same config): costs is skipped (same hash), slow completes.
    out = subprocess.run(cmd, cwd=ROOT, env={**env, "TOY_STARTED_MARKER": "", "TOY_SKIP_SLEEP": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "toy/costs: fresh, skipped" in out.stdout
    assert len(pd.read_csv(res / "toy/slow.csv")) == 6
    pd.testing.assert_frame_equal(pd.read_csv(res / "toy/costs.csv"), costs)


def test_command_line_beats_the_profile(toy_conf):
    smoke = compose_run(["experiment=toy/costs", "profile=smoke"], conf_dir=toy_conf)
    assert build_context(smoke).num_seeds == 3  # the profile's value
    pinned = compose_run(["experiment=toy/costs", "profile=smoke", "experiment.num_seeds=2"], conf_dir=toy_conf)
    assert build_context(pinned).num_seeds == 2  # explicit value wins
    assert pinned.config_hash != smoke.config_hash  # and is a new config
    with pytest.raises(ConfigError, match="num_seeds"):  # and is type-checked, not silently dropped
        compose(["experiment=toy/costs", "profile=smoke", "experiment.num_seeds=abc"], conf_dir=toy_conf)


def test_second_concurrent_writer_is_refused(tmp_path):
    from mlsys_repro.common.repro.errors import RunLockedError
    from mlsys_repro.common.repro.run_all import result_lock

    target = tmp_path / "p/e.csv"
    with result_lock(target):
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            with result_lock(target):
                pass
    with result_lock(target):  # released afterwards
        pass


def test_known_errors_are_one_line_and_exit_2(toy_conf, tmp_path, capsys):
    bad = toy_conf / "experiment/toy/costs.yaml"
    bad.write_text(bad.read_text().replace("scale: 1.0", "scale: oops"))
    rc = run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path), "--only", "costs",
                  "--no-claims"])
    out = capsys.readouterr()
    assert rc == 2 and "FAILED" in out.out and "scale" in out.out and "Traceback" not in out.out + out.err


def test_results_are_world_readable(toy_conf, tmp_path):
    assert run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path), "--only", "costs",
                    "--profile", "smoke", "--no-claims"]) == 0
    assert (tmp_path / "toy/costs.csv").stat().st_mode & 0o777 == 0o644


def test_ctrl_c_stops_with_one_clear_line(toy_conf, tmp_path):
    res, marker = tmp_path / "results", tmp_path / "started"
    env = {**os.environ, "TOY_STARTED_MARKER": str(marker), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mlsys_repro.common.repro.run_all", "toy", "--profile", "smoke", "--no-claims",
           "--conf-dir", str(toy_conf), "--results-dir", str(res)]
    rc, out, err = interrupt_when_started(cmd, env, marker)
    assert rc == 130
    # Progress lines ("  [toy/costs] ...") may precede it; the interruption itself is one line, no traceback.
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("  [")]
    assert "Traceback" not in err and len(lines) == 1, err
    assert "1/2 experiments finished" in lines[0] and "Run the same command again" in lines[0]


def test_figures_say_profile_seeds_and_ci_and_whiskers_stay_non_negative(toy_conf, tmp_path):
    import matplotlib.pyplot as plt

    from mlsys_repro.common.repro.plots import CI_NOTE, bars_with_ci, figure

    df = pd.DataFrame({"policy": ["a"] * 3 + ["b"] * 3, "metric": "t", "value": [0.1, 0.0, 3.0, 5.0, 5.1, 4.9]})
    fig, ax = figure()
    bars_with_ci(ax[0, 0], df, "t")  # a's CI reaches far below 0; a time cannot
    from matplotlib.container import ErrorbarContainer

    eb = next(c for c in ax[0, 0].containers if isinstance(c, ErrorbarContainer))
    err = eb.lines[2][0].get_segments()
    assert min(seg[:, 1].min() for seg in err) == 0.0
    ctx = build_context(compose_run(["experiment=toy/costs", "profile=smoke"], conf_dir=toy_conf), out_dir=tmp_path)
    seen = {}
    orig = plt.Figure.savefig

    def spy(self, *a, **kw):
        seen["title"] = self._suptitle.get_text()
        return orig(self, *a, **kw)

    plt.Figure.savefig = spy
    try:
        path = ctx.save_figure(fig, "bars")
    finally:
        plt.Figure.savefig = orig
    assert path.exists() and "profile smoke" in seen["title"] and "3 seed(s)" in seen["title"]
    assert CI_NOTE in seen["title"].replace("\n", " ")


def test_figure_headers_wrap_to_the_figure_and_one_run_has_no_ci(toy_conf, tmp_path):
    import matplotlib.pyplot as plt

    from mlsys_repro.common.repro.plots import ONE_RUN_NOTE, figure, wrap_note

    long = "maifs/headline_philly, profile default, 5 seed(s); " + "error bars: 95 % CI of the mean over seeds " * 3
    narrow = wrap_note(long, 3.0)
    assert narrow.replace("\n", " ") == " ".join(long.split())
    assert narrow.count("\n") >= 2 and max(len(x) for x in narrow.split("\n")) <= int(3.0 * 72 / (0.55 * 7))
    assert "\n" not in wrap_note("short", 6.0)
    ctx = build_context(compose_run(["experiment=toy/costs", "profile=smoke", "experiment.num_seeds=1"],
                                    conf_dir=toy_conf), out_dir=tmp_path)
    seen = {}
    orig = plt.Figure.savefig

    def spy(self, *a, **kw):
        seen["title"] = self._suptitle.get_text()
        return orig(self, *a, **kw)

    fig, _ = figure()
    plt.Figure.savefig = spy
    try:
        ctx.save_figure(fig, "bars")
    finally:
        plt.Figure.savefig = orig
    assert ONE_RUN_NOTE in seen["title"].replace("\n", " ") and "95 % CI" not in seen["title"]


def test_manifest_lists_the_figures_the_run_saved(toy_conf, tmp_path, monkeypatch):
    """The reviewer's page takes an experiment's figures from its manifest (names alone cannot tell ``accuracy_*``
    from another experiment ``accuracy_cifar10``'s figures)."""
    import json

    monkeypatch.setenv("TOY_FIGURE", "1")
    assert run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path), "--only", "costs",
                    "--profile", "smoke", "--no-claims"]) == 0
    man = json.loads((tmp_path / "toy/costs.manifest.json").read_text())
    assert man["figures"] == ["costs_bars.png"] and (tmp_path / "toy/costs_bars.png").is_file()


def test_every_figure_gets_the_one_house_style():
    """plots.STYLE is applied on import and by figure(), even after something reset matplotlib's parameters."""
    import matplotlib
    import matplotlib.pyplot as plt

    from mlsys_repro.common.repro.plots import STYLE, figure

    plt.rcdefaults()
    fig, ax = figure()
    try:
        for key, value in STYLE.items():
            assert matplotlib.rcParams[key] == value, key
        assert all(g.get_visible() for g in ax[0, 0].yaxis.get_gridlines())  # the style's grid, not the default
    finally:
        plt.close(fig)


def test_grouped_bars_and_bands_stop_at_a_physical_zero():
    """Grouped bars (``hue``: e.g. one bar per attacker within each method) and CI bands of a non-negative metric
    never reach below 0; a metric with negative values keeps its full interval."""
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer, ErrorbarContainer

    from mlsys_repro.common.repro.plots import bars_with_ci, figure, lines_with_ci

    acc = [0.0, 0.0, 0.5, 0.9, 0.8, 0.85]  # attack accuracy: mean 0.17, CI far below 0
    df = pd.DataFrame({"policy": ["m1"] * 6 + ["m2"] * 6, "attacker": (["init"] * 3 + ["zo"] * 3) * 2,
                       "metric": "acc", "value": acc + acc[::-1]})
    fig, ax = figure(ncols=2)
    try:
        bars_with_ci(ax[0, 0], df, "acc", hue="attacker")
        bars = [c for c in ax[0, 0].containers if isinstance(c, BarContainer)]
        assert [len(b) for b in bars] == [2, 2]  # 2 attackers x 2 methods
        assert [t.get_text() for t in ax[0, 0].get_legend().get_texts()] == ["init", "zo"]
        lows = [seg[:, 1].min() for c in ax[0, 0].containers if isinstance(c, ErrorbarContainer)
                for seg in c.lines[2][0].get_segments()]
        assert min(lows) == 0.0
        curve = pd.DataFrame({"policy": "m1", "metric": "acc", "step": [1, 1, 1, 2, 2, 2],
                              "value": [0.0, 0.0, 0.5, 0.1, 0.0, 0.6]})
        lines_with_ci(ax[0, 1], curve, "acc", x="step")
        assert ax[0, 1].collections[0].get_paths()[0].vertices[:, 1].min() == 0.0
        ax[0, 1].clear()  # a difference may be negative: its interval is not cut
        lines_with_ci(ax[0, 1], curve.assign(value=curve["value"] - 0.5), "acc", x="step")
        assert ax[0, 1].collections[0].get_paths()[0].vertices[:, 1].min() < -0.5
    finally:
        plt.close(fig)


def test_release_compiled_drops_executables():
    import jax
    import jax.numpy as jnp

    from mlsys_repro.common.repro.run_all import release_compiled

    f = jax.jit(lambda x: x * 2 + 1)
    f(jnp.ones(3))
    assert f._cache_size() == 1
    release_compiled()
    assert f._cache_size() == 0
    assert float(f(jnp.ones(3))[0]) == 3.0  # recompiles on demand


def test_run_all_releases_compiled_code_before_every_experiment(toy_conf, tmp_path, monkeypatch):
    import mlsys_repro.common.repro.run_all as ra

    calls = []
    monkeypatch.setattr(ra, "release_compiled", lambda: calls.append(1))
    monkeypatch.setenv("TOY_SKIP_SLEEP", "1")  # toy/slow's 30 s sleep is for the kill/resume tests (CI time)
    assert run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path), "--profile", "smoke",
                    "--no-claims"]) == 0
    assert len(calls) == len(ra.experiments_of("toy", str(toy_conf))) == 2


def test_checkpoints_are_keyed_by_config_and_code(toy_conf, tmp_path, monkeypatch):
    """A rerun after a code change must not resume training state saved by the old code: the checkpoint folder
    carries the paper's code fingerprint beside the config hash."""
    import mlsys_repro.common.repro.freshness as freshness

    over = ["experiment=toy/costs", "profile=smoke", f"paths.checkpoint_dir={tmp_path}"]
    spec = compose_run(over, conf_dir=toy_conf)
    monkeypatch.setattr(freshness, "code_fingerprint", lambda root, pkg: ("a" * 64, 3))
    old = build_context(spec).checkpoint_dir
    monkeypatch.setattr(freshness, "code_fingerprint", lambda root, pkg: ("b" * 64, 3))
    new = build_context(spec).checkpoint_dir
    assert old != new and old.parent == new.parent == tmp_path / "toy"
    assert old.name == f"costs-{spec.config_hash}-{'a' * 12}" and new.name.endswith("b" * 12)


def test_a_key_no_dataclass_declares_and_a_negative_seed_are_named_at_compose():
    """Hydra's ``+hardware.port_gbsp=12`` used to add a key that changed the hash and was ignored."""
    with pytest.raises(ConfigError, match=r"unknown key 'hardware.port_gbsp' \(did you mean 'hardware.port_gbps'\?\)"):
        compose_run(["experiment=swallow/headline", "+hardware.port_gbsp=12"])
    with pytest.raises(ConfigError, match="experiment.seed must be >= 0, got -1"):
        compose_run(["experiment=swallow/headline", "experiment.seed=-1"])


@pytest.mark.parametrize("override, needle", [
    ("experiment.params.max_coflows=-3", "max_coflows must be >= 1 or null, got -3"),
    ("experiment.params.jct_sigma=-1", "jct_sigma must be >= 0, got -1.0"),
])
def test_parameter_ranges_are_named_at_compose(override, needle):
    """A bad range used to end as CRASHED: ValueError after 22 s of simulation, without the key."""
    with pytest.raises(ConfigError, match=f"experiment swallow/headline params: {needle}"):
        compose_run(["experiment=swallow/headline", override])
