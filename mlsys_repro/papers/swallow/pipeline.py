"""Swallow's pipeline: a simulated setting (policy, seed, port rate, cores, codec, payload model) -> the simulator's
inputs (CPU series, forecast, codec numbers) -> :func:`sim.simulate_many` -> metrics (CCT, traffic, speed-ups, JCT,
parity with coflowsim). Experiments build settings and format rows; everything between is here.

Times are in the simulator's clock: a simulated second is ``hardware.clock.second_ms`` ms (1024 ms under the
coflowsim conventions); ``*_s`` metrics are simulated seconds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlsys_repro.common.repro import RunContext
from mlsys_repro.common.repro.cache import cache_key
from mlsys_repro.papers.swallow import cpuload, jobs, sim
from mlsys_repro.papers.swallow.data import codec_numbers, cpu_trace
from mlsys_repro.papers.swallow.flows import BIN_NAMES, FlowTable
from mlsys_repro.papers.swallow.predictor import (
    GruConfig,
    Trained,
    predict,
    select_on_validation,
    train_predictors,
)
from mlsys_repro.papers.swallow.schemas import (
    CoflowFabric,
    SwallowPolicy,
)


@dataclass(frozen=True)
class Setting:
    """One simulated configuration: policy, seed and the hardware knobs a sweep changes."""

    policy: str
    seed: int
    port_gbps: float
    cores: float
    codec: str  # lz4 | snappy | zstd | lz4_readme
    payload: str = ""  # payload model of the codec numbers ("": the hardware's codec_payload)


def static_for(hw: CoflowFabric, pol: SwallowPolicy) -> sim.Static:
    c = hw.clock
    return sim.Static(kind=pol.kind, second_ms=c.second_ms, quantum_ms=c.quantum_ms, epoch_ms=c.epoch_ms,
                      cct_from=c.cct_from, zero=c.zero_bytes)


def predictors(ctx: RunContext, source: str, cfg: GruConfig, seeds: tuple[int, ...]) -> tuple[Trained, ...]:
    """One trained CPU-load predictor per seed (trained once per run and configuration)."""
    return ctx.cache.get("swallow.predictors", (ctx.data_dir, source, cfg, seeds),
                         lambda: train_predictors(cpu_trace(ctx, source), cfg, seeds))


def _cpu_window(ctx: RunContext, source: str, num_ports: int, length: int, history: int, seed: int):
    return ctx.cache.get("swallow.cpu_window", (ctx.data_dir, source, num_ports, length, history, seed),
                         lambda: cpuload.port_window(cpu_trace(ctx, source), num_ports, length, history, seed))


def _predicted(ctx: RunContext, source: str, num_ports: int, length: int, seed: int, method: str,
               cfg: GruConfig) -> np.ndarray:
    """The scheduler's CPU-load forecast over a seed's window: ``method`` none | gru | ewma | last | oracle |
    validated (the candidate picked on the validation split, see predictor.select_on_validation)."""

    def build() -> np.ndarray:
        hist, win = _cpu_window(ctx, source, num_ports, length, cfg.window, seed)
        if method == "none":
            return np.zeros_like(win)
        (tr,) = predictors(ctx, source, cfg, (cfg.seed,))
        m = select_on_validation(tr, cpu_trace(ctx, source)) if method == "validated" else method
        return predict(m, tr, hist, win)

    return ctx.cache.get("swallow.predicted", (ctx.data_dir, source, num_ports, length, seed, method, cfg), build)


def sim_params(ctx: RunContext, ft: FlowTable, pol: SwallowPolicy, x: Setting) -> sim.Params:
    """The simulator's inputs for one setting: link rate, the hosts' CPU series and forecast, codec numbers."""
    hw: CoflowFabric = ctx.hardware
    gru = GruConfig(steps=getattr(ctx.params, "gru_steps", GruConfig.steps))
    P = ft.num_ports
    hist, win = _cpu_window(ctx, hw.cpu_trace, P, hw.cpu_window, gru.window, x.seed)
    free = 1.0 - win / 100.0
    C = ft.num_coflows
    kw = dict(ratio=np.ones(C), speed_Bps=np.zeros(C))  # one shape for every policy, so they batch together
    if pol.compress != "none":
        ratio, speed = codec_numbers(ctx.data_dir, hw, x.codec, ft, x.seed, x.payload or None)
        pred = _predicted(ctx, hw.cpu_trace, P, hw.cpu_window, x.seed, pol.predictor, gru)
        kw = dict(compress=pol.compress, ratio=np.broadcast_to(ratio, C), speed_Bps=np.broadcast_to(speed, C),
                  cores=x.cores, cpu_pred=1.0 - pred / 100.0, pipelined=pol.pipelined)
    starve = math.inf if pol.starvation_s is None else pol.starvation_s * hw.clock.second_ms
    return sim.params(x.port_gbps * hw.clock.gbit, policy=pol.order, cpu_free=free, num_ports=P,
                      cpu_step_ms=hw.cpu_sample_s * hw.clock.second_ms, starvation_ms=starve, **kw)


def run_settings(ctx: RunContext, ft: FlowTable, settings: Sequence[Setting],
                 policies: dict[str, SwallowPolicy] | None = None) -> list[sim.Result]:
    """Simulate every setting (see :func:`sim.simulate_many`: one core per configuration on large traces).

    Results are kept in the run's cache keyed by the simulator's exact inputs (flow table, program, parameters), so
    a configuration that several experiments of one run share (the 1 Gbps runs of the headline, the bandwidth sweep,
    the JCT model and the regime map) is simulated once; the simulator is deterministic, so this changes no number."""
    policies = policies or ctx.policies
    jobs = [(static_for(ctx.hardware, policies[x.policy]), sim_params(ctx, ft, policies[x.policy], x))
            for x in settings]
    store = ctx.cache.table("swallow.sim_results")
    digest = cache_key((ft.num_ports, ft.cof_arrival_ms, ft.flow_bytes, ft.flow_src, ft.flow_dst, ft.flow_cof))
    keys = [(digest, cache_key(job)) for job in jobs]
    todo = sorted({k: i for i, k in enumerate(keys) if k not in store}.values())
    ctx.progress.start(len(todo), f"simulations ({len(jobs) - len(todo)} of {len(jobs)} from this run's cache)")
    done = sim.simulate_many(ft, [jobs[i] for i in todo], log=ctx.progress.log, on_result=lambda j: ctx.progress.update(
        1, f"{settings[todo[j]].policy} {settings[todo[j]].port_gbps:g} Gbps seed {settings[todo[j]].seed}"),
    ) if todo else []
    for i, r in zip(todo, done, strict=True):
        store[keys[i]] = r
    return [store[k] for k in keys]


def cct_metrics(ft: FlowTable, r: sim.Result) -> dict[str, tuple[float, str]]:
    cct = r.cct_s
    done = np.isfinite(cct)
    if not done.all():
        raise RuntimeError(f"{int((~done).sum())} coflows did not finish (simulation end reached)")
    m = {"avg_cct_s": (float(cct.mean()), "s"), "p95_cct_s": (float(np.percentile(cct, 95)), "s"),
         "p99_cct_s": (float(np.percentile(cct, 99)), "s"), "num_coflows": (float(done.sum()), "coflows"),
         "makespan_s": (float(np.nanmax(r.finish_ms)) / r.second_ms, "s")}
    for b, name in enumerate(BIN_NAMES):
        sel = ft.cof_bin == b
        if sel.any():
            m[f"avg_cct_s_{name}"] = (float(cct[sel].mean()), "s")
    return m


def traffic_metrics(r: sim.Result) -> dict[str, tuple[float, str]]:
    wire, raw = float(np.nansum(r.wire_bytes)), float(np.nansum(r.raw_bytes))
    return {"wire_TB": (wire / 1e12, "TB"), "raw_TB": (raw / 1e12, "TB"),
            "traffic_reduction_pct": (100.0 * (1.0 - wire / raw), "%")}


def speedup_metrics(ours: sim.Result, base: sim.Result, prefix: str = "cct") -> dict[str, tuple[float, str]]:
    """Ratio of averages and average of per-coflow ratios of the baseline's CCT over ours."""
    a, b = ours.cct_s, base.cct_s
    return {f"{prefix}_speedup_ratio_of_avgs": (float(b.mean() / a.mean()), "x"),
            f"{prefix}_speedup_avg_of_ratios": (float(np.mean(b / a)), "x")}


def wire_fraction(r: sim.Result) -> np.ndarray:
    """Wire bytes over raw bytes per coflow (1 where nothing was compressed)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.asarray(r.wire_bytes, np.float64) / np.asarray(r.raw_bytes, np.float64)
    return np.clip(np.where(np.isfinite(w), w, 1.0), 1e-12, 1.0)


def jct_metrics(ft: FlowTable, ours: sim.Result, base: sim.Result | None, seed: int, kappa: float,
                sigma: float, disk_MBps: float, chunks: int = 1) -> dict[str, tuple[float, str]]:
    """Average JCT and its speed-up over ``base`` (jobs.py: compute + disk spill/merge + CCT, pipelined in
    ``chunks`` pieces), and how the JCT gain compares with the CCT gain (``jct_over_cct_gain`` > 1: JCT gains more)."""
    mp, rd = jobs.compute_stages_s(ft, seed, kappa, sigma)
    disk = disk_MBps * 1e6

    def jct(r: sim.Result) -> np.ndarray:
        spill, merge = jobs.io_stages_s(ft, wire_fraction(r), disk)
        return jobs.pipelined_jct_s(r.cct_s, mp, rd, spill, merge, chunks=chunks)

    j = jct(ours)
    m = {"avg_jct_s": (float(j.mean()), "s")}
    if base is not None:
        jb = jct(base)
        gain = float(jb.mean() / j.mean())
        m["jct_speedup_ratio_of_avgs"] = (gain, "x")
        m["jct_speedup_avg_of_ratios"] = (float(np.mean(jb / j)), "x")
        m["jct_over_cct_gain"] = (gain / float(base.cct_s.mean() / ours.cct_s.mean()), "x")
    return m


def _deterministic(pol: SwallowPolicy) -> bool:
    """Policies whose schedule does not depend on the seed (no CPU load enters)."""
    return pol.compress == "none"


def parity_metrics(r: sim.Result, ref_finish_ms: np.ndarray, tag: str = "coflowsim") -> dict[str, tuple[float, str]]:
    """How far our run is from coflowsim's on the same trace: relative difference of the average CCT (CCT from our
    admission epoch, which is coflowsim's), and the share of coflows finishing in the same quantum."""
    ref_cct = ref_finish_ms - r.start_ms
    return {f"{tag}_avg_cct_s": (float(np.mean(ref_cct)) / r.second_ms, "s"),
            f"rel_diff_vs_{tag}_pct": (100.0 * (np.mean(r.cct_ms) / np.mean(ref_cct) - 1.0), "%"),
            f"same_finish_as_{tag}_pct": (100.0 * float(np.mean(r.finish_ms == ref_finish_ms)), "%")}
