"""Swallow's data: the FB coflow trace as a flow table, the hosts' CPU-load traces, the codec numbers each coflow's
payload gets, and coflowsim's own per-coflow results (the parity reference). Loaded once per run through
``ctx.cache`` (the cache keys are here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlsys_repro.common.repro import RunContext
from mlsys_repro.common.traces import load_trace
from mlsys_repro.papers.swallow import codecs, cpuload
from mlsys_repro.papers.swallow.flows import Conventions, FlowTable, build_flow_table
from mlsys_repro.papers.swallow.schemas import (
    RANDOM_PAYLOADS,
    CoflowFabric,
)


def flow_table(ctx: RunContext, max_coflows: int | None) -> FlowTable:
    """The trace's flow table under the hardware's clock conventions (built once per run, see ``ctx.cache``)."""
    hw: CoflowFabric = ctx.hardware
    if ctx.trace.loader != "coflow_benchmark":
        load_trace(ctx.trace, ctx.data_dir)  # fails with the loader's message
        raise ValueError(f"swallow needs a coflow_benchmark trace, got loader {ctx.trace.loader!r}")
    path = Path(ctx.data_dir) / ctx.trace.files["trace"]
    conv = Conventions(mb_bytes=hw.clock.mb_bytes, mb_round=hw.clock.mb_round)

    def build() -> FlowTable:
        from mlsys_repro.common.traces import load_coflow_trace

        return build_flow_table(load_coflow_trace(path), conv, max_coflows)

    return ctx.cache.get("swallow.flow_table", (path, conv, max_coflows), build)


def cpu_trace(ctx: RunContext, source: str) -> cpuload.CpuTrace:
    """The hosts' CPU-load trace ``source`` (loaded once per run)."""
    return ctx.cache.get("swallow.cpu_trace", (ctx.data_dir, source),
                         lambda: cpuload.load_cpu_trace(str(ctx.data_dir), source))


def _mapper_bytes(ft: FlowTable) -> np.ndarray:
    """Raw bytes each (coflow, mapper port) entry of ``ft.map_cof``/``ft.map_port`` sends (float64 [Mtot])."""
    key = ft.flow_cof.astype(np.int64) * ft.num_ports + ft.flow_src
    uniq, inv = np.unique(key, return_inverse=True)
    per_key = np.bincount(inv, weights=ft.flow_bytes, minlength=uniq.size)
    mk = ft.map_cof.astype(np.int64) * ft.num_ports + ft.map_port
    at = np.searchsorted(uniq, mk)
    hit = (at < uniq.size) & (uniq[np.minimum(at, uniq.size - 1)] == mk)
    return np.where(hit, per_key[np.minimum(at, uniq.size - 1)], 0.0)


def codec_numbers(data_dir: Path, hw: CoflowFabric, codec: str, ft: FlowTable | None = None, seed: int = 0,
                  payload: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ratio, compression bytes/s per core)``, each ``[1]`` (one payload for every coflow) or ``[num_coflows]``.

    ``payload`` (default ``hw.codec_payload``) is a payload class of the measured table, ``mix``, or a random model
    [ours], drawn from ``seed`` uniformly over the table's classes (text, CSV, float32, image bytes, JPEG):

    * ``per_mapper``: each mapper's output is one class, drawn independently per (coflow, mapper port); a coflow's
      ratio is the byte-weighted mean of its mappers' ratios and its speed the byte-weighted harmonic mean (exact
      for its wire bytes and its total compression time). Large coflows mix many classes, so no single draw decides
      a seed's traffic.
    * ``per_coflow``: one class for the whole coflow (a sensitivity row: a few giant coflows decide a seed)."""
    payload = payload or hw.codec_payload
    if codec == "lz4_readme":
        r, s, _ = codecs.load_codec(data_dir, "lz4", "lz4_readme")
        return np.array([0.48]), np.array([s])  # the constant in the authors' simulator
    if payload in RANDOM_PAYLOADS:
        if ft is None:
            raise ValueError(f"payload model {payload!r} needs the flow table")
        table = [codecs.load_codec(data_dir, codec, hw.codec_source, pl) for pl in codecs.PAYLOADS]
        r_cls = np.minimum(np.array([t[0] for t in table]), 1.0)
        s_cls = np.array([t[1] for t in table])
        rng = np.random.default_rng(np.random.SeedSequence([0x5A110, int(seed)]))
        if payload == "per_coflow":
            cls = rng.integers(0, len(table), ft.num_coflows)
            return r_cls[cls], s_cls[cls]
        cls = rng.integers(0, len(table), ft.map_cof.size)
        w = _mapper_bytes(ft)
        tot = np.bincount(ft.map_cof, weights=w, minlength=ft.num_coflows)
        ratio = np.bincount(ft.map_cof, weights=w * r_cls[cls], minlength=ft.num_coflows)
        secs = np.bincount(ft.map_cof, weights=w / s_cls[cls], minlength=ft.num_coflows)
        empty = tot <= 0
        tot = np.where(empty, 1.0, tot)
        return (np.where(empty, r_cls.mean(), ratio / tot),
                np.where(empty, 1.0 / np.mean(1.0 / s_cls), tot / np.where(empty, 1.0, secs)))
    r, s, _ = codecs.load_codec(data_dir, codec, hw.codec_source, payload)
    return np.array([min(r, 1.0)]), np.array([s])


REFERENCE_CSV = "coflow/coflowsim_reference.csv"  # coflowsim's own per-coflow finish times (data/coflow/*.md)


def coflowsim_reference(data_dir: str | Path, ft: FlowTable, bookkeeping: str = "upstream") -> dict[str, np.ndarray]:
    """coflowsim's finish time (ms) per coflow of ``ft`` (arrival order), per policy, from the committed run of the
    Java simulator on the same trace prefix (``bookkeeping``: ``upstream``, or ``consistent``: its one-line
    receiver-bytes change, see data/coflow/coflowsim_reference.md); empty when no such run is on record."""
    import pandas as pd

    df = pd.read_csv(Path(data_dir) / REFERENCE_CSV)
    df = df[(df.trace_prefix == ft.num_coflows) & (df.bookkeeping == bookkeeping)]
    out = {}
    for pol, g in df.groupby("scheduler"):
        fin = g.set_index("coflow_id").finish_ms.reindex(ft.cof_id).to_numpy(np.float64)
        if np.all(np.isfinite(fin)):
            out[str(pol)] = fin
    return out
