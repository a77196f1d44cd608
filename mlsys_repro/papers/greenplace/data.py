"""greenplace's data, from a RunContext to environments: load the vendored traces, fit the latency models, build
the model tables and the train (2022) / evaluation (2023) environment parameters of each scenario. Built once per
run and configuration (``ctx.cache``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mlsys_repro.common.traces.energy  # noqa: F401  (registers the energy_green_dcc loader)
from mlsys_repro.common.traces import load_trace
from mlsys_repro.common.traces.energy import EnergyTraces
from mlsys_repro.papers.greenplace.env import EnvParams
from mlsys_repro.papers.greenplace.latency import LatencyModel, fit_all
from mlsys_repro.papers.greenplace.scenario import ModelTables, env_params, eval_start_hours, model_tables
from mlsys_repro.papers.greenplace.schemas import EdgeCloudHardware, PlacementParams, Scenario


@dataclass(frozen=True)
class World:
    traces: EnergyTraces
    latency: dict[tuple[str, str], LatencyModel]
    tables: ModelTables
    hardware: EdgeCloudHardware
    params: PlacementParams

    def train_params(self, scenario: Scenario, w_energy: float) -> EnvParams:
        return env_params(self.hardware, self.traces, self.tables, self.params, scenario, self.params.train_year,
                          w_energy, self.params.episode_jobs)

    def eval_params(self, scenario: Scenario, w_energy: float) -> tuple[EnvParams, np.ndarray]:
        p = env_params(self.hardware, self.traces, self.tables, self.params, scenario, self.params.eval_year,
                       w_energy, self.params.eval_jobs)
        return p, eval_start_hours(int(p.price.shape[0]), self.params.eval_episodes)

    def curve_params(self, scenario: Scenario, w_energy: float) -> tuple[EnvParams, np.ndarray]:
        """Fixed *training-year* episodes on which the learning curve and the training gates are scored."""
        p = env_params(self.hardware, self.traces, self.tables, self.params, scenario, self.params.train_year,
                       w_energy, self.params.curve_jobs)
        return p, eval_start_hours(int(p.price.shape[0]), self.params.curve_episodes)


@dataclass
class _TraceCfg:
    name: str
    loader: str
    files: dict
    options: dict


def world(ctx) -> World:
    """The World of an experiment context (trace, hardware and params from its config)."""
    p: PlacementParams = ctx.params
    files = dict(ctx.trace.files)

    def load():
        traces = load_trace(_TraceCfg(ctx.trace.name, "energy_green_dcc", files, {}), Path(ctx.data_dir))
        return traces, fit_all(traces.latency, p.latency_seed)

    def build() -> World:
        traces, latency = ctx.cache.get("greenplace.traces", (ctx.data_dir, ctx.trace.name, files, p.latency_seed),
                                        load)
        return World(traces, latency, model_tables(p.models, latency, ctx.hardware), ctx.hardware, p)

    return ctx.cache.get("greenplace.data", (ctx.data_dir, ctx.trace.name, files, ctx.hardware, p), build)
