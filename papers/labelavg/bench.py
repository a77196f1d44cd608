"""Benchmark: federated client-rounds per wall-second on MNIST, and L-Attack queries per wall-second.

    PYTHONPATH=$PWD python -m papers.labelavg.bench [--clients 20] [--rounds 10] [--method labelavg]
                                                  [--attack-steps 50] [--directions 10]

1. One ``jit``-compiled federated run (``fd.make_train``: the whole protocol in one ``lax.scan``, every architecture
   group one vmapped step) of ``--method`` with ``--clients`` heterogeneous MLP / conv_s2 clients on MNIST, with the
   accuracy experiment's default schedule (10 local + 10 distillation steps of batch 32 per round, public batch
   320). Prints client-rounds per wall-second and the extrapolated wall time of a 50-round run.
2. L-Attack (``zo``) against client 0 of that federation: generator steps and target-model queries per
   wall-second (``q + 1`` queries per image per step, 20 images).

Compilation is excluded (each function is run once on the same shapes first). Prints the load average too:
the figures are only meaningful next to it (2 shared cores).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from common.fl.clients import make_federation
from common.models.data import STATS
from papers.labelavg.attack import AttackSetup, make_attack
from papers.labelavg.experiments import client_splits, load_fd_data
from papers.labelavg.fd import make_train
from papers.labelavg.models import REGISTRY
from papers.labelavg.schemas import AttackConfig, FDPolicy, FDSchedule

DATA_DIR = Path(__file__).resolve().parents[2] / "data"


def _timed(fn, *args) -> tuple[float, object]:
    jax.block_until_ready(fn(*args))  # compile + first run
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--method", default="labelavg", choices=["labelavg", "dsfl", "fedmd", "feddf", "fedavg"])
    ap.add_argument("--attack-steps", type=int, default=50)
    ap.add_argument("--directions", type=int, default=10)
    a = ap.parse_args(argv)

    sched = FDSchedule(rounds=a.rounds)
    data = load_fd_data("mnist", DATA_DIR, sched)
    archs = ["mlp"] * a.clients if a.method == "fedavg" else [("mlp", "conv_s2")[k % 2] for k in range(a.clients)]
    fed = make_federation(archs, data.in_shape, data.num_classes, REGISTRY)
    policy = FDPolicy(name=a.method, method=a.method)
    _, idx, counts = client_splits(data.y_private, a.clients, 0.5, [0], sched.min_per_client)
    train = jax.jit(make_train(fed, policy, sched, data.num_classes))
    wall, out = _timed(train, jax.random.key(0), idx[0], counts[0], data.arrays)
    cr = a.clients * a.rounds / wall
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
    wall_a, _ = _timed(attack, jax.random.key(1), target)
    q = setup.queries_per_step * a.attack_steps
    print(f"attack: zo, {setup.batch} images, q={a.directions}, {a.attack_steps} steps in {wall_a:.2f} s wall -> "
          f"{a.attack_steps / wall_a:.1f} generator steps/s, {q / wall_a:.0f} queries/s")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; jax {jax.__version__}, "
          f"devices {jnp.zeros(1).devices()}")


if __name__ == "__main__":
    main()
