"""Build the environment's parameters from configs and real traces (numpy, outside jit).

* :func:`model_tables`: per model and partition candidate, the segment latencies on each device class (from the
  calibrated per-layer regressors), cut bytes, memory and weights; candidates are the prefix cuts plus the DADS
  min-cut sets for every (model, edge site) pair with the cloud as back end.
* :func:`env_params`: nodes, links (FIFO WAN links when ``hw.link_fifo``), hourly price / renewable power / carbon
  of each node's region for one year, the job arrival rate shaped by the building-load profile, and the reward
  normalisers.
* Regimes (:func:`regime_hardware`, :func:`with_load`): the hardware with a scaled WAN and FIFO links, the arrival
  rate scaled; the headroom knobs (:func:`vary` for traces and load, :func:`knob_regime` for the hardware).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.traces.energy import EnergyTraces, RegionYear
from mlsys_repro.papers.greenplace.env import EnvParams
from mlsys_repro.papers.greenplace.latency import DEVICES, LatencyModel, layer_latency_s
from mlsys_repro.papers.greenplace.models import profile
from mlsys_repro.papers.greenplace.partition import closed, dads_min_cut, prefix_sets, segment_stats
from mlsys_repro.papers.greenplace.schemas import EdgeCloudHardware, PlacementParams, Regime, Scenario

GB = 1e9


@dataclass(frozen=True)
class ModelTables:
    names: tuple[str, ...]
    arrays: dict[str, np.ndarray]  # EnvParams fields for the model tables
    num_candidates: tuple[int, ...]
    labels: tuple[tuple[str, ...], ...]


def _node_arrays(hw: EdgeCloudHardware) -> dict[str, np.ndarray]:
    n = len(hw.nodes)
    lmax = max(x.lanes for x in hw.nodes)
    lane_ok = np.zeros((n, lmax), bool)
    for i, x in enumerate(hw.nodes):
        lane_ok[i, : x.lanes] = True
    kinds = np.array([x.kind for x in hw.nodes])
    bw = np.full((n, n), hw.lan_mbps * 1e6 / 8)
    rtt = np.full((n, n), hw.lan_rtt_ms / 1000)
    for i in range(n):
        for j in range(n):
            if (kinds[i] == "cloud") != (kinds[j] == "cloud"):
                bw[i, j], rtt[i, j] = hw.wan_mbps * 1e6 / 8, hw.wan_rtt_ms / 1000
    np.fill_diagonal(rtt, 0.0)
    share = np.array([x.job_share for x in hw.nodes], float)
    return {
        "dev": np.array([DEVICES.index(k) for k in kinds], np.int32),
        "speed": np.array([x.speed for x in hw.nodes], float),
        "lane_ok": lane_ok,
        "p_idle": np.array([x.p_idle_w * x.pue / 1000 for x in hw.nodes]),
        "p_max": np.array([x.p_max_w * x.pue / 1000 for x in hw.nodes]),
        "mem": np.array([x.memory_gb * GB for x in hw.nodes]),
        "site_probs": share / share.sum(),
        "bw": bw,
        "rtt": rtt,
        "cloud": np.int32(int(np.flatnonzero(kinds == "cloud")[0])),
    }


def model_tables(names: Sequence[str], lat_models: Mapping[tuple[str, str], LatencyModel],
                 hw: EdgeCloudHardware) -> ModelTables:
    nodes = _node_arrays(hw)
    cloud = int(nodes["cloud"])
    sites = [i for i, x in enumerate(hw.nodes) if x.kind == "edge"]
    per_model = []
    for name in names:
        prof = profile(name)
        lat = layer_latency_s(prof, lat_models)
        sets = prefix_sets(prof)
        prefix = [True] * len(sets)
        dads = {}
        for s in sites:
            t_edge = lat[:, nodes["dev"][s]] / nodes["speed"][s]
            t_cloud = lat[:, nodes["dev"][cloud]] / nodes["speed"][cloud]
            bw = nodes["bw"][s, cloud]
            cut, _ = dads_min_cut(prof, t_edge, t_cloud, bw, prof.input_bytes, prof.out_bytes[-1])
            assert closed(prof, cut)
            hit = [k for k, q in enumerate(sets) if (q == cut).all()]
            if hit:
                dads[s] = hit[0]
            else:
                sets.append(cut)
                prefix.append(False)
                dads[s] = len(sets) - 1
        stats = [segment_stats(prof, lat, q) for q in sets]
        labels = tuple(_label(prof, q) for q in sets)
        per_model.append((prof, sets, prefix, dads, stats, labels))
    c = max(len(p[1]) for p in per_model)
    m, n, d = len(names), len(hw.nodes), len(DEVICES)
    a = {
        "cand_ok": np.zeros((m, c), bool), "front_empty": np.ones((m, c), bool),
        "back_empty": np.zeros((m, c), bool), "is_prefix": np.zeros((m, c), bool),
        "front_lat": np.zeros((m, c, d)), "back_lat": np.zeros((m, c, d)), "cross_bytes": np.zeros((m, c)),
        "front_mem": np.zeros((m, c)), "back_mem": np.zeros((m, c)), "front_params": np.zeros((m, c)),
        "back_params": np.zeros((m, c)), "front_frac": np.zeros((m, c)), "all_front": np.zeros(m, np.int32),
        "dads_cut": np.zeros((m, n), np.int32), "in_bytes": np.zeros(m), "out_bytes": np.zeros(m),
    }
    for i, (prof, sets, prefix, dads, stats, _) in enumerate(per_model):
        total = prof.flops.sum()
        for k, (q, st) in enumerate(zip(sets, stats, strict=True)):
            a["cand_ok"][i, k] = True
            a["front_empty"][i, k] = not q.any()
            a["back_empty"][i, k] = bool(q.all())
            a["is_prefix"][i, k] = prefix[k]
            a["front_lat"][i, k], a["back_lat"][i, k] = st.front_lat, st.back_lat
            a["cross_bytes"][i, k] = st.cross_bytes
            a["front_mem"][i, k], a["back_mem"][i, k] = st.front_mem, st.back_mem
            a["front_params"][i, k], a["back_params"][i, k] = st.front_params, st.back_params
            a["front_frac"][i, k] = st.front_flops / total
        a["all_front"][i] = next(k for k, q in enumerate(sets) if q.all())
        for s, k in dads.items():
            a["dads_cut"][i, s] = k
        a["in_bytes"][i] = prof.input_bytes
        a["out_bytes"][i] = prof.out_bytes[-1]
    return ModelTables(tuple(names), a, tuple(len(p[1]) for p in per_model), tuple(p[5] for p in per_model))


def _label(prof, q: np.ndarray) -> str:
    if not q.any():
        return "none"
    if q.all():
        return "all"
    last = int(np.flatnonzero(q).max())
    return f"..{prof.kinds[last]}#{last}" + ("" if q[: last + 1].all() else "*")


def arrival_rate(profile_kw: np.ndarray, hours: int, jobs_per_hour: float, utc_offset_h: int) -> np.ndarray:
    """Jobs/s for each UTC hour of a year: the building-load shape (local time, typical year), mean-normalised."""
    shape = np.asarray(profile_kw, float) / np.mean(profile_kw)
    idx = (np.arange(hours) + utc_offset_h) % shape.size
    return jobs_per_hour / 3600.0 * shape[idx]


def node_traces(hw: EdgeCloudHardware, city: RegionYear, cloud: RegionYear) -> dict[str, np.ndarray]:
    """[T, N] price (USD/kWh), green power (kW, facility level) and CI (g/kWh) of every node's region."""
    cols = [cloud if x.kind == "cloud" else city for x in hw.nodes]
    t = min(c.price_usd_per_kwh.size for c in cols)
    price = np.stack([c.price_usd_per_kwh[:t] for c in cols], 1)
    green = np.stack([x.green_kw * c.renewable_frac[:t] for x, c in zip(hw.nodes, cols, strict=True)], 1)
    ci = np.stack([c.ci_g_per_kwh[:t] for c in cols], 1)
    return {"price": price, "green_kw": green, "ci": ci}


def reward_norms(tables: ModelTables, nodes: Mapping[str, np.ndarray], p: PlacementParams,
                 train_price: np.ndarray) -> tuple[float, float]:
    """(c_norm, t_norm) from the *training* year: the mean job's edge-only energy cost at the mean |price| and its
    unloaded cloud-only pipeline time. Fixed per scenario, so rewards are comparable across weights."""
    a = tables.arrays
    probs = np.asarray(p.model_probs, float) / np.sum(p.model_probs)
    b = (p.batch_max - p.batch_min) / np.log(p.batch_max / p.batch_min) if p.batch_max > p.batch_min else p.batch_min
    site = int(np.argmax(nodes["site_probs"]))
    cloud = int(nodes["cloud"])
    kw = nodes["p_max"][site] - nodes["p_idle"][site]
    e_edge = np.array([a["front_lat"][i, a["all_front"][i], 0] for i in range(len(probs))]) * b * kw / 3600
    c_norm = float(probs @ e_edge * np.mean(np.abs(train_price)))
    bw = nodes["bw"][site, cloud]
    t_cloud = np.array([max(a["back_lat"][i, 0, 1], a["in_bytes"][i] / bw) for i in range(len(probs))]) * b
    t_norm = float(probs @ t_cloud + nodes["rtt"][site, cloud] * 2)
    return c_norm, t_norm


def scenario_norms(hw: EdgeCloudHardware, traces: EnergyTraces, tables: ModelTables, p: PlacementParams,
                   scenario: Scenario) -> tuple[float, float]:
    """The reward normalisers (c_norm, t_norm) of ``scenario`` on ``hw`` (:func:`reward_norms`, training year)."""
    _check_regions(traces, scenario, (p.train_year,))
    train = node_traces(hw, traces.regions[(scenario.city, p.train_year)],
                        traces.regions[(scenario.cloud, p.train_year)])
    return reward_norms(tables, _node_arrays(hw), p, train["price"])


def _check_regions(traces: EnergyTraces, scenario: Scenario, years) -> None:
    for y in years:
        for r in (scenario.city, scenario.cloud):
            if (r, y) not in traces.regions:
                raise KeyError(f"trace lacks region {r} year {y} (have {sorted(traces.regions)})")


def env_params(hw: EdgeCloudHardware, traces: EnergyTraces, tables: ModelTables, p: PlacementParams,
               scenario: Scenario, year: int, w_energy: float, episode_jobs: int,
               start_hours: np.ndarray | None = None, norms: tuple[float, float] | None = None) -> EnvParams:
    """EnvParams of ``scenario`` in ``year`` on ``hw``. Reward normalisers come from ``p.train_year``: ``norms`` if
    given (a regime keeps those of its base hardware, :func:`regime_hardware`), else :func:`scenario_norms` of
    ``hw``."""
    _check_regions(traces, scenario, {year, p.train_year})
    nodes = _node_arrays(hw)
    tr = node_traces(hw, traces.regions[(scenario.city, year)], traces.regions[(scenario.cloud, year)])
    c_norm, t_norm = norms if norms is not None else scenario_norms(hw, traces, tables, p, scenario)
    hours = tr["price"].shape[0]
    load = traces.profiles.get("arrivals")
    if load is None:
        raise KeyError("trace lacks profile/arrivals (the building-load shape of job arrivals)")
    rate = arrival_rate(load.values, hours, p.jobs_per_hour, scenario.utc_offset_h)
    if start_hours is None:
        start_hours = np.arange(0, hours - 48)
    probs = np.asarray(p.model_probs, float)
    f = lambda x, dt=jnp.float32: jnp.asarray(x, dt)  # noqa: E731
    ta = tables.arrays
    return EnvParams(
        price=f(tr["price"]), green_kw=f(tr["green_kw"]), ci=f(tr["ci"]), rate=f(rate),
        local_offset_h=f(scenario.utc_offset_h, jnp.int32),
        dev=f(nodes["dev"], jnp.int32), speed=f(nodes["speed"]), lane_ok=jnp.asarray(nodes["lane_ok"]),
        p_idle=f(nodes["p_idle"]), p_max=f(nodes["p_max"]), mem=f(nodes["mem"]), site_probs=f(nodes["site_probs"]),
        bw=f(nodes["bw"]), rtt=f(nodes["rtt"]),
        model_probs=f(probs / probs.sum()), in_bytes=f(ta["in_bytes"]), out_bytes=f(ta["out_bytes"]),
        cand_ok=jnp.asarray(ta["cand_ok"]), front_empty=jnp.asarray(ta["front_empty"]),
        back_empty=jnp.asarray(ta["back_empty"]), is_prefix=jnp.asarray(ta["is_prefix"]),
        front_lat=f(ta["front_lat"]), back_lat=f(ta["back_lat"]), cross_bytes=f(ta["cross_bytes"]),
        front_mem=f(ta["front_mem"]), back_mem=f(ta["back_mem"]), front_params=f(ta["front_params"]),
        back_params=f(ta["back_params"]), front_frac=f(ta["front_frac"]), all_front=f(ta["all_front"], jnp.int32),
        dads_cut=f(ta["dads_cut"], jnp.int32), cloud=f(nodes["cloud"], jnp.int32),
        batch_min=f(p.batch_min), batch_max=f(p.batch_max), net_kwh_per_byte=f(hw.net_kwh_per_gb / GB),
        cold_start_s=f(hw.cold_start_s), keep_alive_s=f(hw.keep_alive_s), load_bps=f(hw.weight_load_gbps * GB / 8),
        w_energy=f(w_energy), c_norm=f(c_norm), t_norm=f(t_norm),
        reward_clip=f(p.reward_clip), reject_penalty=f(p.reject_penalty),
        start_hours=f(start_hours, jnp.int32), link_fifo=jnp.asarray(bool(hw.link_fifo)),
        reward_symlog=jnp.asarray(p.reward_scale == "symlog"), episode_jobs=int(episode_jobs),
    )


def eval_start_hours(hours: int, episodes: int) -> np.ndarray:
    """Evaluation episodes spread over the whole year and over every hour of the day (fixed, seed-independent)."""
    days = np.linspace(0, hours // 24 - 3, episodes).astype(int)
    return (days * 24 + (np.arange(episodes) * 24 // episodes) % 24).astype(np.int32)



KNOBS = ("price_spread", "green_scale", "wan_scale", "load", "contended_load")
CONTENDED_WAN = 0.25  # contended regime [ours]: WAN x0.25 (12.5 Mbps, Neurosurgeon's LTE/Wi-Fi uplinks are 1-19)
REGIME_KNOBS = ("wan_scale", "contended_load")  # knobs that change the hardware (headroom builds them as regimes)


def regime_hardware(hw: EdgeCloudHardware, regime: Regime) -> EdgeCloudHardware:
    """``hw`` in ``regime``: WAN bandwidth x ``regime.wan_scale``, FIFO WAN links if ``regime.link_fifo``. (The
    arrival rate x ``regime.load`` is applied to the environment parameters, :func:`with_load`.)"""
    if regime.wan_scale == 1.0 and regime.link_fifo == hw.link_fifo:
        return hw
    return dataclasses.replace(hw, wan_mbps=hw.wan_mbps * regime.wan_scale, link_fifo=bool(regime.link_fifo))


def with_load(params: EnvParams, load: float) -> EnvParams:
    """The job arrival rate x ``load`` (unchanged for 1)."""
    return params if load == 1.0 else params.replace(rate=params.rate * jnp.float32(load))


def knob_regime(knob: str, value: float) -> Regime:
    """The regime a hardware-changing headroom knob stands for: ``wan_scale`` (WAN bandwidth x value, links
    uncontended) or ``contended_load`` (the contended regime [ours]: one FIFO uplink and downlink per site at
    ``CONTENDED_WAN`` x the WAN bandwidth, arrival rate x value; value 1 is the contended regime itself). Built on
    the hardware, so DADS's min-cut and every model table are those of the regime's bandwidth."""
    if knob not in REGIME_KNOBS:
        raise KeyError(f"{knob!r} is not a hardware knob; those are {REGIME_KNOBS}")
    if not value > 0:
        raise ValueError(f"{knob} must be > 0, got {value}")
    if knob == "wan_scale":
        return Regime(name=f"wan_x{value:g}", wan_scale=float(value))
    return Regime(name=f"contended_x{value:g}", wan_scale=CONTENDED_WAN, link_fifo=True, load=float(value))


def vary(params: EnvParams, knob: str, value: float) -> EnvParams:
    """A variant of the scenario for the headroom sweep, on its environment parameters (``value = 1`` returns the
    scenario unchanged):

    * ``price_spread``: each node's hourly price stretched about its yearly mean by ``value``;
    * ``green_scale``: renewable capacity times ``value``;
    * ``load``: job arrival rate times ``value``.

    The knobs that change the hardware (``wan_scale``, ``contended_load``) are regimes (:func:`knob_regime`), built
    with the model tables of their bandwidth."""
    if knob in REGIME_KNOBS:
        raise KeyError(f"{knob!r} changes the hardware: build it as a regime (knob_regime), not with vary")
    if knob not in KNOBS:
        raise KeyError(f"unknown headroom knob {knob!r}; known {KNOBS}")
    if not value >= 0 or (knob == "load" and value <= 0):
        raise ValueError(f"{knob} must be {'> 0' if knob == 'load' else '>= 0'}, got {value}")
    v = jnp.float32(value)
    if knob == "price_spread":
        mean = params.price.mean(0, keepdims=True)
        return params.replace(price=mean + v * (params.price - mean))
    if knob == "green_scale":
        return params.replace(green_kw=params.green_kw * v)
    return params.replace(rate=params.rate * v)
