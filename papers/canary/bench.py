"""Benchmark: 8-bit sketch throughput against a plain memory copy, and discrete-event iterations per wall-second.

    PYTHONPATH=$PWD python -m papers.canary.bench [--mb 64] [--piece 16384] [--repeats 5] [--iterations 20]

1. Sketch: ``quantize`` + ``dequantize`` of a float32 tensor of ``--mb`` MB (pieces of ``--piece`` elements),
   jitted, against a jitted copy (``x + 0`` into a fresh buffer) of the same tensor in the same run. GB/s counts
   the float32 input bytes once; the ratio sketch/copy is the figure of merit (goal >= 0.5).
2. DES: Canary (sketch; staleness 1 and synchronous, all three NICs of BCube(3,2)), BML and PS on 27 servers,
   MNIST MLP layout, 10 Gbps: simulated iterations (every worker) per wall-second.

Prints wall and process-CPU seconds and the load average (the machine is shared). Compilation is excluded.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from common.quant import sketch
from common.sim.netsim import gbps_to_bytes_per_s
from papers.canary.data import SHAPES, layout_for_shape
from papers.canary.protocols import NetSpec, ProtocolSpec, simulate
from papers.canary.workload import ComputeModel


def _best(fn, repeats: int) -> tuple[float, float]:
    """Best wall and its CPU seconds over ``repeats`` calls of ``fn`` (already compiled)."""
    best = (float("inf"), 0.0)
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        best = min(best, (w, c))
    return best


def bench_sketch(mb: float, piece: int, repeats: int) -> None:
    n = int(mb * 2**20 / 4)
    x = jax.random.normal(jax.random.key(0), (n,), jnp.float32)
    copy = jax.jit(lambda a: a + 0.0)
    rt = jax.jit(lambda a: sketch.dequantize(sketch.quantize(a, piece), n))
    q = jax.jit(lambda a: sketch.quantize(a, piece))
    for f in (copy, rt, q):
        jax.block_until_ready(f(x))
    gb = n * 4 / 1e9
    print(f"# sketch: {n} float32 ({mb:g} MB), pieces of {piece}; cpus={os.cpu_count()}")
    print(f"{'kernel':22s} {'wall_s':>8s} {'cpu_s':>8s} {'GB/s':>8s} {'vs copy':>8s}")
    w_copy, c_copy = _best(lambda: jax.block_until_ready(copy(x)), repeats)
    for name, f in (("memory copy", copy), ("quantize", q), ("quantize+dequantize", rt)):
        w, c = (w_copy, c_copy) if f is copy else _best(lambda f=f: jax.block_until_ready(f(x)), repeats)
        print(f"{name:22s} {w:8.4f} {c:8.4f} {gb / w:8.2f} {w_copy / w:8.2f}")
    err = np.abs(np.asarray(rt(x)) - np.asarray(x))
    bound = np.asarray(sketch.error_bound(q(x), n))
    print(f"max |x - dequant(quant(x))| / bound = {float((err / bound).max()):.3f} (<= 1 required)")


def bench_des(iterations: int) -> None:
    layout = layout_for_shape("mlp", SHAPES["mnist"], 65536, 16384)
    cm = ComputeModel(4e12, 20e-6, 1e-3, 2.0)
    ns = NetSpec(3, 2, gbps_to_bytes_per_s(10.0), 5e-6, 16)
    print(f"# DES: BCube(3,2) = {ns.num_servers} servers, {layout.num_pieces} pieces/iteration, 10 Gbps, "
          f"{iterations} iterations")
    print(f"{'protocol':18s} {'wall_s':>8s} {'cpu_s':>8s} {'iter/wall-s':>12s} {'messages/it':>14s}")
    for name, spec in (("canary (stale 1)", ProtocolSpec("canary", sketch=True, staleness=1)),
                       ("canary (sync)", ProtocolSpec("canary", sketch=True)),
                       ("bml", ProtocolSpec("bml")), ("ps", ProtocolSpec("ps"))):
        simulate(spec, ns, layout, cm, 32, 2)  # warm up imports and caches
        w0, c0 = time.perf_counter(), time.process_time()
        s = simulate(spec, ns, layout, cm, 32, iterations)
        w, c = time.perf_counter() - w0, time.process_time() - c0
        print(f"{name:18s} {w:8.3f} {c:8.3f} {iterations / w:12.1f} {s.transfers_per_iteration:14.0f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=64.0)
    ap.add_argument("--piece", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20)
    a = ap.parse_args(argv)
    bench_sketch(a.mb, a.piece, a.repeats)
    bench_des(a.iterations)
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
