"""Benchmark: 8-bit sketch throughput against a plain memory copy, and discrete-event iterations per wall-second.

    PYTHONPATH=$PWD python -m mlsys_repro.papers.canary.bench [--mb 64] [--piece 16384] [--repeats 5] [--iterations 20]

1. Sketch: ``quantize`` + ``dequantize`` of a float32 tensor of ``--mb`` MB (pieces of ``--piece`` elements),
   jitted, against a jitted copy (``x + 0`` into a fresh buffer) of the same tensor in the same run. GB/s counts
   the float32 input bytes once; the ratio sketch/copy is the figure of merit (goal >= 0.5).
2. DES: Canary (sketch; staleness 1 and synchronous, all three NICs of BCube(3,2)), BML and PS on 27 servers at
   10 Gbps, on the ``canary/tta_bcube27`` experiment's own cluster, compute model and layout (its proxy's pieces on
   its timing model's gradient): simulated iterations (every worker) per wall-second.

Timings through the shared harness (:mod:`mlsys_repro.common.repro.bench`: first call, then min/median of repeats,
load).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.quant import sketch
from mlsys_repro.common.repro.bench import bench_context, machine_line, time_it
from mlsys_repro.papers.canary.data import load_images_trace, model_layout
from mlsys_repro.papers.canary.experiments import compute_model, des_layout, net_spec
from mlsys_repro.papers.canary.protocols import ProtocolSpec, simulate


def bench_sketch(mb: float, piece: int, repeats: int) -> None:
    n = int(mb * 2**20 / 4)
    x = jax.random.normal(jax.random.key(0), (n,), jnp.float32)
    copy = jax.jit(lambda a: a + 0.0)
    rt = jax.jit(lambda a: sketch.dequantize(sketch.quantize(a, piece), n))
    q = jax.jit(lambda a: sketch.quantize(a, piece))
    gb = n * 4 / 1e9
    print(f"# sketch: {n} float32 ({mb:g} MB), pieces of {piece}")
    t_copy = time_it("memory copy", lambda: copy(x), repeats)
    for t in (t_copy, time_it("quantize", lambda: q(x), repeats),
              time_it("quantize+dequantize", lambda: rt(x), repeats)):
        print(f"{t.line()}; {gb / t.min_s:.2f} GB/s, {t_copy.min_s / t.min_s:.2f}x the copy")
    err = np.abs(np.asarray(rt(x)) - np.asarray(x))
    bound = np.asarray(sketch.error_bound(q(x), n))
    print(f"max |x - dequant(quant(x))| / bound = {float((err / bound).max()):.3f} (<= 1 required)")


def bench_des(iterations: int, repeats: int) -> None:
    ctx = bench_context("canary/tta_bcube27")
    hw, p = ctx.hardware, ctx.params
    data = load_images_trace(ctx.trace, ctx.data_dir, n_train=p.n_train or None, n_test=p.n_test)
    layout = des_layout(hw, model_layout(p.model, data, p.colayer_bytes, p.piece_elems))
    cm = compute_model(hw)
    ns = net_spec(hw, 10.0)
    print(f"# DES: BCube({ns.n},{ns.k}) = {ns.num_servers} servers, {layout.num_pieces} pieces/iteration, 10 Gbps, "
          f"{iterations} iterations")
    for name, spec in (("canary (stale 1)", ProtocolSpec("canary", sketch=True, staleness=1)),
                       ("canary (sync)", ProtocolSpec("canary", sketch=True)),
                       ("bml", ProtocolSpec("bml")), ("ps", ProtocolSpec("ps"))):
        t = time_it(name, lambda spec=spec: simulate(spec, ns, layout, cm, p.batch, iterations), repeats,
                    per=f"{iterations} iterations")
        s = simulate(spec, ns, layout, cm, p.batch, iterations)
        print(f"{t.line()}; {iterations / t.min_s:.1f} iterations/wall-s, {s.transfers_per_iteration:.0f} "
              "messages/iteration")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=64.0)
    ap.add_argument("--piece", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20)
    a = ap.parse_args(argv)
    print(machine_line())
    bench_sketch(a.mb, a.piece, a.repeats)
    bench_des(a.iterations, a.repeats)


if __name__ == "__main__":
    main()
