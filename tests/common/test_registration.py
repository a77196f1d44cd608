"""Experiment registration in YAML (``fn``, ``params_class``), one compose per experiment, and the run-scoped cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlsys_repro.common.repro import config as config_mod
from mlsys_repro.common.repro.cache import RunCache, cache_key
from mlsys_repro.common.repro.config import ConfigError, compose_run
from mlsys_repro.common.repro.run_all import run_experiment
from tests.conftest import write

TOY = "tests.fixtures.toy_paper.experiments"


def _experiment(conf, name: str, extra: str) -> None:
    path = write(conf / f"experiment/toy/{name}.yaml", """
        # @package _global_
        defaults:
          - /schema/experiment/default@experiment
          - override /paper: toy
          - _self_
        experiment:
          policies: [fast]
    """)
    path.write_text(path.read_text() + extra)


def test_fn_in_yaml_names_the_function_and_its_params(toy_conf):
    from tests.fixtures.toy_paper.experiments import ToyParams, costs

    spec = compose_run(["experiment=toy/costs"], conf_dir=toy_conf)
    assert spec.fn is costs and isinstance(spec.params, ToyParams)
    assert spec.params.scale == 1.0 and spec.label == "toy/costs"


@pytest.mark.parametrize("extra, needle", [
    ("  fn: mlsys_repro.common.repro.cache:cache_key\n", "outside the paper's package"),  # fingerprint would miss it
    (f"  fn: {TOY}:cots\n", "did you mean 'costs'"),                                # typo in the name
    ("  fn: tests.fixtures.toy_paper.nope:costs\n", "cannot import"),              # typo in the module
    (f"  fn: {TOY}.costs\n", "package.module:name"),                                # no colon
    (f"  fn: {TOY}:ToyParams\n  params_class: {TOY}:costs\n", "not a dataclass"),  # swapped
    (f"  params_class: {TOY}:ToyParams\n", "params_class is set but fn is not"),
    (f"  fn: {TOY}:costs\n  params:\n    scael: 2\n", "scael"),                     # params checked by the class
    (f"  fn: {TOY}:costs\n  params_class: null\n  params:\n    scale: 2\n", "takes no params"),
])
def test_bad_registration_is_a_clear_error_at_compose(toy_conf, extra, needle):
    _experiment(toy_conf, "reg", extra)
    with pytest.raises(ConfigError, match=needle):
        compose_run(["experiment=toy/reg"], conf_dir=toy_conf)


def test_the_path_names_the_experiment(toy_conf):
    """``conf/experiment/<paper>/<name>.yaml`` is the one place an experiment's paper and name are written: a file
    without the keys gets them from its path, and one that states them must agree with it."""
    spec = compose_run(["experiment=toy/costs"], conf_dir=toy_conf)  # its file states neither key
    assert (spec.experiment.paper, spec.experiment.name) == ("toy", "costs")
    stated = compose_run(["experiment=toy/slow"], conf_dir=toy_conf)  # states both, equal to its path
    assert (stated.experiment.paper, stated.experiment.name) == ("toy", "slow")
    assert "name:" not in (toy_conf / "experiment/toy/costs.yaml").read_text()
    path = toy_conf / "experiment/toy/renamed.yaml"
    path.write_text((toy_conf / "experiment/toy/slow.yaml").read_text())  # a copy that kept the old name
    with pytest.raises(ConfigError, match="its file says name: 'slow', its path says 'renamed'"):
        compose_run(["experiment=toy/renamed"], conf_dir=toy_conf)
    path.write_text((toy_conf / "experiment/toy/slow.yaml").read_text().replace("\n  paper: toy", "\n  paper: other"))
    with pytest.raises(ConfigError, match="its file says paper: 'other'"):
        compose_run(["experiment=toy/renamed"], conf_dir=toy_conf)


def test_fn_and_params_class_enter_the_config_hash(toy_conf):
    """The registration is part of the configuration: pointing ``fn`` elsewhere is a new config."""
    costs = compose_run(["experiment=toy/costs"], conf_dir=toy_conf)
    text = config_mod.resolved_for_hash(costs.cfg, costs.policies, costs.experiment)
    assert f"fn: {TOY}:costs" in text and f"params_class: {TOY}:ToyParams" in text
    slow = compose_run(["experiment=toy/slow"], conf_dir=toy_conf)
    assert f"fn: {TOY}:slow" in config_mod.resolved_for_hash(slow.cfg, slow.policies, slow.experiment)


def test_policy_fields_a_tuning_experiment_sets_are_left_out_of_its_hash(toy_conf):
    """``tunes`` names the policy fields an experiment's grid sets itself: copying its pick into a policy config
    leaves its hash (and so its stored result) as it was, while an empty list hashes as if absent (every other
    experiment's stored hash is unchanged) and an untuned field still counts."""
    exp_path, pol_path = toy_conf / "experiment/toy/costs.yaml", toy_conf / "policy/toy/fast.yaml"
    exp_text, pol_text = exp_path.read_text(), pol_path.read_text()

    def hashed(tunes: str | None, description: str) -> str:
        exp_path.write_text(exp_text + ("" if tunes is None else f"  tunes: {tunes}\n"))
        pol_path.write_text(pol_text.replace("name: fast", f"name: fast\ndescription: {description}"))
        run = compose_run(["experiment=toy/costs"], conf_dir=toy_conf)
        return config_mod.resolved_for_hash(run.cfg, run.policies, run.experiment)

    assert hashed("[]", "a") == hashed(None, "a") != hashed(None, "b")
    assert hashed("[description]", "a") == hashed("[description]", "b") != hashed(None, "a")
    assert "tunes" not in hashed("[description]", "a") and "description: a" not in hashed("[description]", "a")


def test_one_experiment_composes_once_and_merges_its_node_once(toy_conf, tmp_path, monkeypatch):
    """Composing and running one experiment: one Hydra compose for the experiment, one per policy file the process
    has not composed yet (memoised), one merge of the experiment node, params built once; the run itself composes
    nothing."""
    calls = {"compose": 0, "merge": 0, "params": 0}

    def counting(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(config_mod, "hydra_compose", counting("compose", config_mod.hydra_compose))
    monkeypatch.setattr(config_mod, "experiment_node", counting("merge", config_mod.experiment_node))
    monkeypatch.setattr(config_mod, "_params", counting("params", config_mod._params))
    config_mod._policy_node.cache_clear()
    spec = compose_run(["experiment=toy/costs", "profile=smoke"], conf_dir=toy_conf)
    assert calls == {"compose": 1 + 2, "merge": 1, "params": 1}  # the experiment, then its two policies
    run_experiment(spec, tmp_path, log=lambda *_: None)
    assert calls == {"compose": 3, "merge": 1, "params": 1}
    compose_run(["experiment=toy/costs", "profile=default"], conf_dir=toy_conf)
    assert calls["compose"] == 4  # policies are memoised across experiments


def test_run_spec_is_read_only(toy_conf):
    spec = compose_run(["experiment=toy/costs"], conf_dir=toy_conf)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.fn = None  # type: ignore[misc]
    with pytest.raises(Exception, match="read-only"):
        spec.experiment.num_seeds = 99
    with pytest.raises(Exception, match="read-only"):
        spec.cfg.profile.num_seeds = 99


@dataclasses.dataclass(frozen=True)
class _Conf:
    n: int
    rates: tuple[float, ...] = (1.0, 2.0)


def test_cache_key_separates_configs_and_equates_equal_ones():
    assert cache_key(_Conf(3)) == cache_key(_Conf(3))
    assert cache_key(_Conf(3)) != cache_key(_Conf(4))
    assert cache_key(_Conf(3, (1.0, 2.0))) != cache_key(_Conf(3, (1.0, 2.5)))
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})  # mapping order does not matter
    assert cache_key([1, 2]) != cache_key([2, 1])  # sequence order does
    a = np.arange(2000, dtype=np.float32)
    b = a.copy()
    b[1500] += 1  # beyond what repr() of an array would print
    assert cache_key(a) == cache_key(a.copy()) and cache_key(a) != cache_key(b)
    assert cache_key(1) != cache_key(1.0) != cache_key("1")
    assert cache_key(np.float32(1.5)) != cache_key(np.float64(1.5))


def test_cache_key_refuses_what_it_cannot_read():
    with pytest.raises(TypeError, match="cannot key on a object"):
        cache_key(object())

    def make(k):
        return lambda x: x * k

    with pytest.raises(TypeError, match="closure"):  # make(1) and make(2) share a name, not their behaviour
        cache_key(make(1))
    assert cache_key(cache_key) == cache_key(cache_key)  # a module-level function is keyed by its name


def test_run_cache_builds_once_per_kind_and_config():
    cache, built = RunCache(), []

    def build(x):
        built.append(x)
        return [x]

    v1 = cache.get("task", _Conf(1), lambda: build(1))
    v2 = cache.get("task", _Conf(1), lambda: build(1))
    v3 = cache.get("task", _Conf(2), lambda: build(2))
    v4 = cache.get("agent", _Conf(1), lambda: build(1))
    assert v1 is v2 and v3 == [2] and v4 is not v1
    assert built == [1, 2, 1] and (cache.hits, cache.misses, len(cache)) == (1, 3, 3)
    assert ("task", _Conf(2)) in cache and ("task", _Conf(5)) not in cache
    t = cache.table("compiled")
    t["f"] = 1
    assert cache.table("compiled") is t and cache.table("other") is not t


def test_run_all_shares_one_cache_across_the_experiments_of_a_run(toy_conf, tmp_path, monkeypatch):
    """Every experiment of one run_all process gets the same RunCache."""
    from mlsys_repro.common.repro import run_all

    seen = []
    orig = run_all.build_context

    def spy(spec, out_dir=None, cache=None):
        seen.append(cache)
        return orig(spec, out_dir, cache)

    monkeypatch.setattr(run_all, "build_context", spy)
    rc = run_all.main(["toy", "--profile", "smoke", "--conf-dir", str(toy_conf), "--results-dir", str(tmp_path),
                       "--no-claims", "--override", "experiment.params.sleep_s=0"])
    assert rc == 0 and len(seen) == 2 and seen[0] is seen[1] and isinstance(seen[0], RunCache)


@pytest.mark.parametrize("overrides, expect", [
    (["experiment=swallow/headline", "profile=smoke"], {"swallow"}),
    (["+experiment=petrel/headline", "policy=petrel/casp"], {"petrel"}),
    (["paper=maifs"], {"maifs"}),
    (["profile=smoke"], None),
    (["experiment=headline"], None),  # no paper named: register every paper's schemas
])
def test_papers_selected_by_overrides(overrides, expect):
    assert config_mod.papers_selected(overrides) == expect


def test_composing_one_papers_experiment_imports_no_other_paper():
    """The schema scan is limited to the paper being composed (fresh process: nothing imported before)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("import sys; from mlsys_repro.common.repro.config import compose_run; "
            "compose_run(['experiment=swallow/headline']);print(sorted({m.split('.')[2] for m in sys.modules if "
            "m.startswith('mlsys_repro.papers.')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['swallow']"
