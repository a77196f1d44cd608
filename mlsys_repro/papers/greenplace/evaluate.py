"""Roll a policy over fixed evaluation episodes (jit, vmapped over seeds and episodes) and reduce to metrics."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.rl.env import rollout
from mlsys_repro.papers.greenplace.env import EnvParams, PlacementEnv

ENV = PlacementEnv()

METRICS = {  # name: unit
    "energy_cost_usd_per_1k_jobs": "USD",
    "mean_jct_s": "s",
    "p95_jct_s": "s",
    "energy_kwh_per_1k_jobs": "kWh",
    "co2_kg_per_1k_jobs": "kg",
    "renewable_utilisation": "fraction",
    "objective": "normalised",
    "rejected_frac": "fraction",
    "cloud_work_share": "fraction",
}


def _rollout_fn(act: Callable, num_jobs: int, batched_policy: bool, compiled: dict | None):
    """jit(vmap over seeds (and their policy params) of vmap over episodes), memoised in ``compiled`` (a run-scoped
    table, ``ctx.cache.table(...)``) so every scenario and seed count reuses one compilation per policy. ``act``
    must hash and compare by value (a module-level function or a frozen dataclass such as the look-ahead planner)."""
    key = (act, num_jobs, batched_policy)
    if compiled is not None and key in compiled:
        return compiled[key]

    def one(pp, key, h, params):
        p = params.replace(start_hours=h[None], episode_jobs=int(num_jobs))
        _, (reward, done, info) = rollout(ENV, lambda k, o, s, q: act(pp, k, o, s, q), key, p, num_jobs)
        info["reward"] = reward
        return info

    def per_seed(pp, key, hours, params):
        keys = jax.random.split(key, hours.shape[0])
        return jax.vmap(one, in_axes=(None, 0, 0, None))(pp, keys, hours, params)

    fn = jax.jit(jax.vmap(per_seed, in_axes=(0 if batched_policy else None, 0, None, None)))
    if compiled is not None:
        compiled[key] = fn
    return fn


def rollouts(act: Callable, params: EnvParams, keys: jax.Array, start_hours: np.ndarray, num_jobs: int,
             policy_params=None, compiled: dict | None = None) -> dict[str, jax.Array]:
    """Per-step info of ``act`` on every (seed key, episode start hour): leaves [S, E, num_jobs].

    ``act(policy_params, key, obs, state, params)``; ``policy_params`` carries a leading seed axis (one trained
    agent per seed) or is None (heuristics). ``compiled``: the run's table of compiled rollouts (None compiles
    afresh).
    """
    fn = _rollout_fn(act, int(num_jobs), policy_params is not None, compiled)
    return fn(policy_params, keys, jnp.asarray(start_hours, jnp.int32), params)


def summarise(info: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-seed metrics (arrays [S]) from rollout info [S, E, J]."""
    i = {k: np.asarray(v) for k, v in info.items()}
    s = i["jct"].shape[0]
    flat = {k: v.reshape(s, -1) for k, v in i.items() if v.ndim == 3}
    ok = flat["rejected"] < 0.5
    n = flat["jct"].shape[1]
    compute = flat["energy_kwh"] - flat["net_kwh"]
    out = {
        "energy_cost_usd_per_1k_jobs": flat["cost"].sum(1) / n * 1000,
        "mean_jct_s": np.array([flat["jct"][k][ok[k]].mean() if ok[k].any() else 0.0 for k in range(s)]),
        "p95_jct_s": np.array([np.percentile(flat["jct"][k][ok[k]], 95) if ok[k].any() else 0.0 for k in range(s)]),
        "energy_kwh_per_1k_jobs": flat["energy_kwh"].sum(1) / n * 1000,
        "co2_kg_per_1k_jobs": flat["co2_kg"].sum(1) / n * 1000,
        "renewable_utilisation": flat["green_kwh"].sum(1) / np.maximum(compute.sum(1), 1e-12),
        "objective": flat["objective"].mean(1),
        "rejected_frac": 1.0 - ok.mean(1),
        "cloud_work_share": flat["cloud_work"].sum(1) / np.maximum(ok.sum(1), 1),
    }
    return out


def hourly_profile(info: dict[str, np.ndarray], params: EnvParams) -> dict[str, np.ndarray]:
    """Mean over jobs by local hour of day: cloud work share, price at the cloud and at the city, green share."""
    hour = np.asarray(info["hour"]).reshape(-1)
    local = (hour + int(params.local_offset_h)) % 24
    cw = np.asarray(info["cloud_work"]).reshape(-1)
    price = np.asarray(params.price)[hour]
    green = np.asarray(params.green_kw)[hour] / np.maximum(np.asarray(params.p_max)[None], 1e-9)
    cloud = int(params.cloud)
    city = [n for n in range(price.shape[1]) if n != cloud][0]
    out = {"hour": np.arange(24)}
    for name, v in (("cloud_work", cw), ("price_cloud", price[:, cloud]), ("price_city", price[:, city]),
                    ("green_city", green[:, city]), ("green_cloud", green[:, cloud])):
        out[name] = np.array([v[local == h].mean() if (local == h).any() else np.nan for h in range(24)])
    return out
