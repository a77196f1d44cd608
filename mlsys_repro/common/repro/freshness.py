"""Is a stored result fresh? Code fingerprints, run manifests and the completeness of result files.

A result ``<dir>/<experiment>.csv`` is written together with ``<experiment>.manifest.json``, which records the run:
config hash, code fingerprint, profile, git commit, the CSV's sha256 and row count, seeds, wall time, date and
the figures it saved.
:func:`status` compares them with what the current checkout would run:

``fresh``       same config hash, same code fingerprint, same data, same profile, made from a clean tree, file
                intact.
``stale``       config, code or data changed since, another profile, a tree with uncommitted changes (under
                ``mlsys_repro/``, ``conf/`` or ``data/``), or no manifest (made before fingerprints were recorded).
``missing``     no result file.
``incomplete``  unreadable, modified or truncated since it was written (sha256 / row count), a NaN value, or rows
                stitched from several runs (more than one config hash or commit in the file).

The code fingerprint is a hash of the source of every repository module the paper's package imports, followed
transitively through ``import`` statements (static, so it does not depend on what a process happened to import
first); the runner, report, claims and plotting modules are left out (they do not change the numbers).

The data an experiment reads (:func:`data_paths`) are the files under ``data/`` that a string of its resolved config
or a string literal of its code names (a folder: every file beneath); their fingerprint (path, size and sha256 of
each, hashed once per file version) is recorded in the manifest. A manifest written before data fingerprints existed
is checked against git instead: the data files changed since the commit that made it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro.results import atomic_write_bytes

# Modules that shape how results are stored or reported, not the numbers: excluded from code fingerprints.
NOT_FINGERPRINTED = (
    "mlsys_repro.common.repro.claims", "mlsys_repro.common.repro.config", "mlsys_repro.common.repro.errors",
    "mlsys_repro.common.repro.freshness", "mlsys_repro.common.repro.main", "mlsys_repro.common.repro.plots",
    "mlsys_repro.common.repro.progress", "mlsys_repro.common.repro.registry", "mlsys_repro.common.repro.report",
    "mlsys_repro.common.repro.results", "mlsys_repro.common.repro.run_all", "mlsys_repro.common.repro.schema",
    "mlsys_repro.common.repro.stats", "mlsys_repro.common.repro.__init__", "mlsys_repro.common.repro",
    # timing harness; reuse of values keyed by their config
    "mlsys_repro.common.repro.bench", "mlsys_repro.common.repro.cache",
)
TOP_PACKAGES = ("mlsys_repro",)


def _excluded(mod: str) -> bool:
    return any(mod == x or mod.startswith(x + ".") for x in NOT_FINGERPRINTED)


def _module_file(root: Path, mod: str) -> Path | None:
    base = root.joinpath(*mod.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(path: Path, mod: str, tops: frozenset[str]) -> set[str]:
    """Absolute names of the repository modules ``path`` (module ``mod``) imports, anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)  # "from pkg import module"
    return {m for m in out if m.split(".")[0] in tops}


def module_closure(root: Path, start: list[str]) -> list[Path]:
    """Files of the repository modules reachable from ``start`` (module names) by imports, parents included."""
    tops = frozenset((*TOP_PACKAGES, *(m.split(".")[0] for m in start)))
    seen: set[str] = set()
    files: dict[str, Path] = {}
    todo = list(start)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        parts = mod.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run their __init__
        if _excluded(mod):
            continue
        f = _module_file(root, mod)
        if f is None:
            continue
        files[mod] = f
        todo.extend(_imports(f, mod, tops))
    return sorted(set(files.values()))


def package_modules(root: Path, package: str) -> list[str]:
    """Module names of every source file of the package ``package`` (e.g. ``mlsys_repro.papers.swallow``)."""
    out = []
    for p in root.joinpath(*package.split(".")).rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(out)


@functools.lru_cache(maxsize=64)
def _fingerprint(root: str, package: str, stamps: tuple[tuple[str, int, int], ...]) -> tuple[str, int]:
    r = Path(root)
    files = module_closure(r, package_modules(r, package))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(r)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16], len(files)


def code_fingerprint(root: Path | str, package: str) -> tuple[str, int]:
    """``(fingerprint, number of files)`` of the code a paper package (``mlsys_repro.papers.<key>``) can run: see the
    module doc. Memoised per file version (paths, mtimes and sizes of every candidate source file)."""
    r = Path(root).resolve()
    cands = (sorted(r.joinpath("mlsys_repro").glob("*.py")) + sorted(r.joinpath("mlsys_repro", "common").rglob("*.py"))
             + sorted(r.joinpath(*package.split(".")).rglob("*.py")))
    stamps = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in cands)
    return _fingerprint(str(r), package, stamps)


# ---------------------------------------------------------------------------------------------- data


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _strings(v)


@functools.lru_cache(maxsize=64)
def _code_strings(root: str, package: str, stamps: tuple[tuple[str, int, int], ...]) -> tuple[str, ...]:
    """Every string literal in the code a paper package can run (the same module closure as its fingerprint)."""
    r = Path(root)
    out: set[str] = set()
    for f in module_closure(r, package_modules(r, package)):
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and 0 < len(node.value) < 300:
                out.add(node.value)
    return tuple(sorted(out))


def data_paths(root: Path | str, package: str, data_dir: Path | str, config: Any) -> tuple[str, ...]:
    """The data files an experiment can read: every string of its resolved ``config`` (plain containers) and every
    string literal of its code that names a file or folder under ``data_dir`` (a folder: every file beneath), plus
    absolute paths in the config that exist (a system package's data). Relative to ``data_dir`` where under it."""
    r = Path(root).resolve()
    d = Path(data_dir).resolve()
    cands = (sorted(r.joinpath("mlsys_repro").glob("*.py")) + sorted(r.joinpath("mlsys_repro", "common").rglob("*.py"))
             + sorted(r.joinpath(*package.split(".")).rglob("*.py")))
    stamps = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in cands)
    found: set[Path] = set()
    for s in (*_strings(config), *_code_strings(str(r), package, stamps)):
        if not s.strip() or "\n" in s or s.strip() in (".", "/"):
            continue
        p = Path(s)
        p = p if p.is_absolute() else d / p
        try:
            if p.is_file():
                found.add(p.resolve())
            elif p.is_dir() and p.resolve() != d and d in p.resolve().parents:
                found.update(f.resolve() for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        except OSError:
            continue
    return tuple(sorted(str(f.relative_to(d)) if d in f.parents else str(f) for f in found))


@functools.lru_cache(maxsize=4096)
def _file_sha(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_fingerprint(data_dir: Path | str, paths: Sequence[str]) -> str:
    """A hash of the named data files (path, size, sha256 of the bytes; each file hashed once per version)."""
    d = Path(data_dir)
    h = hashlib.sha256()
    for rel in paths:
        p = Path(rel) if Path(rel).is_absolute() else d / rel
        try:
            st = p.stat()
            digest = _file_sha(str(p), st.st_mtime_ns, st.st_size)
        except OSError:
            digest = "missing"
        h.update(f"{rel}\0{digest}\0".encode())
    return h.hexdigest()[:16]


def data_changed_since(root: Path | str, sha: str, data_dir: Path | str, paths: Sequence[str]) -> list[str]:
    """The data files of ``paths`` whose working-tree content differs from commit ``sha`` (for results whose
    manifest predates data fingerprints); empty when git cannot tell."""
    sha = sha.removesuffix("-dirty")
    d = Path(data_dir).resolve()
    r = Path(root).resolve()
    rels = [str((d / p).relative_to(r)) for p in paths if not Path(p).is_absolute() and r in (d / p).parents]
    if not sha or sha == "unknown" or not rels:
        return []
    try:
        out = subprocess.run(["git", "-C", str(r), "diff", "--name-only", sha, "--", *rels], capture_output=True,
                             text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return []
    return [ln for ln in out.splitlines() if ln]


# ---------------------------------------------------------------------------------------------- manifests


def manifest_path(csv_path: Path) -> Path:
    return Path(csv_path).with_suffix(".manifest.json")


def write_manifest(csv_path: Path, **fields: Any) -> dict[str, Any]:
    """Write the manifest of the CSV just written (its sha256 and row count are taken from the file)."""
    data = Path(csv_path).read_bytes()
    man = {**fields, "csv_sha256": hashlib.sha256(data).hexdigest(),
           "rows": max(data.count(b"\n") - 1, 0)}
    atomic_write_bytes(manifest_path(csv_path), (json.dumps(man, indent=1, sort_keys=True) + "\n").encode())
    return man


def read_manifest(csv_path: Path) -> dict[str, Any] | None:
    p = manifest_path(csv_path)
    if not p.exists():
        return None
    try:
        man = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return man if isinstance(man, dict) else None


@dataclass(frozen=True)
class Freshness:
    state: str  # fresh | stale | missing | incomplete
    why: str = ""
    manifest: dict[str, Any] | None = None
    dirty_only: bool = False  # stale only because it was made from a tree with uncommitted changes

    @property
    def fresh(self) -> bool:
        return self.state == "fresh"

    @property
    def reusable(self) -> bool:
        """The stored numbers are what the current code and config produce (fresh, or stale only by its dirty
        label): a run may skip it; ``--status`` still reports the label, and ``--force`` rewrites it."""
        return self.fresh or self.dirty_only

    def line(self) -> str:
        return self.state + (f": {self.why}" if self.why else "")


def status(csv_path: Path, *, config_hash: str, code_hash: str, profile: str, data_hash: str | None = None,
           data_since: Callable[[str], list[str]] | None = None) -> Freshness:
    """How the stored result at ``csv_path`` relates to the run the current checkout would make. ``data_hash``: the
    fingerprint of the data it reads now; a manifest written before data fingerprints were recorded is checked with
    ``data_since(its commit)`` (the data files changed since then) instead."""
    csv_path = Path(csv_path)
    if not csv_path.exists():
        return Freshness("missing")
    try:
        data = csv_path.read_bytes()
        df = pd.read_csv(csv_path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        return Freshness("incomplete", f"unreadable ({type(e).__name__})")
    man = read_manifest(csv_path)
    for col in ("value", "config_hash", "git_sha", "profile"):
        if col not in df.columns:
            return Freshness("incomplete", f"no {col!r} column", man)
    if df.empty:
        return Freshness("incomplete", "no rows", man)
    values = pd.to_numeric(df["value"], errors="coerce").to_numpy(dtype=np.float64)
    nan = int((~np.isfinite(values)).sum())
    if nan:
        return Freshness("incomplete", f"{nan} NaN/non-numeric values", man)
    hashes = sorted(df["config_hash"].astype(str).unique())
    shas = sorted(df["git_sha"].astype(str).unique())
    if len(hashes) > 1 or len(shas) > 1:
        return Freshness("incomplete", f"stitched from several runs (config hashes {hashes}, commits {shas})", man)
    if man is None:
        return Freshness("stale", "no manifest: made before code fingerprints were recorded", None)
    if man.get("csv_sha256") != hashlib.sha256(data).hexdigest():
        rows = len(df)
        return Freshness("incomplete", f"file changed since its run wrote it ({rows} rows, manifest says "
                                       f"{man.get('rows')})", man)
    if hashes[0] != config_hash or man.get("config_hash") != config_hash:
        return Freshness("stale", f"config changed (stored {hashes[0]}, now {config_hash})", man)
    if man.get("code_hash") != code_hash:
        return Freshness("stale", f"code changed (stored {man.get('code_hash')}, now {code_hash})", man)
    if data_hash is not None and man.get("data_hash") not in (None, data_hash):
        return Freshness("stale", f"data changed (stored {man.get('data_hash')}, now {data_hash})", man)
    if data_hash is not None and man.get("data_hash") is None and data_since is not None:
        changed = data_since(str(man.get("git_sha", "")))
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            return Freshness("stale", f"data changed since its run: {', '.join(changed[:3])}{more}", man)
    prof = sorted(df["profile"].astype(str).unique())
    if prof != [profile]:
        return Freshness("stale", f"made with profile {prof}, not {profile!r}", man)
    if shas[0].endswith("-dirty"):
        return Freshness("stale", f"made from a tree with uncommitted changes ({shas[0]}); rerun with --force on "
                                  "a clean commit", man, dirty_only=True)
    return Freshness("fresh", "", man)
