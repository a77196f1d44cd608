"""Benchmark of the jit-compiled coflow simulator on the full FB2010 trace (prints figures; no assertions).

Figures: one SEBF configuration (first call with compilation, then the compiled run), a sweep of ``--configs``
configurations (bandwidth x CPU series, SEBF and FVDF alternating) through :func:`sim.simulate_many` (one
configuration per core, as the experiments run them) and, with ``--vmapped``, the same sweep as one ``vmap``-ed
batch; events per second. Goals from issue #26: a batch of k costs at most k single runs; a 64-configuration sweep
at most 10x one configuration. ``--parity`` times the seven coflowsim schedulers instead. The flow table is the
``swallow/headline`` experiment's own (its trace and clock conventions), through the shared harness
(:mod:`mlsys_repro.common.repro.bench`).

Run:
``PYTHONPATH=$PWD python -m mlsys_repro.papers.swallow.bench [--configs 64] [--max-coflows N] [--vmapped] [--parity]``.
"""

from __future__ import annotations

import argparse

import numpy as np

from mlsys_repro.common.repro.bench import bench_context, machine_line, time_it
from mlsys_repro.papers.swallow import sim
from mlsys_repro.papers.swallow.data import coflowsim_reference, flow_table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=64)
    ap.add_argument("--max-coflows", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--vmapped", action="store_true", help="also time the sweep as one vmapped batch")
    ap.add_argument("--parity", action="store_true",
                    help="time coflowsim's seven schedulers on the trace instead (per program, compile included)")
    a = ap.parse_args(argv)
    ctx = bench_context("swallow/headline")
    ft = flow_table(ctx, a.max_coflows)
    gbit = ctx.hardware.clock.gbit
    print(machine_line())
    print(f"trace: {ft.num_coflows} coflows, {ft.num_flows} flows, {ft.num_ports} ports")
    if a.parity:
        return parity(ft, gbit, a.repeats, ctx.data_dir)
    P = ft.num_ports
    st = sim.Static(kind="madd")
    one = sim.params(gbit, policy="sebf", num_ports=P)
    events = sim.simulate_many(ft, [(st, one)], batch_below=0)[0].events
    t_one = time_it("one full-trace SEBF run", lambda: sim.simulate_many(ft, [(st, one)], batch_below=0),
                    a.repeats, per="run")
    print(f"{t_one.line()}; {events} events, {events / t_one.min_s:,.0f} events/s")

    rng = np.random.default_rng(0)
    bws = np.geomspace(0.1, 10.0, 8)
    ps = []
    for i in range(a.configs):
        free = rng.uniform(0.2, 1.0, (sim.CPU_SAMPLES, P))
        pol = "sebf" if i % 2 == 0 else "fvdf"
        kw = dict(compress="swallow", ratio=0.48, speed_Bps=400e6, cores=1.0) if pol == "fvdf" else {}
        ps.append(sim.params(bws[i % len(bws)] * gbit, policy=pol, num_ports=P, cpu_free=free, **kw))
    t_k = time_it(f"{a.configs}-config sweep, one configuration per core",
                  lambda: sim.simulate_many(ft, [(st, p) for p in ps], batch_below=0), a.repeats, per="sweep")
    print(f"{t_k.line()} = {t_k.min_s / t_one.min_s:.1f}x one SEBF run (goal <= 10x for 64)")
    if a.vmapped:
        t_v = time_it(f"the same {a.configs} configurations as one vmapped batch",
                      lambda: sim.run_batch(ft, st, sim.stack_params(ps)), a.repeats, per="batch")
        print(f"{t_v.line()} = {t_v.min_s / t_one.min_s:.1f}x one SEBF run")


def parity(ft, gbit: float, repeats: int, data_dir) -> None:
    """The coflowsim_parity experiment's seven simulations, as the experiment runs them (one configuration per
    core, :func:`sim.simulate_many`), then each scheduler alone on one core; then how many coflows finish in the same
    quantum as in coflowsim's own runs (upstream, and with consistent receiver bookkeeping: all of them)."""
    P = ft.num_ports
    names = ["fifo", "scf", "ncf", "lcf", "sebf", "aalo", "fair"]
    kind = {"aalo": "dark", "fair": "fair"}
    jobs = [(sim.Static(kind=kind.get(n, "madd")), sim.params(gbit, policy="sebf" if n in kind else n, num_ports=P))
            for n in names]
    print(time_it("seven schedulers, one per core (goal <= 180 s with compilation)",
                  lambda: sim.simulate_many(ft, jobs), repeats).line())
    for n, job in zip(names, jobs, strict=True):
        print(time_it(f"{n} alone", lambda job=job: sim.simulate_many(ft, [job]), repeats).line())
    for book in ("upstream", "consistent"):
        ref = coflowsim_reference(data_dir, ft, book)
        if not ref:
            print(f"no coflowsim {book} run on record for {ft.num_coflows} coflows")
            continue
        same = [f"{n} {int(np.sum(r.finish_ms == ref[n]))}/{ft.num_coflows}"
                for n, r in zip(names, sim.simulate_many(ft, jobs), strict=True) if n in ref]
        print(f"same finish quantum as coflowsim ({book} bookkeeping): " + ", ".join(same))


if __name__ == "__main__":
    main()
