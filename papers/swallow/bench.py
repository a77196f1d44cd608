"""Benchmark of the jit-compiled coflow simulator on the full FB2010 trace (prints figures; no assertions).

Figures: compile + first run of one SEBF configuration, one full-trace SEBF simulation after compilation, a sweep of
``--configs`` configurations (bandwidth x CPU series, SEBF and FVDF alternating) through
:func:`sim.simulate_many` (one configuration per core, as the experiments run them) and, with ``--vmapped``, the
same sweep as one ``vmap``-ed batch for comparison; events per second. Goals from issue #26: a batch of k costs at
most k single runs; a 64-configuration sweep at most 10x one configuration. ``--parity`` times the seven
coflowsim schedulers instead.

Run: ``PYTHONPATH=$PWD python -m papers.swallow.bench [--configs 64] [--max-coflows N] [--vmapped] [--parity]``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from common.traces import load_coflow_trace
from papers.swallow import sim
from papers.swallow.workload import Conventions, build_flow_table

GBIT = 2.0**30


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=64)
    ap.add_argument("--max-coflows", type=int, default=None)
    ap.add_argument("--vmapped", action="store_true", help="also time the sweep as one vmapped batch")
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "data"))
    ap.add_argument("--parity", action="store_true",
                    help="time coflowsim's seven schedulers on the trace instead (per program, compile included)")
    a = ap.parse_args(argv)
    if a.parity:
        return parity(a)
    ft = build_flow_table(load_coflow_trace(Path(a.data) / "coflow/FB2010-1Hr-150-0.txt.gz"), Conventions(),
                          a.max_coflows)
    P = ft.num_ports
    print(f"trace: {ft.num_coflows} coflows, {ft.num_flows} flows, {P} ports; cpus={os.cpu_count()}, "
          f"loadavg={os.getloadavg()[0]:.1f}")
    st = sim.Static(kind="madd")
    one = sim.params(GBIT, policy="sebf", num_ports=P)
    (r,), t_first = _timed(lambda: sim.simulate_many(ft, [(st, one)], batch_below=0))
    (r,), t_one = _timed(lambda: sim.simulate_many(ft, [(st, one)], batch_below=0))
    print(f"compile + first SEBF run: {t_first:.2f} s")
    print(f"one full-trace SEBF run (compiled): {t_one:.2f} s, {r.events} events, {r.events / t_one:,.0f} events/s")

    rng = np.random.default_rng(0)
    bws = np.geomspace(0.1, 10.0, 8)
    ps = []
    for i in range(a.configs):
        free = rng.uniform(0.2, 1.0, (sim.CPU_SAMPLES, P))
        pol = "sebf" if i % 2 == 0 else "fvdf"
        kw = dict(compress="swallow", ratio=0.48, speed_Bps=400e6, cores=1.0) if pol == "fvdf" else {}
        ps.append(sim.params(bws[i % len(bws)] * GBIT, policy=pol, num_ports=P, cpu_free=free, **kw))
    res, t_k = _timed(lambda: sim.simulate_many(ft, [(st, p) for p in ps], batch_below=0))
    ev = sum(r.events for r in res)
    print(f"{a.configs}-config sweep, one configuration per core (compile included): {t_k:.2f} s = "
          f"{t_k / t_one:.1f}x one SEBF run (goal <= 10x for 64), {ev} events, {ev / t_k:,.0f} events/s")
    if a.vmapped:
        (_, _), t_v = _timed(lambda: sim.run_batch(ft, st, sim.stack_params(ps)))
        print(f"the same {a.configs} configurations as one vmapped batch (compile included): {t_v:.2f} s = "
              f"{t_v / t_one:.1f}x one SEBF run")


def parity(a) -> None:
    """The coflowsim_parity experiment's seven simulations, as the experiment runs them (one configuration per
    core, :func:`sim.simulate_many`), then each scheduler alone on one core (per-scheduler figures, compile
    included in the first figure of each program: run it twice to see both)."""
    ft = build_flow_table(load_coflow_trace(Path(a.data) / "coflow/FB2010-1Hr-150-0.txt.gz"), Conventions(),
                          a.max_coflows)
    P = ft.num_ports
    print(f"trace: {ft.num_coflows} coflows, {ft.num_flows} flows; cpus={os.cpu_count()}, "
          f"loadavg={os.getloadavg()[0]:.1f}")
    names = ["fifo", "scf", "ncf", "lcf", "sebf", "aalo", "fair"]
    kind = {"aalo": "dark", "fair": "fair"}
    jobs = [(sim.Static(kind=kind.get(n, "madd")), sim.params(GBIT, policy="sebf" if n in kind else n, num_ports=P))
            for n in names]
    res, t = _timed(lambda: sim.simulate_many(ft, jobs))
    avg = ", ".join(f"{n} {np.mean(r.cct_ms) / 1024:.3f} s" for n, r in zip(names, res, strict=True))
    print(f"seven schedulers, one per core: {t:.1f} s wall in total, compile included (goal <= 180 s); avg CCT {avg}")
    for n, job in zip(names, jobs, strict=True):
        (r,), t = _timed(lambda job=job: sim.simulate_many(ft, [job]))
        print(f"{n:5s} alone: {t:6.1f} s wall ({r.events} events, {r.events / t:,.0f} events/s)")


if __name__ == "__main__":
    main()
