"""Benchmark: vmapped environment steps per second and agent training wall time (prints figures).

    PYTHONPATH=$PWD python -m mlsys_repro.papers.greenplace.bench [--envs 4096] [--steps 200] [--train-iters 300]

Uses the default-profile configuration (hardware, California 2022 traces). Steps/s counts environment
transitions (one job placed, its observation built) with a fixed cheap policy (cloud-only) and with uniformly
random valid actions (the per-step key splitting an agent loop does is included); the
training figure is iterations/s of BDQ with the default profile's seeds vmapped, and the implied wall time of the
default profile's training budget.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from mlsys_repro.common.repro.bench import bench_context, machine_line, time_it
from mlsys_repro.papers.greenplace import dqn_agents
from mlsys_repro.papers.greenplace.baselines import cloud_only, random_policy
from mlsys_repro.papers.greenplace.data import world
from mlsys_repro.papers.greenplace.env import PlacementEnv

ENV = PlacementEnv()


def steps_per_second(params, policy, num_envs: int, num_steps: int, repeats: int = 5,
                     env_step: bool = True) -> float:
    """Transitions per second of ``num_envs`` vmapped environments under ``policy`` (best of ``repeats``).

    ``env_step=False`` times the same loop (key splitting, policy, carry) with the environment step replaced by
    the identity: the harness's own cost, so that the environment's share can be told apart.
    """
    def run(key):
        keys = jax.random.split(key, num_envs)
        obs, state = jax.vmap(ENV.reset, in_axes=(0, None))(keys, params)

        def body(carry, k):
            obs, state = carry
            ks = jax.random.split(k, num_envs)
            a = jax.vmap(policy, in_axes=(0, 0, 0, None))(ks, obs, state, params)
            if env_step:
                obs, state, r, d, _ = jax.vmap(ENV.step, in_axes=(0, 0, 0, None))(ks, state, a, params)
            else:
                # keep the keys live (the step would consume them): one float per key, not a PRNG call
                r = a.sum(-1).astype(jnp.float32) + 1e-30 * jax.random.key_data(ks)[:, 0].astype(jnp.float32)
                state = state.replace(t=state.t + r)
            # the observation is part of the output: an agent reads it, so XLA may not drop its computation
            return (obs, state), r.sum() + obs.sum()

        _, rs = jax.lax.scan(body, (obs, state), jax.random.split(key, num_steps))
        return rs.sum()

    f = jax.jit(run)
    keys = iter(range(repeats + 1))
    t = time_it("env steps", lambda: f(jax.random.key(next(keys))), repeats)
    return num_envs * num_steps / t.min_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--train-iters", type=int, default=300)
    args = ap.parse_args()
    ctx = bench_context("greenplace/headline")
    w = world(ctx)
    sc = ctx.params.scenarios[0]
    params = w.train_params(sc, 0.5)
    print(machine_line())
    for name, pol in (("cloud_only", cloud_only), ("random", random_policy)):
        fn = lambda k, o, s, p, pol=pol: pol(k, o, s, p)  # noqa: E731
        sps = steps_per_second(params, fn, args.envs, args.steps)
        loop = steps_per_second(params, fn, args.envs, args.steps, env_step=False)
        env_only = 1.0 / (1.0 / sps - 1.0 / loop)
        print(f"env steps/s ({args.envs} envs vmapped, {name} actions): {sps:,.0f} with the loop; loop alone "
              f"{loop:,.0f}/s, so the environment's own cost is {env_only:,.0f} steps/s")
    pol = ctx.policies["bdq"]
    seeds = ctx.num_seeds
    train = dqn_agents.make_train(ENV, params, pol, args.train_iters, ctx.params.train_envs)
    fn = jax.jit(jax.vmap(train, in_axes=(0, 0, None)))
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds, dtype=jnp.uint32))
    ws = jnp.full(seeds, 0.5)
    t = time_it(f"BDQ training, {args.train_iters} iterations", lambda: fn(keys, ws, params), repeats=1)
    print(t.line())
    first, ips = t.first_s, args.train_iters / t.min_s
    budget = ctx.params.train_iterations
    print(f"BDQ training, {seeds} seeds vmapped x {ctx.params.train_envs} envs: {ips:,.1f} iterations/s "
          f"({ips * seeds * ctx.params.train_envs:,.0f} env steps/s incl. updates); compile+first run {first:.1f} s")
    print(f"default profile budget {budget} iterations per agent -> {budget / ips / 60:.1f} min per (agent, "
          f"scenario) after compilation")


if __name__ == "__main__":
    main()
