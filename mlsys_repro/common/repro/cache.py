"""A run-scoped cache for what several experiments of one run share: loaded tasks, compiled trainers, trained agents.

One :class:`RunCache` lives as long as one run (a ``run_all`` process or one ``main.py`` job) and reaches every
experiment as ``ctx.cache``. It replaces module-level caches: its lifetime is explicit, and every entry is keyed by
a hash of the *configuration that built it* (:func:`cache_key`: dataclasses, mappings, sequences, arrays, paths and
functions, read field by field), so a changed configuration can never be served a value built from an old one::

    task = ctx.cache.get("petrel.task", (params.dataset, params.n_train), lambda: load_task(...))

Values are built outside the lock (two threads asking for the same missing key may both build it; the first one
stored wins and both get it), so a slow build does not block unrelated lookups.

Before every build (a miss) the cache checks the process's memory mappings (:func:`release_if_mapping_pressure`):
every compiled XLA executable keeps its code in many mappings, and an experiment that compiles a program per grid
point (MAIFS ``tuning``: one MAPPO program per (lr, entropy) point and family) can reach the kernel's per-process
limit (``vm.max_map_count``, 65,530 by default) within one experiment, where LLVM fails with "Cannot allocate
memory" and the process aborts. Above half the limit, every compiled executable is dropped (``jax.clear_caches``);
the jitted functions the cache holds recompile on demand, from the persistent compilation cache, to the same
programs.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import hashlib
import threading
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def _canonical(x: Any) -> Any:
    """A nested tuple of primitives that equal configurations map to, and different ones do not."""
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return (type(x).__name__, x)
    if isinstance(x, enum.Enum):
        return ("enum", type(x).__qualname__, x.name)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return ("dc", f"{type(x).__module__}.{type(x).__qualname__}",
                tuple((f.name, _canonical(getattr(x, f.name))) for f in dataclasses.fields(x)))
    if isinstance(x, Mapping):
        return ("map", tuple(sorted((repr(_canonical(k)), _canonical(v)) for k, v in x.items())))
    if isinstance(x, (list, tuple)):
        return ("seq", tuple(_canonical(v) for v in x))
    if isinstance(x, (set, frozenset)):
        return ("set", tuple(sorted(repr(_canonical(v)) for v in x)))
    if isinstance(x, np.generic):
        return ("np", x.dtype.str, x.item())
    if isinstance(x, np.ndarray) or type(x).__module__.startswith("jax"):
        a = np.asarray(x)
        return ("nd", a.dtype.str, a.shape, hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest())
    if isinstance(x, PurePath):
        return ("path", str(x))
    if callable(x) and hasattr(x, "__qualname__") and hasattr(x, "__module__"):
        if "<locals>" in x.__qualname__ or "<lambda>" in x.__qualname__ or getattr(x, "__closure__", None):
            # two closures of one definition share a name but not their captured values
            raise TypeError(f"cache_key: cannot key on the closure {x.__qualname__}; key on what it captures")
        return ("fn", x.__module__, x.__qualname__)
    raise TypeError(f"cache_key: cannot key on a {type(x).__name__}; pass the configuration that determines it")


def cache_key(config: Any) -> str:
    """A stable hex digest of ``config`` (see :func:`_canonical`); raises TypeError for an object it cannot read."""
    return hashlib.sha256(repr(_canonical(config)).encode()).hexdigest()[:24]


def mapping_count() -> int | None:
    """Memory mappings this process holds (lines of ``/proc/self/maps``; None where there is no procfs)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def mapping_limit() -> int | None:
    """The kernel's per-process mapping limit (``vm.max_map_count``; None where it cannot be read)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def release_compiled() -> None:
    """Drop every compiled XLA executable (``jax.clear_caches``) and collect: each executable keeps its code in a few
    memory mappings; jitted functions recompile on demand (from the persistent compile cache when one is set) to
    the same programs. ``run_all`` calls it before every experiment; :func:`release_if_mapping_pressure` within
    one."""
    import jax  # lazily: importing this module must not load jax

    jax.clear_caches()
    gc.collect()


def release_if_mapping_pressure(fraction: float = 0.5) -> bool:
    """Drop every compiled XLA executable (``jax.clear_caches``) when this process holds more than ``fraction`` of
    its mapping limit; returns whether it did. Jitted functions recompile on demand (from the persistent
    compilation cache when one is set), so results do not change, only the mappings are given back."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    n, limit = mapping_count(), mapping_limit()
    if n is None or limit is None or n < fraction * limit:
        return False
    release_compiled()
    return True


class RunCache:
    """Values shared across the experiments of one run, keyed by ``(kind, cache_key(config))``."""

    def __init__(self) -> None:
        self._store: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, kind: str, config: Any, build: Callable[[], T]) -> T:
        """The value of ``kind`` for ``config``, calling ``build()`` the first time this run asks for it."""
        key = (kind, cache_key(config))
        with self._lock:
            if key in self._store:
                self.hits += 1
                return self._store[key]
            self.misses += 1
        release_if_mapping_pressure()
        value = build()
        with self._lock:
            return self._store.setdefault(key, value)

    def table(self, kind: str) -> dict[Any, Any]:
        """A run-scoped dict for values keyed by live objects rather than configurations, e.g. compiled
        functions keyed by the (hashable, value-comparing) policy object they compile. The dict holds its keys, so
        an identity-hashed key cannot be recycled while the run lasts."""
        return self.get(f"table:{kind}", None, dict)

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, kind_config: tuple[str, Any]) -> bool:
        kind, config = kind_config
        return (kind, cache_key(config)) in self._store
