"""greenplace's data, from a RunContext to environments: load the vendored traces, fit the latency models, build
the model tables and the train (2022) / evaluation (2023) environment parameters of each scenario in a regime
(network and load, :class:`mlsys_repro.papers.greenplace.schemas.Regime`). Built once per run and configuration
(``ctx.cache``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mlsys_repro.common.traces.energy  # noqa: F401  (registers the energy_green_dcc loader)
from mlsys_repro.common.traces import load_trace
from mlsys_repro.common.traces.energy import EnergyTraces
from mlsys_repro.papers.greenplace.env import EnvParams
from mlsys_repro.papers.greenplace.latency import LatencyModel, fit_all
from mlsys_repro.papers.greenplace.scenario import (
    ModelTables,
    env_params,
    eval_start_hours,
    model_tables,
    regime_hardware,
    scenario_norms,
    with_load,
)
from mlsys_repro.papers.greenplace.schemas import EdgeCloudHardware, PlacementParams, Regime, Scenario


@dataclass(frozen=True)
class World:
    """Traces, latency models and model tables of one regime (``params.regime`` unless another is asked for):
    ``hardware`` and ``tables`` are the regime's (its WAN bandwidth, FIFO links, DADS min-cuts); the reward
    normalisers are those of ``base_hardware`` (the hardware as configured), the same in every regime."""

    traces: EnergyTraces
    latency: dict[tuple[str, str], LatencyModel]
    tables: ModelTables
    hardware: EdgeCloudHardware
    params: PlacementParams
    regime: Regime
    base_hardware: EdgeCloudHardware
    base_tables: ModelTables

    def norms(self, scenario: Scenario) -> tuple[float, float]:
        return scenario_norms(self.base_hardware, self.traces, self.base_tables, self.params, scenario)

    def _params(self, scenario: Scenario, year: int, w_energy: float, jobs: int) -> EnvParams:
        p = env_params(self.hardware, self.traces, self.tables, self.params, scenario, year, w_energy, jobs,
                       norms=self.norms(scenario))
        return with_load(p, self.regime.load)

    def train_params(self, scenario: Scenario, w_energy: float) -> EnvParams:
        return self._params(scenario, self.params.train_year, w_energy, self.params.episode_jobs)

    def eval_params(self, scenario: Scenario, w_energy: float) -> tuple[EnvParams, np.ndarray]:
        p = self._params(scenario, self.params.eval_year, w_energy, self.params.eval_jobs)
        return p, eval_start_hours(int(p.price.shape[0]), self.params.eval_episodes)

    def curve_params(self, scenario: Scenario, w_energy: float) -> tuple[EnvParams, np.ndarray]:
        """Fixed *training-year* episodes on which the learning curve and the training gates are scored."""
        p = self._params(scenario, self.params.train_year, w_energy, self.params.curve_jobs)
        return p, eval_start_hours(int(p.price.shape[0]), self.params.curve_episodes)


@dataclass
class _TraceCfg:
    name: str
    loader: str
    files: dict
    options: dict


def world(ctx, regime: Regime | None = None) -> World:
    """The World of an experiment context (trace, hardware and params from its config) in ``regime`` (default: the
    experiment's ``params.regime``)."""
    p: PlacementParams = ctx.params
    regime = p.regime if regime is None else regime
    files = dict(ctx.trace.files)

    def load():
        traces = load_trace(_TraceCfg(ctx.trace.name, "energy_green_dcc", files, {}), Path(ctx.data_dir))
        return traces, fit_all(traces.latency, p.latency_seed)

    def tables(hw: EdgeCloudHardware) -> ModelTables:
        return ctx.cache.get("greenplace.tables", (ctx.data_dir, ctx.trace.name, files, p.latency_seed, p.models, hw),
                             lambda: model_tables(p.models, load_traces()[1], hw))

    def load_traces():
        return ctx.cache.get("greenplace.traces", (ctx.data_dir, ctx.trace.name, files, p.latency_seed), load)

    def build() -> World:
        traces, latency = load_traces()
        hw = regime_hardware(ctx.hardware, regime)
        return World(traces, latency, tables(hw), hw, p, regime, ctx.hardware, tables(ctx.hardware))

    return ctx.cache.get("greenplace.data", (ctx.data_dir, ctx.trace.name, files, ctx.hardware, p, regime), build)
