"""The run cache gives compiled programs' memory mappings back before the process reaches the kernel's limit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mlsys_repro.common.repro import cache as cache_mod
from mlsys_repro.common.repro.cache import RunCache, mapping_count, mapping_limit, release_if_mapping_pressure


def _compiled_once():
    f = jax.jit(lambda x: x * 2.0 + 1.0)
    f(jnp.ones(3))
    assert f._cache_size() == 1
    return f


def test_mapping_count_and_limit_read_procfs():
    n, limit = mapping_count(), mapping_limit()
    if n is None or limit is None:
        pytest.skip("no /proc here")
    assert 0 < n < limit


def test_release_only_above_the_fraction(monkeypatch):
    monkeypatch.setattr(cache_mod, "mapping_limit", lambda: 1000)
    f = _compiled_once()
    monkeypatch.setattr(cache_mod, "mapping_count", lambda: 499)
    assert release_if_mapping_pressure(0.5) is False
    assert f._cache_size() == 1  # below half the limit: nothing dropped
    monkeypatch.setattr(cache_mod, "mapping_count", lambda: 500)
    assert release_if_mapping_pressure(0.5) is True
    assert f._cache_size() == 0  # the executable is gone ...
    assert float(f(jnp.ones(3))[0]) == 3.0  # ... and recompiles to the same function on demand


def test_release_without_procfs_is_a_no_op(monkeypatch):
    monkeypatch.setattr(cache_mod, "mapping_count", lambda: None)
    f = _compiled_once()
    assert release_if_mapping_pressure(0.5) is False and f._cache_size() == 1


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_release_rejects_a_bad_fraction(fraction):
    with pytest.raises(ValueError, match="fraction"):
        release_if_mapping_pressure(fraction)


def test_run_cache_checks_before_every_build_and_never_on_a_hit(monkeypatch):
    calls = []
    monkeypatch.setattr(cache_mod, "release_if_mapping_pressure", lambda: calls.append(1) or False)
    c = RunCache()
    assert c.get("k", 1, lambda: "a") == "a" and len(calls) == 1
    assert c.get("k", 1, lambda: "b") == "a" and len(calls) == 1  # a hit builds nothing, checks nothing
    assert c.get("k", 2, lambda: "c") == "c" and len(calls) == 2
