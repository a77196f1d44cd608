"""Benchmark: SSL training throughput of vmapped clients and the cost of FedFoA's relation extraction (prints).

    PYTHONPATH=$PWD python -m mlsys_repro.papers.fedfoa.bench [--clients 5] [--steps 10] [--batch 64] [--image-size 16]

For each encoder (``cnn_s``, ``cnn_l``) it compiles one client round of local BYOL training (``vmap`` over
``--clients`` stacked clients, ``lax.scan`` over ``--steps`` steps, FedFoA's alignment term on) on CIFAR-10 (the
vendored JPEG q75 copy) and reports

* SSL training images per wall-second per client (one image = one pair of augmented views), and in total;
* the wall time of one relation-matrix extraction (embed ``--rel-samples`` images, correlation, rank-r
  eigen-factorisation) for all clients, against one local epoch (``shard / batch`` steps at the measured rate);
* compile times (XLA:CPU, optimisation level 1).

Timings are the best of ``--repeats`` runs after a warm-up call.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from mlsys_repro.papers.fedfoa import relation
from mlsys_repro.papers.fedfoa.augment import eval_view
from mlsys_repro.papers.fedfoa.data import load_ssl_data
from mlsys_repro.papers.fedfoa.federation import COMPILER_OPTIONS, FedShape, _Ctx, knobs, make_local_train
from mlsys_repro.papers.fedfoa.models import NetSpec, make_net, num_params


def _best(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return min(ts)


def bench_arch(arch: str, a: argparse.Namespace, images: jax.Array, mean: jax.Array, std: jax.Array) -> dict:
    spec = NetSpec(arch, 3, a.proj_dim, 256)
    shape = FedShape(groups=((spec, a.clients),), rounds=1, local_steps=a.steps, batch_size=a.batch,
                     rank=a.rank, rel_samples=a.rel_samples, image_size=a.image_size)
    net = make_net(spec)
    kn = knobs(shape, "local", foa=True, lam=1.0)
    lt = make_local_train(shape, net)
    k = a.clients
    params = jax.vmap(net.init)(jax.random.split(jax.random.key(0), k))
    shard = images.shape[0] // k
    idx = jnp.arange(k * shard).reshape(k, shard)
    counts = jnp.full((k,), shard)
    ctx = _Ctx(kn, jnp.float32(0.05), jnp.eye(a.proj_dim), jnp.bool_(True), jnp.zeros((1, a.proj_dim)),
               jnp.bool_(False))

    def train_round(params, key):
        return jax.vmap(lt, in_axes=(0, 0, 0, 0, 0, None, None, None, None, None, None))(
            params, params, jax.random.split(key, k), idx, counts, jnp.float32(1.0), ctx, images, mean, std, None)

    @jax.jit
    def extract(params, key):
        def one(p, kk, ix):
            j = ix[jax.random.randint(kk, (a.rel_samples,), 0, shard)]
            z = net.embed(p, eval_view(images[j], a.image_size, mean, std))
            rk, ok = relation.relation_matrix(z)
            return relation.factorise(rk, a.rank), ok

        return jax.vmap(one)(params, jax.random.split(key, k), idx)

    train_round = jax.jit(train_round, compiler_options=COMPILER_OPTIONS)
    t0 = time.perf_counter()
    jax.block_until_ready(train_round(params, jax.random.key(1)))
    compile_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(extract(params, jax.random.key(2)))
    compile_extract = time.perf_counter() - t0
    t_round = _best(lambda: train_round(params, jax.random.key(3)), a.repeats)
    t_extract = _best(lambda: extract(params, jax.random.key(4)), a.repeats)
    per_client = a.steps * a.batch / t_round
    epoch_steps = shard / a.batch
    t_epoch = t_round * epoch_steps / a.steps
    return {"arch": arch, "params": num_params(params) // k, "compile_train_s": compile_train,
            "compile_extract_s": compile_extract, "round_s": t_round, "img_per_s_per_client": per_client,
            "img_per_s_total": per_client * k, "extract_s": t_extract, "epoch_s": t_epoch,
            "extract_over_epoch": t_extract / t_epoch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=16)
    ap.add_argument("--proj-dim", type=int, default=64)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--rel-samples", type=int, default=256)
    ap.add_argument("--pool", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--archs", default="cnn_s,cnn_l")
    a = ap.parse_args()
    data = load_ssl_data("cifar10_jpeg", "data", n_pool=a.pool, n_public=0, n_val=0, n_test=10)
    images, mean, std = jnp.asarray(data.pool_x), jnp.asarray(data.mean), jnp.asarray(data.std)
    print(f"devices: {jax.devices()}; {a.clients} clients vmapped, {a.steps} steps x batch {a.batch}, "
          f"{a.image_size} px, d={a.proj_dim}, r={a.rank}, rel_samples={a.rel_samples}, shard {a.pool // a.clients} "
          "images (CIFAR-10 = vendored JPEG q75 copy)")
    for arch in a.archs.split(","):
        r = bench_arch(arch, a, images, mean, std)
        print(f"{arch}: {r['params']} params (enc+proj+pred); compile round {r['compile_train_s']:.1f} s, "
              f"extract {r['compile_extract_s']:.1f} s")
        print(f"  SSL training: {r['img_per_s_per_client']:.0f} images/s per client "
              f"({r['img_per_s_total']:.0f} total; round of {a.steps} steps {r['round_s']:.3f} s)")
        print(f"  relation extraction (all clients): {r['extract_s'] * 1e3:.1f} ms vs one local epoch "
              f"{r['epoch_s']:.2f} s -> {100 * r['extract_over_epoch']:.2f} % of an epoch")


if __name__ == "__main__":
    main()
