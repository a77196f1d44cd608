"""Benchmark: training-step and epoch time on Bitbrains (all 402 VMs) for EvoGWP and DCRNN in JAX, against a
straightforward PyTorch CPU implementation of the same DCGRU encoder-decoder, measured in the same run.

    PYTHONPATH=$PWD python -m mlsys_repro.papers.evogwp.bench [--batch 8] [--hidden 32] [--repeats 5] [--days 10]

Prints one line per measurement (median wall seconds per training step over ``--repeats`` steps after a warm-up,
process CPU seconds per step, and the epoch time = steps per epoch x median step time, where an epoch is one pass
over every 12 -> 12 training window of the 402-VM training split at stride 1). Torch is a dev-only dependency
(``pip install .[bench]``); without it the PyTorch rows are skipped.

What is timed is one optimiser step exactly as the training loop runs it: sample a batch of windows, forward
with scheduled sampling, masked MAE, backward, gradient clipping, Adam. The PyTorch reference has the same
model (inputs, DCGRU cells with dual-random-walk diffusion of K = 2 steps, decoder with the same auxiliary
inputs and a linear projection) written the obvious way with dense ``torch.matmul`` supports.

    PYTHONPATH=$PWD python -m mlsys_repro.papers.evogwp.bench --score [--checkpoint PATH] [--days 29] [--stride 1]
                                                         [--precision both]

times the scoring command's work instead: ``score(model, first --days days of Bitbrains, stride 1)`` on all
402 VMs (every origin of the month: about 8,000 windows), end to end (evolution graph, forecasts, metrics,
compilation included: what a user of ``python -m mlsys_repro.papers.evogwp.score`` waits), once per
``--precision`` of the diffusion products (float32, bfloat16 or both); then, on a sample of the same windows,
the per-window path (``make_predict``: supports recomputed and multiplied per window) against the per-segment
path the command uses (``make_segment_predict``) in each precision, and how far bfloat16's forecasts and month
MAE are from float32's. Goal: a month within 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.traces.workload import load_workload_matrix
from mlsys_repro.papers.evogwp.arrays import build_arrays
from mlsys_repro.papers.evogwp.data import Scaler, chrono_split, origins, prepare, with_prefix
from mlsys_repro.papers.evogwp.forecasters import builder, fit_evo_inputs, static_graph
from mlsys_repro.papers.evogwp.schemas import TrainParams, parse_hparams
from mlsys_repro.papers.evogwp.train import init_params, make_step

ROOT = Path(__file__).resolve().parents[3]
BITBRAINS = ROOT / "data/workload_traces/bitbrains_rnd/cpu_util_pct.csv.gz"
P = Q = 12


def _time(fn, repeats: int) -> tuple[float, float]:
    """Median wall seconds and mean process-CPU seconds of ``fn()`` over ``repeats`` calls (after one warm-up)."""
    fn()
    walls, c0 = [], time.process_time()
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
    return statistics.median(walls), (time.process_time() - c0) / repeats


def jax_step(kind: str, hp: dict, series, scaler, train_end: int, batch: int, extra: dict, evo=None):
    h = parse_hparams(kind, hp)
    build = builder(
        kind,
        h,
        num_nodes=series.num_entities,
        input_len=P,
        horizon=Q,
        num_shapelets=evo.shapelets.v.shape[0] if evo else 0,
    )
    ctx = evo.context if evo else None
    cfg = TrainParams(steps=1000, batch_size=batch, eval_every=1000)
    tx, _, step = make_step(build, P, Q, cfg, ctx)
    arrays = {k: jnp.asarray(v) for k, v in build_arrays(series, scaler, **extra).items()}
    tr = origins(0, train_end, P, Q, 1, ctx.min_origin() if ctx else 0)
    params = init_params(build, jax.random.key(0))
    state = {"carry": (params, tx.init(params), jax.random.key(1)), "i": 0}
    fn = jax.jit(step)
    tr_j, n_j = jnp.asarray(tr), jnp.int32(tr.size)

    def one():
        carry, loss = fn(state["carry"], state["i"], arrays, tr_j, n_j)
        loss.block_until_ready()
        state["carry"], state["i"] = carry, state["i"] + 1

    t0 = time.perf_counter()
    one()
    compile_s = time.perf_counter() - t0
    return one, compile_s


def torch_dcrnn_step(series, scaler, static_adj: np.ndarray, train_end: int, batch: int, hidden: int):
    """The same DCRNN step in plain PyTorch (dense supports, eager)."""
    import torch

    torch.manual_seed(0)
    n = series.num_entities

    def rw(a):
        d = a.sum(1, keepdim=True)
        return torch.where(d > 0, a / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(a))

    a = torch.tensor(static_adj)
    sup = [rw(a), rw(a.T)]

    class DConv(torch.nn.Module):
        def __init__(self, i, o, bias):
            super().__init__()
            self.lin = torch.nn.Linear(i * 5, o)
            torch.nn.init.constant_(self.lin.bias, bias)

        def forward(self, x):  # x [B, N, F]
            terms = [x]
            for s in sup:
                xk = x
                for _ in range(2):
                    xk = torch.matmul(s, xk)
                    terms.append(xk)
            return self.lin(torch.cat(terms, -1))

    class Cell(torch.nn.Module):
        def __init__(self, i):
            super().__init__()
            self.g, self.c = DConv(i + hidden, 2 * hidden, 1.0), DConv(i + hidden, hidden, 0.0)

        def forward(self, x, h):
            r, u = torch.sigmoid(self.g(torch.cat([x, h], -1))).chunk(2, -1)
            c = torch.tanh(self.c(torch.cat([x, r * h], -1)))
            return u * h + (1 - u) * c

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec, self.proj = Cell(4), Cell(3), torch.nn.Linear(hidden, 1)

        def forward(self, f, aux, tgt, tp):
            b = f.shape[0]
            h = torch.zeros(b, n, hidden)
            for t in range(P):
                h = self.enc(f[:, t], h)
            prev, outs = torch.zeros(b, n, 1), []
            for t in range(Q):
                h = self.dec(torch.cat([prev, aux[:, t]], -1), h)
                out = self.proj(h)
                outs.append(out)
                coin = (torch.rand(b, 1, 1) < tp).float()
                prev = coin * tgt[:, t] + (1 - coin) * out
            return torch.stack(outs, 1)

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, eps=1e-8)
    x = torch.tensor(scaler.transform(series.filled), dtype=torch.float32)
    y = torch.tensor(np.where(series.observed, series.raw, 0.0), dtype=torch.float32)
    nz = torch.tensor(series.observed & (series.raw != 0), dtype=torch.float32)
    tod = torch.tensor((np.arange(series.num_steps) % series.period) / series.period, dtype=torch.float32)
    tr = origins(0, train_end, P, Q)
    rng = np.random.default_rng(0)

    def one():
        o = torch.tensor(rng.choice(tr, batch))
        ii = o[:, None] + torch.arange(-P, 0)[None]
        oo = o[:, None] + torch.arange(Q)[None]
        xs, ys, yz, m = x[ii], x[oo], y[oo], nz[oo]
        last = xs[:, -1]
        ang = 2 * np.pi * tod
        tin = torch.stack([torch.sin(ang[ii]), torch.cos(ang[ii])], -1)[:, :, None].expand(-1, -1, n, -1)
        tout = torch.stack([torch.sin(ang[oo]), torch.cos(ang[oo])], -1)[:, :, None].expand(-1, -1, n, -1)
        f = torch.cat([xs[..., None], (xs - last[:, None])[..., None], tin], -1)
        delta = net(f, tout, (ys - last[:, None])[..., None], 0.5)[..., 0]
        pred = (last[:, None] + delta) * scaler.std + scaler.mean
        loss = ((pred - yz).abs() * m).sum() / m.sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    return one


def score_month(
    checkpoint: Path, days: int, stride: int = 1, sample: int = 384, precisions: tuple[str, ...] = ("float32",)
) -> None:
    """Print the wall time of scoring ``days`` days of Bitbrains at ``stride`` in each of ``precisions`` (see
    the module docstring), and how far the reduced-precision forecasts are from float32's."""
    import pandas as pd

    from mlsys_repro.papers.evogwp.inference import _history_series, load
    from mlsys_repro.papers.evogwp.score import score
    from mlsys_repro.papers.evogwp.train import make_predict, segment_grid

    wm = load_workload_matrix(BITBRAINS)
    t = days * 288
    new = replace(wm, time=wm.time[:t], values=wm.values[:t])
    print(
        f"# score: {checkpoint} on Bitbrains {t} steps x {len(wm.entities)} VMs, stride {stride}; "
        f"jax {jax.__version__}; cores {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    f = load(checkpoint)
    maes = {}
    for precision in precisions:
        t0 = time.perf_counter()
        rep = score(f, new, None, stride=stride, precision=precision)
        wall = time.perf_counter() - t0
        maes[precision] = rep["metrics"][f.name]["mae"]
        print(
            f"score {rep['precision']:<9} {wall:7.1f} s for {rep['windows']} windows x {rep['entities_scored']} "
            f"entities, compile included ({1e3 * wall / rep['windows']:.1f} ms/window; goal <= 120 s); "
            f"{f.name} MAE {maes[precision]:.6f}, last value {rep['metrics']['last_value']['mae']:.6f}; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    if f.context is None:
        return
    frame = pd.DataFrame(new.values, columns=list(new.entities))
    frame.insert(0, "time", new.time)
    s = _history_series(f, frame)
    arrays = build_arrays(s, f.scaler, pad=f.horizon, **f.evo.arrays(f.scaler.transform(s.filled), s.phase0))
    arrays = {k: jnp.asarray(v) for k, v in arrays.items()}
    o = np.arange(f.min_origin(), f.min_origin() + sample)
    per_window = jax.jit(make_predict(f.build, f.input_len, f.horizon, f.context))
    grid = jnp.asarray(segment_grid(o, f.context.seg_len)[0])
    runs = [("per-window float32", per_window, jnp.asarray(o))]
    runs += [(f"per-segment {p}", f.segment_predict_fn(p), grid) for p in precisions]
    outs = {}
    for name, fn, arg in runs:
        wall, _ = _time(lambda fn=fn, arg=arg: jax.block_until_ready(fn(f.params, arrays, arg)), 2)
        outs[name] = np.asarray(fn(f.params, arrays, arg)).reshape(-1, f.horizon, s.num_entities)
        print(f"forecast {name:<22} {1e3 * wall / sample:6.1f} ms/window wall ({sample} windows)", flush=True)
    if "float32" in maes and "bfloat16" in maes:
        ref, low = outs["per-segment float32"], outs["per-segment bfloat16"]
        print(
            f"bfloat16 vs float32: month MAE {maes['bfloat16']:.6f} vs {maes['float32']:.6f} "
            f"(relative difference {abs(maes['bfloat16'] / maes['float32'] - 1):.2e}); forecasts of the "
            f"{sample} sampled windows differ by {np.abs(low - ref).mean():.2e} on average, "
            f"{np.abs(low - ref).max():.2e} at most (%, forecasts average {np.abs(ref).mean():.2f})",
            flush=True,
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--days", type=int, default=None, help="days of Bitbrains used (default 10; --score: 29)")
    ap.add_argument("--score", action="store_true", help="time the scoring command instead of training steps")
    ap.add_argument("--stride", type=int, default=1, help="--score: score every stride-th window")
    ap.add_argument(
        "--precision",
        choices=["float32", "bfloat16", "both"],
        default="both",
        help="--score: the diffusion products' precision(s) timed",
    )
    ap.add_argument(
        "--checkpoint", type=Path, default=ROOT / "results/evogwp/checkpoints/table_short_bitbrains_evogwp.npz"
    )
    args = ap.parse_args(argv)
    if args.score:
        precisions = ("float32", "bfloat16") if args.precision == "both" else (args.precision,)
        score_month(args.checkpoint, args.days or 29, args.stride, precisions=precisions)
        return 0
    args.days = args.days or 10

    wm = load_workload_matrix(BITBRAINS)
    full = prepare(wm, name="bitbrains")  # all 402 VMs
    split = chrono_split(full.num_steps)
    epoch_steps = origins(0, split.train_end, P, Q).size / args.batch
    s = with_prefix(full, args.days * full.period)
    train_end = int(0.7 * s.num_steps)
    sc = Scaler.fit(s.raw[:train_end], s.observed[:train_end])
    adj = static_graph(s.filled[:train_end], 0.1)
    print(
        f"# Bitbrains {s.num_entities} VMs, batch {args.batch}, hidden {args.hidden}, 1 layer, K=2, 12 -> 12; "
        f"epoch = {epoch_steps:.0f} steps ({split.train_end} training steps at stride 1); "
        f"jax {jax.__version__}; cores {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = []
    hp_d = {"hidden": args.hidden, "num_layers": 1}
    fn, comp = jax_step("dcrnn", hp_d, s, sc, train_end, args.batch, {"static_adj": adj})
    rows.append(("jax dcrnn", *_time(fn, args.repeats), comp))
    hp_e = {"hidden": args.hidden, "num_layers": 1, "shapelet_steps": 50, "shapelet_samples": 384}
    evo = fit_evo_inputs(sc.transform(s.filled), s.period, train_end, parse_hparams("evogwp", hp_e))
    fn, comp = jax_step("evogwp", hp_e, s, sc, train_end, args.batch, evo.arrays(sc.transform(s.filled)), evo)
    rows.append(("jax evogwp", *_time(fn, args.repeats), comp))
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        fn = torch_dcrnn_step(s, sc, adj, train_end, args.batch, args.hidden)
        rows.append((f"torch {torch.__version__} dcrnn (same DCGRU)", *_time(fn, args.repeats), 0.0))
    except ImportError:
        print("# torch not installed: pip install .[bench] for the PyTorch reference", flush=True)
    for name, wall, cpu, comp in rows:
        print(
            f"{name:<34} step {wall * 1e3:8.1f} ms wall ({cpu * 1e3:8.1f} ms CPU)  "
            f"epoch {wall * epoch_steps / 60:6.1f} min  compile {comp:5.1f} s",
            flush=True,
        )
    ref = [r for r in rows if r[0].startswith("torch")]
    if ref:
        for name, wall, *_ in rows[:2]:
            print(f"{name} / torch dcrnn step time: {wall / ref[0][1]:.2f}x (goal <= 0.5x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
