"""MAIFS benchmark: full Philly replay, MARL environment throughput, training time.

    PYTHONPATH=$PWD python -m papers.maifs.bench [--envs 1024] [--steps 50] [--slots 2048]

Prints, in one run:
1. the full 82,247-job Philly trace replayed on the Philly-sized cluster (64 x 8 GPUs, 300 s leases) under
   FIFO and under Synergy-tune (FIFO order): wall time with and without compilation, jobs/s, rounds, mean JCT;
2. the MARL environment's throughput: vmapped environments stepped with random valid actions (agent-steps/s);
3. training time: seconds per PPO update of the default configuration (measured here) and the wall time the
   committed results record for training every learned policy (``results/maifs/ablation.csv``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from common.rl.marl import stack_agents
from common.sim.cluster import SimConfig, make_jobs, simulate, summarize
from common.traces.gpu import load_philly_jobs
from papers.maifs import runner
from papers.maifs.baselines import Heuristic, make_schedule
from papers.maifs.env import MaifsEnv
from papers.maifs.model import variant
from papers.maifs.schemas import GpuClusterHardware, MaifsParams, RLPolicy
from papers.maifs.train import Problem, make_train
from papers.maifs.workload import _assign_models, stack

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
FILES = {"jobs": "gpu_traces/philly/sia_philly_jobs.csv.gz",
         "saturn": "gpu_traces/sia_workloads/sia_pollux_workloads.csv.gz",
         "synergy_tput": "gpu_traces/synergy/synergy_cpu_mem_tput.csv.gz",
         "synergy_stats": "gpu_traces/synergy/synergy_model_stats.csv",
         "sia_profiles": "gpu_traces/sia_profiles/sia_app_profiles_subset.tar.gz"}


def full_replay(slots: int, lookahead: int) -> None:
    d = runner.load_data(FILES, DATA)
    ph = load_philly_jobs(DATA / FILES["jobs"])
    hw = GpuClusterHardware(name="philly_64x8_v100", servers_per_rack=64)
    cl = hw.spec(DATA).arrays()
    models = _assign_models(np.random.default_rng(0), len(ph), d.profiles, (20, 70, 10))
    jobs = make_jobs(ph.submit_s - ph.submit_s[0], ph.duration_s, ph.num_gpus, models)
    cfg = SimConfig(round_s=hw.lease_s, num_slots=slots, admit_per_round=512, max_rounds=10_000_000)
    run = jax.jit(lambda hp, j: simulate(cl, d.profiles.speed, j, cfg, make_schedule(hp, cl, d.profiles.demand(),
                                                                                     j, lookahead)))
    print(f"1. full Philly replay: {len(ph):,} jobs, 64 servers x 8 GPUs, {slots} active slots, "
          f"lookahead {lookahead}")
    for name, h in (("FIFO", Heuristic("fifo", "fair")), ("Synergy-tune", Heuristic("fifo", "tune"))):
        t0 = time.perf_counter()
        st = jax.block_until_ready(run(h.params(), jobs))
        t1 = time.perf_counter()
        st = jax.block_until_ready(run(h.params(), jobs))
        t2 = time.perf_counter()
        r = summarize(cl, jobs, st)
        print(f"   {name:13s} wall {t2 - t1:6.1f} s (with compile {t1 - t0:6.1f} s), {len(ph) / (t2 - t1):8.0f} jobs/s,"
              f" {r.counters['rounds']:,} rounds, finished={r.finished}, mean JCT {r.jct.mean() / 3600:.1f} h, "
              f"admission waits {r.counters['admit_capped']:,} rounds, overcommit {r.counters['max_overcommit']:.3g}")


def env_throughput(num_envs: int, steps: int) -> None:
    d = runner.load_data(FILES, DATA)
    p = MaifsParams()
    hw = GpuClusterHardware(name="synergy_8x8_v100", servers_per_rack=8)
    spec = hw.spec(DATA)
    cl = spec.arrays()
    wins = runner.training_windows(d, p, spec.total_gpus)
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(), stack(wins, pad_to=p.jobs_per_window))
    ecfg = runner.env_config(p, spec.num_servers, hw.lease_s, False)

    def rollout(prob, key):
        env = MaifsEnv(prob.cl, prob.sm, prob.md, prob.windows, ecfg)
        keys = jax.random.split(key, num_envs)
        obs, st = jax.vmap(env.reset)(keys)

        def body(c, _):
            obs, st, key = c
            key, k1, k2 = jax.random.split(key, 3)
            o = jax.vmap(lambda x: stack_agents(x, env.agents))(obs)
            picks = jax.random.categorical(k1, jnp.where(o["mask"], 0.0, -1e9))
            lv = jax.random.randint(k1, picks.shape, 0, 4)
            acts = {a: jnp.stack([picks[:, i], lv[:, i]], -1) for i, a in enumerate(env.agents)}
            obs, st, r, dn, _ = jax.vmap(env.step)(jax.random.split(k2, num_envs), st, acts)
            return (obs, st, key), dn["__all__"].sum()

        return jax.lax.scan(body, (obs, st, key), None, length=steps)[1].sum()

    f = jax.jit(rollout)
    t0 = time.perf_counter()
    jax.block_until_ready(f(prob, jax.random.key(0)))
    t1 = time.perf_counter()
    eps = int(jax.block_until_ready(f(prob, jax.random.key(1))))
    t2 = time.perf_counter()
    n = num_envs * steps * ecfg.num_agents
    print(f"2. MARL env: {num_envs} vmapped envs x {steps} steps x {ecfg.num_agents} agents = {n:,} agent-steps in "
          f"{t2 - t1:.2f} s -> {n / (t2 - t1):,.0f} agent-steps/s (compile {t1 - t0:.1f} s; {eps} episodes ended)")


def training_time() -> None:
    d = runner.load_data(FILES, DATA)
    p = MaifsParams()
    hw = GpuClusterHardware(name="synergy_8x8_v100", servers_per_rack=8)
    spec = hw.spec(DATA)
    cl = spec.arrays()
    pol = RLPolicy(name="maifs")
    cfg = runner.train_config(p, pol)
    ecfg = runner.env_config(p, spec.num_servers, hw.lease_s, False)
    init, chunk, _, _ = make_train(ecfg, cfg, spec.num_servers)
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(),
                   stack(runner.training_windows(d, p, spec.total_gpus), pad_to=p.jobs_per_window))
    var = variant()
    c = jax.jit(chunk)
    rs = init(jax.random.key(0), var, prob)
    t0 = time.perf_counter()
    rs, _ = jax.block_until_ready(c(rs, var, prob))
    t1 = time.perf_counter()
    rs, _ = jax.block_until_ready(c(rs, var, prob))
    t2 = time.perf_counter()
    per = (t2 - t1) / cfg.updates_per_chunk
    print(f"3. training: {per:.2f} s per PPO update for one seed ({cfg.num_envs} envs x {cfg.rollout_len} steps, "
          f"{cfg.epochs} epochs; compile {t1 - t0 - per * cfg.updates_per_chunk:.0f} s); the default profile runs "
          f"{p.num_updates} updates -> ~{per * p.num_updates:.0f} s per policy and seed")
    csv = ROOT / "results/maifs/ablation.csv"
    if csv.exists():
        df = pd.read_csv(csv)
        w = df[df["metric"] == "train_wall_s"].groupby("policy")["value"].first()
        print("   committed results: wall time of each vmapped training run (all variants x seeds together): "
              + ", ".join(f"{k} {v:.0f} s" for k, v in w.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--slots", type=int, default=2048)
    ap.add_argument("--lookahead", type=int, default=64)
    ap.add_argument("--skip", nargs="*", default=[], choices=["replay", "env", "train"])
    a = ap.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    if "replay" not in a.skip:
        full_replay(a.slots, a.lookahead)
    if "env" not in a.skip:
        env_throughput(a.envs, a.steps)
    if "train" not in a.skip:
        training_time()


if __name__ == "__main__":
    main()
