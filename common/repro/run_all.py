"""Run every registered experiment of the chosen papers in one process, then check their claims.

    python -m common.repro.run_all [PAPER ...] [--profile smoke|default|full] [--list] [--force]
                                   [--only EXP ...] [-o KEY=VALUE ...]

Experiments are the files ``conf/experiment/<paper>/*.yaml``; each is composed with Hydra's compose API, run,
and written atomically to ``results/<paper>/<experiment>.csv``. A result whose ``config_hash`` matches the
composed config is kept (so an interrupted run resumes where it stopped); ``--force`` reruns anyway, and is
needed after code changes that the config does not show.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from common.repro import registry
from common.repro.config import build_context, compose, experiments_of, papers_in_conf
from common.repro.errors import ConfigError, ResultSchemaError
from common.repro.progress import fmt_seconds
from common.repro.results import is_up_to_date, to_frame, with_provenance, write_csv


def enable_compile_cache(root: Path) -> None:
    """Persistent XLA compile cache under ``.jax_cache`` (unless JAX_COMPILATION_CACHE_DIR is set)."""
    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", str(root / ".jax_cache"))


def run_experiment(cfg: DictConfig, out_dir: Path | None = None, force: bool = False,
                   log=print) -> tuple[str, Path, float]:
    """Run the experiment selected in ``cfg``; returns (status, csv path, seconds). status: ran | skipped."""
    ctx, chash = build_context(cfg, out_dir)
    path = ctx.out_dir / f"{ctx.experiment}.csv"
    if not force and is_up_to_date(path, chash):
        return "skipped", path, 0.0
    spec = registry.lookup(ctx.paper, ctx.experiment)
    t0 = time.monotonic()
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    rows = spec.fn(ctx)
    trace = getattr(ctx.trace, "name", None) or "none"
    hardware = getattr(ctx.hardware, "name", None) or "none"
    try:
        frame = to_frame(rows, trace=trace, hardware=hardware)
    except ResultSchemaError as e:
        raise ResultSchemaError(f"{ctx.paper}/{ctx.experiment}: {e}") from None
    unknown = sorted(set(frame["policy"]) - set(ctx.policies) - {"-"})
    if ctx.policies and unknown and not getattr(spec.fn, "extra_policies_ok", False):
        log(f"  note: rows for policies not in the experiment's list: {unknown}")
    out = with_provenance(frame, paper=ctx.paper, experiment=ctx.experiment, profile=ctx.profile,
                          root=cfg.paths.root, chash=chash)
    write_csv(out, path)
    if ctx.checkpoint_dir is not None:  # finished: its resumable state is no longer needed
        shutil.rmtree(ctx.checkpoint_dir, ignore_errors=True)
    return "ran", path, time.monotonic() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m common.repro.run_all", description=__doc__.split("\n\n")[0])
    ap.add_argument("papers", nargs="*", help="paper keys (default: every paper in conf/paper)")
    ap.add_argument("--profile", default="default", choices=("smoke", "default", "full"))
    ap.add_argument("--list", action="store_true", help="list the registered experiments and exit")
    ap.add_argument("--sweep-arg", action="store_true",
                    help="print 'experiment=<p>/<e>,...' for a Hydra multirun (e.g. a SLURM array) and exit")
    ap.add_argument("--force", action="store_true", help="rerun experiments whose results are up to date")
    ap.add_argument("--only", nargs="*", default=None, help="experiment names to run (default: all)")
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument("--conf-dir", type=Path, default=None)
    ap.add_argument("--no-claims", action="store_true", help="do not run the claims checker afterwards")
    ap.add_argument("-o", "--override", action="append", default=[], help="extra Hydra override, repeatable")
    args = ap.parse_args(argv)

    base = compose([], conf_dir=args.conf_dir)
    known = papers_in_conf(base.paths.conf_dir)
    papers = args.papers or known
    bad = [p for p in papers if p not in known]
    if bad:
        print(f"unknown paper(s) {bad}; known: {known}", file=sys.stderr)
        return 2
    plan = [(p, e) for p in papers for e in experiments_of(p, base.paths.conf_dir)
            if args.only is None or e in args.only]

    if args.sweep_arg:
        print("experiment=" + ",".join(f"{p}/{e}" for p, e in plan))
        return 0

    if args.list:
        for p, e in plan:
            cfg = compose([f"experiment={p}/{e}", f"profile={args.profile}"], conf_dir=args.conf_dir)
            exp = cfg.experiment
            pol = ", ".join(exp.policies) if exp.policies else "-"
            print(f"{p}/{e:<28} {exp.title}  [policies: {pol}]")
        return 0

    root = Path(base.paths.root)
    enable_compile_cache(root)
    results_dir = Path(args.results_dir or base.paths.results_dir)
    failures: list[str] = []
    t_all = time.monotonic()
    print(f"== {len(plan)} experiments, profile={args.profile}, results in {results_dir}", flush=True)
    for i, (paper, name) in enumerate(plan, 1):
        label = f"[{i}/{len(plan)}] {paper}/{name}"
        print(f"{label}: start (elapsed {fmt_seconds(time.monotonic() - t_all)})", flush=True)
        try:
            cfg = compose([f"experiment={paper}/{name}", f"profile={args.profile}", *args.override],
                          conf_dir=args.conf_dir)
            status, path, secs = run_experiment(cfg, results_dir / paper, force=args.force)
        except (ConfigError, ResultSchemaError) as e:
            failures.append(f"{paper}/{name}: {e}")
            print(f"{label}: FAILED: {e}", flush=True)
            continue
        except Exception:
            failures.append(f"{paper}/{name}: crashed")
            print(f"{label}: CRASHED", flush=True)
            traceback.print_exc()
            continue
        if status == "skipped":
            print(f"{label}: up to date, skipped ({path.name}; --force reruns)", flush=True)
        else:
            print(f"{label}: wrote {path} in {fmt_seconds(secs)}", flush=True)

    if not args.no_claims:
        from common.repro.claims import check

        print("== claims", flush=True)
        try:
            check(papers, results_dir, args.conf_dir)
        except Exception:
            failures.append("claims checker crashed")
            traceback.print_exc()
    print(f"== done in {fmt_seconds(time.monotonic() - t_all)}; {len(failures)} failure(s)", flush=True)
    for f in failures:
        print(f"  FAILED {f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
