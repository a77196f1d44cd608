"""The paper layout rules of issue #19, checked statically on the source.

Every experiment YAML names its function (``fn``, inside the paper's own package); no paper keeps a mutable
module-level cache (``functools.cache`` / ``lru_cache`` on module functions, or a module-level dict/list filled from
functions): what several experiments share goes through the run-scoped ``ctx.cache``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from mlsys_repro.common.repro.config import experiments_of, papers_in_conf
from tests.conftest import ROOT

PAPERS = papers_in_conf()


def _registration(paper: str, name: str) -> dict:
    doc = yaml.safe_load((ROOT / "conf/experiment" / paper / f"{name}.yaml").read_text())
    return doc.get("experiment") or {}


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


def test_every_paper_is_listed():
    assert len(PAPERS) == 8, PAPERS


@pytest.mark.parametrize("paper", PAPERS)
def test_paper_keeps_no_module_cache(paper):
    bad = {}
    for f in sorted((ROOT / "mlsys_repro" / "papers" / paper).rglob("*.py")):
        hits = module_caches(f.read_text())
        if hits:
            bad[str(f.relative_to(ROOT))] = hits
    assert not bad, bad


@pytest.mark.parametrize("paper", PAPERS)
def test_every_experiment_names_its_function_in_its_own_package(paper):
    for name in experiments_of(paper):
        fn = _registration(paper, name).get("fn")
        assert fn, f"conf/experiment/{paper}/{name}.yaml names no fn"
        assert fn.startswith(f"mlsys_repro.papers.{paper}."), fn
        assert Path(ROOT, *fn.split(":")[0].split(".")).with_suffix(".py").is_file(), fn


# --------------------------------------------------------------------------------- the fixed paper layout (#51)
# Papers move into the fixed layout when their own issue regenerates their results (so results are regenerated
# once); the papers listed here have moved and are held to it.
FIXED_LAYOUT = ("greenplace", "maifs", "petrel", "swallow")
REQUIRED = ("schemas", "data", "pipeline", "experiments", "bench")
SYSTEM = ("sim", "env", "model")  # at least one: the system model or the learner
# Import rank of each role: a module imports only modules of lower rank (method-specific modules, sim, env, model
# and baselines are peers at rank 1). experiments -> pipeline -> {train, data, sim|env, model, baselines} -> schemas.
RANK = {"schemas": 0, "sim": 1, "env": 1, "model": 1, "baselines": 1, "data": 2, "train": 3, "pipeline": 4,
        "experiments": 5, "bench": 6}
METHOD_RANK = 1


def paper_imports(source: str, paper: str) -> set[str]:
    """The modules of ``mlsys_repro.papers.<paper>`` that ``source`` imports (``from .. import a, b`` counts each)."""
    pkg = f"mlsys_repro.papers.{paper}"
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == pkg:
                found |= {a.name for a in node.names}
            elif node.module.startswith(pkg + "."):
                found.add(node.module[len(pkg) + 1:].split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name[len(pkg) + 1:].split(".")[0] for a in node.names if a.name.startswith(pkg + ".")}
    return found


def layout_problems(modules: dict[str, str], paper: str, readme: str) -> list[str]:
    """What breaks the fixed layout in a paper whose modules are ``{name: source}``."""
    problems = [f"missing {m}.py" for m in REQUIRED if m not in modules]
    if not any(m in modules for m in SYSTEM):
        problems.append(f"no system model or learner ({' / '.join(f'{m}.py' for m in SYSTEM)})")
    for name, src in sorted(modules.items()):
        if name not in RANK and name != "__init__" and f"`{name}.py`" not in readme:
            problems.append(f"method-specific module {name}.py is not listed in README.md")
        mine = RANK.get(name, METHOD_RANK)
        for dep in sorted(paper_imports(src, paper)):
            theirs = RANK.get(dep, METHOD_RANK)
            if dep != name and (theirs > mine or (theirs == mine and mine != METHOD_RANK)):
                problems.append(f"{name}.py imports {dep}.py (upward: {name} rank {mine}, {dep} rank {theirs})")
    return problems


def test_layout_checker_on_a_hand_made_paper():
    toy = "mlsys_repro.papers.toy"
    ok = {"schemas": "", "data": f"from {toy} import flows, schemas\n", "flows": f"from {toy}.schemas import X\n",
          "sim": f"from {toy} import flows\n", "pipeline": f"from {toy}.data import load\nfrom {toy} import sim\n",
          "experiments": f"from {toy}.pipeline import run\n", "bench": f"import {toy}.data\n"}
    assert layout_problems(ok, "toy", "`flows.py`: the flow table") == []
    bad = {**ok, "sim": "from mlsys_repro.papers.toy.pipeline import run\n", "data": "import numpy\n",
           "extra": "from mlsys_repro.papers.toy.experiments import f\n"}
    del bad["bench"]
    assert layout_problems(bad, "toy", "`flows.py`") == [
        "missing bench.py",
        "method-specific module extra.py is not listed in README.md",
        "extra.py imports experiments.py (upward: extra rank 1, experiments rank 5)",
        "sim.py imports pipeline.py (upward: sim rank 1, pipeline rank 4)",
    ]
    assert layout_problems({k: v for k, v in ok.items() if k != "sim"}, "toy", "`flows.py`") == [
        "no system model or learner (sim.py / env.py / model.py)"]


@pytest.mark.parametrize("paper", FIXED_LAYOUT)
def test_moved_papers_follow_the_fixed_layout(paper):
    pkg = ROOT / "mlsys_repro/papers" / paper
    modules = {p.stem: p.read_text() for p in pkg.glob("*.py")}
    assert layout_problems(modules, paper, (pkg / "README.md").read_text()) == []
    assert (pkg / "claims.yaml").is_file() and (pkg / "README.md").is_file()
