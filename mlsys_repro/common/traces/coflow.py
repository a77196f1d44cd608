"""Coflow benchmark traces (coflow/coflow-benchmark format, e.g. the Facebook 2010 one-hour trace).

Format (whitespace separated)::

    <num_ports> <num_coflows>
    <id> <arrival_ms> <M> <mapper_port> x M <R> <reducer_port>:<MB> x R

``MB`` is the total a reducer receives. How it is split into flows (evenly over mappers, rounded or not) is a
simulator convention and is left to the caller (see ``mlsys_repro.papers.swallow``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_repro.common.traces._io import read_text
from mlsys_repro.common.traces.errors import TraceFormatError


@dataclass(frozen=True)
class Coflow:
    id: int
    arrival_ms: int
    mappers: np.ndarray  # int32 [M] port indices
    reducers: np.ndarray  # int32 [R] port indices
    reducer_mb: np.ndarray  # float64 [R] MB received by each reducer


@dataclass(frozen=True)
class CoflowTrace:
    num_ports: int
    coflows: tuple[Coflow, ...]
    path: str

    def __len__(self) -> int:
        return len(self.coflows)

    @property
    def num_flows(self) -> int:
        return sum(c.mappers.size * c.reducers.size for c in self.coflows)

    @property
    def total_mb(self) -> float:
        return float(sum(c.reducer_mb.sum() for c in self.coflows))


def _int(tok: str, path, line: int, field: str, lo: int | None = None, hi: int | None = None) -> int:
    try:
        v = int(tok)
    except ValueError:
        raise TraceFormatError(path, f"expected an integer, got {tok!r}", line, field) from None
    if lo is not None and v < lo or hi is not None and v > hi:
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise TraceFormatError(path, f"value {v} out of range {rng}", line, field)
    return v


def parse_coflow_text(text: str, path: str | Path = "<string>") -> CoflowTrace:
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise TraceFormatError(path, "empty file; expected header '<num_ports> <num_coflows>'", 1)
    head = lines[0].split()
    if len(head) != 2:
        raise TraceFormatError(path, f"header needs 2 fields '<num_ports> <num_coflows>', got {len(head)}", 1)
    ports = _int(head[0], path, 1, "num_ports", 1)
    n = _int(head[1], path, 1, "num_coflows", 0)
    coflows: list[Coflow] = []
    seen: dict[int, int] = {}
    for ln, raw in enumerate(lines[1:], start=2):
        tok = raw.split()
        if not tok:
            continue
        if len(tok) < 5:
            raise TraceFormatError(path, f"too few fields ({len(tok)}); need id, arrival_ms, M, mappers, R, ...", ln)
        cid = _int(tok[0], path, ln, "coflow_id", 0)
        if cid in seen:
            raise TraceFormatError(path, f"duplicate coflow id {cid} (first on line {seen[cid]})", ln, "coflow_id")
        seen[cid] = ln
        arrival = _int(tok[1], path, ln, "arrival_ms", 0)
        m = _int(tok[2], path, ln, "M", 1, ports)
        if len(tok) < 3 + m + 1:
            raise TraceFormatError(path, f"M={m} mappers listed but only {len(tok) - 3} fields follow", ln, "mappers")
        mappers = [_int(t, path, ln, f"mapper[{i}]", 0, ports - 1) for i, t in enumerate(tok[3:3 + m])]
        if len(set(mappers)) != m:
            raise TraceFormatError(path, "duplicate mapper port", ln, "mappers")
        ri = 3 + m
        if ":" in tok[ri]:
            raise TraceFormatError(path, f"expected reducer count R, got {tok[ri]!r} (mapper count M={m} too small?)",
                                   ln, "R")
        r = _int(tok[ri], path, ln, "R", 1, ports)
        red_tok = tok[ri + 1:]
        if len(red_tok) != r:
            raise TraceFormatError(path, f"R={r} reducers declared but {len(red_tok)} 'port:MB' entries present", ln,
                                   "reducers")
        reducers, mbs = [], []
        for i, t in enumerate(red_tok):
            port_s, sep, mb_s = t.partition(":")
            if not sep:
                raise TraceFormatError(path, f"expected 'port:MB', got {t!r}", ln, f"reducer[{i}]")
            reducers.append(_int(port_s, path, ln, f"reducer[{i}].port", 0, ports - 1))
            try:
                mb = float(mb_s)
            except ValueError:
                raise TraceFormatError(path, f"expected a number of MB, got {mb_s!r}", ln, f"reducer[{i}].MB") from None
            if not math.isfinite(mb) or mb < 0:
                raise TraceFormatError(path, f"MB must be finite and >= 0, got {mb_s}", ln, f"reducer[{i}].MB")
            mbs.append(mb)
        if len(set(reducers)) != r:
            raise TraceFormatError(path, "duplicate reducer port", ln, "reducers")
        coflows.append(Coflow(cid, arrival, np.asarray(mappers, np.int32), np.asarray(reducers, np.int32),
                              np.asarray(mbs, np.float64)))
    if len(coflows) != n:
        raise TraceFormatError(path, f"header says {n} coflows, file has {len(coflows)} (truncated?)", 1,
                               "num_coflows")
    return CoflowTrace(ports, tuple(coflows), str(path))


def load_coflow_trace(path: str | Path) -> CoflowTrace:
    """Parse a coflow-benchmark file (plain or .gz); errors name file, line and field."""
    return parse_coflow_text(read_text(path), path)
