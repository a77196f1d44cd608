"""The paper layout rules of issue #19, checked statically on the source.

A paper is *moved* to the one-driver design when every experiment YAML of it names its function (``fn``); a moved
paper registers nothing with the legacy decorator and keeps no mutable module-level cache (``functools.cache`` /
``lru_cache`` on module functions, or a module-level dict/list filled from functions): what several experiments
share goes through the run-scoped ``ctx.cache``. ``NOT_YET_MOVED`` lists the papers still on the old path; it may
only shrink (the test fails if it lists a moved paper or omits an unmoved one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from common.repro.config import experiments_of, papers_in_conf
from tests.conftest import ROOT

NOT_YET_MOVED = {"evogwp", "fedfoa"}


def _fn_declared(paper: str) -> list[bool]:
    out = []
    for name in experiments_of(paper):
        doc = yaml.safe_load((ROOT / "conf/experiment" / paper / f"{name}.yaml").read_text())
        out.append(bool((doc.get("experiment") or {}).get("fn")))
    return out


def _moved(paper: str) -> bool:
    return all(_fn_declared(paper))


def test_no_paper_is_half_moved():
    half = [p for p in papers_in_conf() if len(set(_fn_declared(p))) > 1]
    assert not half, f"papers with fn on some experiments only: {half}"


def test_not_yet_moved_list_is_current():
    assert {p for p in papers_in_conf() if not _moved(p)} == NOT_YET_MOVED


def module_caches(source: str) -> list[str]:
    """Names of mutable module-level caches in ``source``: cached module functions, and module-level containers
    that some function writes into (subscript assignment or a mutating method)."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                name = ast.unparse(target)
                if name.split(".")[-1] in ("cache", "lru_cache", "cached_property"):
                    found.append(f"@{name} {node.name}")
    containers = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        value = getattr(node, "value", None)
        empty = isinstance(value, (ast.Dict, ast.List, ast.Set)) and not getattr(value, "keys", getattr(
            value, "elts", [])) or isinstance(value, ast.Call) and ast.unparse(value.func) in ("dict", "list", "set")
        if empty:
            containers |= {t.id for t in targets if isinstance(t, ast.Name)}
    mutators = {"setdefault", "update", "append", "add", "extend", "__setitem__"}
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for n in ast.walk(fn):
            if isinstance(n, (ast.Assign, ast.AugAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in containers:
                        found.append(f"{t.value.id}[...] =")
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in mutators \
                    and isinstance(n.func.value, ast.Name) and n.func.value.id in containers:
                found.append(f"{n.func.value.id}.{n.func.attr}()")
    return sorted(set(found))


def test_module_cache_detector_on_hand_made_sources():
    src = '''
import functools
_TASKS = {}
_CONST = {"a": 1}
LIMITS: dict = {}

@functools.cache
def a(x): return x

@functools.lru_cache(maxsize=4)
def b(x): return x

def c(k):
    _TASKS[k] = 1
    LIMITS.setdefault(k, 2)
    return _CONST[k]
'''
    assert module_caches(src) == ["@functools.cache a", "@functools.lru_cache b", "LIMITS.setdefault()",
                                  "_TASKS[...] ="]
    assert module_caches("X = {}\ndef f():\n    return X.get(1)\n") == []


MOVED = [p for p in papers_in_conf() if _moved(p)]


@pytest.mark.parametrize("paper", MOVED)
def test_moved_paper_keeps_no_module_cache_and_no_decorator(paper):
    bad = {}
    for f in sorted((ROOT / "papers" / paper).rglob("*.py")):
        src = f.read_text()
        hits = module_caches(src)
        if "@experiment(" in src:
            hits.append("@experiment decorator")
        if hits:
            bad[str(f.relative_to(ROOT))] = hits
    assert not bad, bad


@pytest.mark.parametrize("paper", MOVED)
def test_moved_paper_fn_points_at_its_own_package(paper):
    for name in experiments_of(paper):
        doc = yaml.safe_load((ROOT / "conf/experiment" / paper / f"{name}.yaml").read_text())
        fn = doc["experiment"]["fn"]
        assert fn.startswith(f"papers.{paper}."), fn
        assert Path(ROOT, *fn.split(":")[0].split(".")).with_suffix(".py").is_file(), fn
