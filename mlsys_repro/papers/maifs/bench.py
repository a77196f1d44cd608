"""MAIFS benchmark: full Philly replay, MARL environment throughput, training time.

    PYTHONPATH=$PWD python -m mlsys_repro.papers.maifs.bench [--envs 1024] [--steps 50] [--slots 2048]

Prints, in one run:
1. the full 82,247-job Philly trace replayed on the Philly-sized cluster (64 x 8 GPUs, 300 s leases) under
   FIFO and under Synergy-tune (FIFO order): wall time with and without compilation, jobs/s, rounds, mean JCT;
2. the MARL environment's throughput: vmapped environments stepped with random valid actions (agent-steps/s);
3. training time: seconds per PPO update of the default configuration (measured here) and the wall time the
   committed results record for training every learned policy (``results/maifs/ablation.csv``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from mlsys_repro.common.repro.bench import bench_context, machine_line, time_it
from mlsys_repro.common.rl.marl import stack_agents
from mlsys_repro.common.sim.cluster import SimConfig, make_jobs, simulate, summarize
from mlsys_repro.papers.maifs import data, pipeline
from mlsys_repro.papers.maifs.baselines import Heuristic, make_schedule
from mlsys_repro.papers.maifs.env import MaifsEnv
from mlsys_repro.papers.maifs.model import variant
from mlsys_repro.papers.maifs.schemas import GpuClusterHardware
from mlsys_repro.papers.maifs.train import Problem, make_train
from mlsys_repro.papers.maifs.windows import _assign_models, stack

ROOT = Path(__file__).resolve().parents[3]


def full_replay(ctx, slots: int, lookahead: int) -> None:
    """The experiment's traces and profiles, replayed whole on a Philly-sized cluster (64 x 8 GPUs) [bench only]."""
    d = data.load_data(ctx.trace.files, ctx.data_dir, ctx.cache)
    ph = d.philly
    hw = GpuClusterHardware(name="philly_64x8_v100", servers_per_rack=64)
    cl = hw.spec(ctx.data_dir).arrays()
    models = _assign_models(np.random.default_rng(0), len(ph), d.profiles, (20, 70, 10))
    jobs = make_jobs(ph.submit_s - ph.submit_s[0], ph.duration_s, ph.num_gpus, models)
    cfg = SimConfig(round_s=hw.lease_s, num_slots=slots, admit_per_round=512, max_rounds=10_000_000)
    run = jax.jit(lambda hp, j: simulate(cl, d.profiles.speed, j, cfg, make_schedule(hp, cl, d.profiles.demand(),
                                                                                     j, lookahead)))
    print(f"1. full Philly replay: {len(ph):,} jobs, 64 servers x 8 GPUs, {slots} active slots, "
          f"lookahead {lookahead}")
    for name, h in (("FIFO", Heuristic("fifo", "fair")), ("Synergy-tune", Heuristic("fifo", "tune"))):
        t = time_it(name, lambda h=h: run(h.params(), jobs), repeats=1)
        r = summarize(cl, jobs, run(h.params(), jobs))
        print(f"   {t.line()}; {len(ph) / t.min_s:8.0f} jobs/s,"
              f" {r.counters['rounds']:,} rounds, finished={r.finished}, mean JCT {r.jct.mean() / 3600:.1f} h, "
              f"admission waits {r.counters['admit_capped']:,} rounds, overcommit {r.counters['max_overcommit']:.3g}")


def _setup(ctx):
    p, hw = ctx.params, ctx.hardware
    spec = hw.spec(ctx.data_dir)
    d = data.load_data(ctx.trace.files, ctx.data_dir, ctx.cache)
    return p, hw, spec, spec.arrays(), d


def env_throughput(ctx, num_envs: int, steps: int) -> None:
    p, hw, spec, cl, d = _setup(ctx)
    wins = data.training_windows(d, p, spec.total_gpus, "philly")
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(), stack(wins, pad_to=p.jobs_per_window))
    ecfg = pipeline.env_config(p, spec.num_servers, hw.lease_s, False)

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
    t = time_it("MARL env rollout", lambda: f(prob, jax.random.key(1)), repeats=2)
    n = num_envs * steps * ecfg.num_agents
    print(f"2. MARL env: {num_envs} vmapped envs x {steps} steps x {ecfg.num_agents} agents = {n:,} agent-steps: "
          f"{t.line()} -> {n / t.min_s:,.0f} agent-steps/s")


def training_time(ctx) -> None:
    p, hw, spec, cl, d = _setup(ctx)
    pol = ctx.policies["maifs"]
    cfg = pipeline.train_config(p, pol)
    ecfg = pipeline.env_config(p, spec.num_servers, hw.lease_s, False)
    init, chunk, _, _ = make_train(ecfg, cfg, spec.num_servers)
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(),
                   stack(data.training_windows(d, p, spec.total_gpus, "philly"), pad_to=p.jobs_per_window))
    var = variant()
    c = jax.jit(chunk)
    jinit = jax.jit(init)
    tw = time_it("the warm start (behaviour cloning)", lambda: jinit(jax.random.key(0), var, prob), repeats=1)
    print(f"3a. warm start (p.bc_rounds = {p.bc_rounds} teacher batches): {tw.line()}")
    rs = jinit(jax.random.key(0), var, prob)
    t = time_it("one training chunk", lambda: c(rs, var, prob), repeats=1, per=f"{cfg.updates_per_chunk} updates")
    per = t.min_s / cfg.updates_per_chunk
    print(f"3. training: {t.line()}\n   {per:.2f} s per PPO update for one seed ({cfg.num_envs} envs x "
          f"{cfg.rollout_len} steps, {cfg.epochs} epochs); the default profile runs "
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
    ctx = bench_context("maifs/headline_philly")  # the headline's own traces, cluster, params and policies
    print(machine_line())
    if "replay" not in a.skip:
        full_replay(ctx, a.slots, a.lookahead)
    if "env" not in a.skip:
        env_throughput(ctx, a.envs, a.steps)
    if "train" not in a.skip:
        training_time(ctx)


if __name__ == "__main__":
    main()
