"""The layering: mlsys_repro/common/ never imports mlsys_repro/papers/, and mlsys_repro/common/'s modules import each
other without cycles (module- level and function-level imports alike, read statically)."""

from __future__ import annotations

from mlsys_repro.common.repro.freshness import _imports, package_modules
from tests.conftest import ROOT


def _graph() -> dict[str, set[str]]:
    mods = package_modules(ROOT, "mlsys_repro.common")
    known = set(mods)
    graph = {}
    for m in mods:
        f = ROOT.joinpath(*m.split(".")).with_suffix(".py")
        if not f.exists():
            f = ROOT.joinpath(*m.split("."), "__init__.py")
        deps = _imports(f, m, frozenset({"mlsys_repro"}))
        graph[m] = {d for d in deps if d in known and d != m} | {d for d in deps if d.startswith("mlsys_repro.papers")}
    return graph


def test_common_never_imports_papers():
    bad = {m: sorted(d for d in deps if d.startswith("mlsys_repro.papers")) for m, deps in _graph().items()}
    assert not {m: d for m, d in bad.items() if d}


def test_no_import_cycle_in_common():
    graph = {m: {d for d in deps if not d.startswith("mlsys_repro.papers")} for m, deps in _graph().items()}
    # a package importing its own submodules (re-exports in __init__) is not a cycle between modules
    graph = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycles.append(path[path.index(d):] + [d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
