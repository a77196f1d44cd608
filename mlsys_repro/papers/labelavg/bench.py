"""Benchmark: federated client-rounds per wall-second on MNIST, and L-Attack queries per wall-second.

    PYTHONPATH=$PWD python -m mlsys_repro.papers.labelavg.bench [--clients 20] [--rounds 10] [--method labelavg]
                                                  [--attack-steps 50] [--directions 10]

1. One ``jit``-compiled federated run (``fd.make_train``: the whole protocol in one ``lax.scan``, every architecture
   group one vmapped step) of ``--method`` with ``--clients`` heterogeneous MLP / conv_s2 clients on MNIST, with the
   ``labelavg/accuracy`` experiment's own schedule (its ``fd`` node, rounds set by ``--rounds``). Prints
   client-rounds per wall-second and the extrapolated wall time of a 50-round run.
2. L-Attack (``zo``) against client 0 of that federation: generator steps and target-model queries per
   wall-second (``q + 1`` queries per image per step, 20 images).

Timings through the shared harness (:mod:`mlsys_repro.common.repro.bench`: the first call, compilation included, apart
from the repeats; the load average beside every figure).
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import numpy as np

from mlsys_repro.common.fl.clients import make_federation
from mlsys_repro.common.models.data import STATS
from mlsys_repro.common.repro.bench import bench_context, machine_line, time_it
from mlsys_repro.papers.labelavg.attack import AttackSetup, make_attack
from mlsys_repro.papers.labelavg.experiments import client_splits, load_fd_data
from mlsys_repro.papers.labelavg.fd import make_train
from mlsys_repro.papers.labelavg.models import REGISTRY
from mlsys_repro.papers.labelavg.schemas import AttackConfig, FDPolicy


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--method", default="labelavg", choices=["labelavg", "dsfl", "fedmd", "feddf", "fedavg"])
    ap.add_argument("--attack-steps", type=int, default=50)
    ap.add_argument("--directions", type=int, default=10)
    a = ap.parse_args(argv)

    ctx = bench_context("labelavg/accuracy")
    sched = dataclasses.replace(ctx.params.fd, rounds=a.rounds)
    data = load_fd_data("mnist", ctx.data_dir, sched)
    archs = ["mlp"] * a.clients if a.method == "fedavg" else [("mlp", "conv_s2")[k % 2] for k in range(a.clients)]
    fed = make_federation(archs, data.in_shape, data.num_classes, REGISTRY)
    policy = FDPolicy(name=a.method, method=a.method)
    _, idx, counts = client_splits(data.y_private, a.clients, 0.5, [0], sched.min_per_client)
    train = jax.jit(make_train(fed, policy, sched, data.num_classes))
    print(machine_line())
    t = time_it("federation", lambda: train(jax.random.key(0), idx[0], counts[0], data.arrays), repeats=1)
    out = train(jax.random.key(0), idx[0], counts[0], data.arrays)
    wall = t.min_s
    cr = a.clients * a.rounds / wall
    print(t.line())
    print(f"federation: {a.method}, {a.clients} clients, {a.rounds} rounds in {wall:.2f} s wall "
          f"-> {cr:.1f} client-rounds/s; a 50-round run ~{50 * a.clients / cr:.0f} s "
          f"(mean client acc {float(np.asarray(out['acc']).mean()):.3f})")

    cfg = AttackConfig(steps=a.attack_steps, directions=a.directions)
    mean, std = (tuple(np.asarray(s, np.float32).tolist()) for s in STATS["mnist"])
    setup = AttackSetup(a.method if a.method != "fedavg" else "fedmd", "zo", data.in_shape, data.num_classes, mean,
                        std, cfg)
    gi = next(i for i, g in enumerate(fed.groups) if 0 in g.client_ids)
    target = jax.tree.map(lambda x: x[fed.groups[gi].client_ids.index(0)], out["params"][gi])
    attack = jax.jit(make_attack(setup, fed.groups[gi].apply))
    ta = time_it("attack", lambda: attack(jax.random.key(1), target), repeats=1)
    print(ta.line())
    wall_a = ta.min_s
    q = setup.queries_per_step * a.attack_steps
    print(f"attack: zo, {setup.batch} images, q={a.directions}, {a.attack_steps} steps in {wall_a:.2f} s wall -> "
          f"{a.attack_steps / wall_a:.1f} generator steps/s, {q / wall_a:.0f} queries/s")


if __name__ == "__main__":
    main()
