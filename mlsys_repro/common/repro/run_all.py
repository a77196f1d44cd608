"""Run every registered experiment of the chosen papers in one process, then check their claims.

    python -m mlsys_repro.common.repro.run_all [PAPER ...] [--profile smoke|default|full] [--list] [--status] [--force]
                                   [--only EXP[,EXP ...]] [--results-dir DIR] [-o KEY=VALUE ...]

Experiments are the files ``conf/experiment/<paper>/*.yaml``; each is composed with Hydra's compose API, run,
and written atomically to ``<results>/<paper>/<experiment>.csv`` with a manifest (config hash, code fingerprint,
commit, sha256 of the file, wall time: :mod:`mlsys_repro.common.repro.freshness`). Only the default profile writes to
``results/``; ``smoke`` and ``full`` write to ``runs/<profile>/`` unless ``--results-dir`` says otherwise. A fresh
result (same config, same code, intact file, clean tree) is kept, so an interrupted run resumes where it stopped;
``--force`` reruns anyway. ``--status`` prints one line per experiment and exits 1 unless all are fresh.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import os
import shutil
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from mlsys_repro.common.repro.cache import RunCache, release_compiled  # before every experiment: see its doc
from mlsys_repro.common.repro.config import RunSpec, build_context, compose, compose_run, experiments_of, papers_in_conf
from mlsys_repro.common.repro.errors import (
    ClaimsSchemaError,
    ConfigError,
    ResultSchemaError,
    RunLockedError,
    did_you_mean,
    exit_process,
    stop_interrupted,
)
from mlsys_repro.common.repro.freshness import code_fingerprint, write_manifest
from mlsys_repro.common.repro.progress import console_logging, fmt_seconds
from mlsys_repro.common.repro.results import git_sha, package_version, to_frame, with_provenance, write_csv
from mlsys_repro.common.repro.schema import work_root
from mlsys_repro.common.traces.errors import TraceFormatError


def enable_compile_cache(root: Path) -> None:
    """Persistent XLA compile cache under ``root/.jax_cache`` (unless JAX_COMPILATION_CACHE_DIR is set)."""
    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", str(root / ".jax_cache"))


# Errors whose message says all a user needs (which file, key or value): one line, no traceback unless --debug.
KNOWN_ERRORS = (ConfigError, ResultSchemaError, ClaimsSchemaError, TraceFormatError, RunLockedError,
                FileNotFoundError)


@contextlib.contextmanager
def result_lock(path: Path):
    """Hold ``<path>.lock`` while a run writes ``path``; a second concurrent writer fails with RunLockedError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise RunLockedError(f"{path} is being written by another run right now (pid {other}); wait for it or "
                                 "stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the lock file stays (removing it would race a waiting writer)


def run_experiment(spec: RunSpec, out_dir: Path | None = None, force: bool = False, log=print,
                   cache: RunCache | None = None) -> tuple[str, Path, float]:
    """Run the experiment of ``spec`` (with the run-scoped ``cache`` shared across this run's experiments);
    returns (status, csv path, seconds). status: ran | skipped."""
    ctx = build_context(spec, out_dir, cache)
    path = ctx.out_dir / f"{ctx.experiment}.csv"
    with result_lock(path):
        return _run_locked(spec, ctx, path, force, log)


def _run_locked(spec: RunSpec, ctx, path, force, log):
    from mlsys_repro.common.repro.status import spec_data, spec_status

    cfg, chash = spec.cfg, spec.config_hash
    code, n_files = code_fingerprint(cfg.paths.root, cfg.paper.module)
    if not force and spec_status(spec, path, ctx.profile).reusable:
        return "skipped", path, 0.0
    data_hash, data_files = spec_data(spec)
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
    wall = time.monotonic() - t0
    write_manifest(path, paper=ctx.paper, experiment=ctx.experiment, profile=ctx.profile, config_hash=chash,
                   code_hash=code, code_files=n_files, data_hash=data_hash, data_files=list(data_files),
                   git_sha=str(out["git_sha"].iloc[0]), package_version=package_version(),
                   jax_version=str(out["jax_version"].iloc[0]), seeds=[int(x) for x in ctx.seeds()],
                   policies=list(ctx.policies), wall_s=round(wall, 1),
                   figures=sorted(dict.fromkeys(f.name for f in ctx.figures)),
                   finished_utc=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if ctx.checkpoint_dir is not None:  # finished: its resumable state is no longer needed
        shutil.rmtree(ctx.checkpoint_dir, ignore_errors=True)
    return "ran", path, wall


def refuse_foreign_results(target: Path, profile: str, narrowed: str = "") -> None:
    """``results/`` (the checkout's, which the claims read) holds default-profile runs of whole experiments only:
    writing another profile, or a narrowed policy list, there is a ConfigError with a one-line reason. Any other
    folder takes anything."""

    if Path(target).resolve() != (Path(work_root()) / "results").resolve():
        return
    if profile != "default":
        raise ConfigError(f"results/ holds default-profile runs only (the claims read it); profile {profile!r} writes "
                          "to runs/ (or name another folder)")
    if narrowed:
        raise ConfigError(f"results/ holds whole experiments only (the claims read it); {narrowed} narrows the "
                          "policy list, so run it into runs/ (or name another folder)")


def verdict_totals(verdicts: dict, papers: Sequence[str], results_dir: Path) -> str:
    """The closing summary of a run's claims: counted verdicts of the papers run, and where the page is."""
    from mlsys_repro.common.repro.claims.report import counts
    from mlsys_repro.common.repro.claims.schema import COUNTED

    mine = [v for p in papers for v in verdicts.get(p, [])]
    total: dict[str, int] = {}
    for cls in COUNTED:
        for k, n in counts(mine, cls).items():
            total[k] = total.get(k, 0) + n
    shown = ", ".join(f"{k} {n}" for k, n in total.items() if n) or "none"
    return (f"== counted claims of {', '.join(papers)}: {shown}; the page: {Path(results_dir) / 'index.html'} "
            f"(per paper: {Path(results_dir) / '<paper>' / 'claims.md'})")


def default_results_dir(paths, profile: str) -> Path:
    """Where a profile writes by default: ``paths.results_dir`` for ``default``, ``paths.runs_dir/<profile>``
    otherwise (so a smoke or full run never overwrites the committed default results)."""
    return Path(paths.results_dir) if profile == "default" else Path(paths.runs_dir) / profile


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlsys_repro.common.repro.run_all",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("papers", nargs="*", help="paper keys (default: every paper in conf/paper)")
    ap.add_argument("--profile", default="default", choices=("smoke", "default", "full"))
    ap.add_argument("--list", action="store_true", help="list the registered experiments and exit")
    ap.add_argument("--status", action="store_true",
                    help="print fresh / stale / missing / incomplete per experiment; exit 1 unless all are fresh")
    ap.add_argument("--sweep-arg", action="store_true",
                    help="print 'experiment=<p>/<e>,...' for a Hydra multirun (e.g. a SLURM array) and exit")
    ap.add_argument("--force", action="store_true", help="rerun experiments whose results are fresh")
    ap.add_argument("--only", default=None,
                    help="comma-separated experiment names to run (default: all), e.g. --only headline,ablation")
    ap.add_argument("--results-dir", type=Path, default=None,
                    help="where results go (default: results/ for the default profile, runs/<profile>/ otherwise)")
    ap.add_argument("--conf-dir", type=Path, default=None)
    ap.add_argument("--no-claims", action="store_true", help="do not run the claims checker afterwards")
    ap.add_argument("-o", "--override", action="append", default=[], help="extra Hydra override, repeatable")
    ap.add_argument("--debug", action="store_true", help="print tracebacks of failures")
    # intermixed: paper names may come after options (`--only headline swallow` runs swallow's headline)
    args = ap.parse_intermixed_args(argv)
    console_logging()
    try:
        return _main(args)
    except KNOWN_ERRORS as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside an experiment (composing, checking claims): nothing half-written
        print("interrupted; finished experiments are saved. Run the same command again to resume (fresh results "
              "are skipped).", file=sys.stderr, flush=True)
        return 130


def _main(args) -> int:

    # paths only: no paper's schemas (listing, status and runs compose each paper's own)
    base = compose([o for o in args.override if o.startswith("paths.")], conf_dir=args.conf_dir, schemas=())
    known = papers_in_conf(base.paths.conf_dir)
    papers = args.papers or known
    bad = [p for p in papers if p not in known]
    if bad:
        print(f"error: {did_you_mean('paper', bad, known)}", file=sys.stderr)
        return 2
    every = [(p, e) for p in papers for e in experiments_of(p, base.paths.conf_dir)]
    only = None if args.only is None else [x.strip() for x in args.only.split(",") if x.strip()]
    if only is not None:
        names = sorted({e for _, e in every})
        unknown = [x for x in only if x not in names]
        if unknown or not only:
            print(f"error: {did_you_mean('experiment', unknown, names) if unknown else '--only names nothing'}",
                  file=sys.stderr)
            return 2
    plan = [(p, e) for p, e in every if only is None or e in only]

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
    results_dir = Path(args.results_dir) if args.results_dir else default_results_dir(base.paths, args.profile)
    if not args.status:
        narrowed = " ".join(o for o in (args.override or []) if o.split("=")[0].lstrip("+") == "policy")
        try:
            refuse_foreign_results(results_dir, args.profile, narrowed)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    if args.status:
        from mlsys_repro.common.repro.status import experiment_status

        not_fresh = 0
        for p, e in plan:
            f = experiment_status(p, e, results_dir, args.profile, args.override, args.conf_dir)
            not_fresh += not f.fresh
            print(f"{p + '/' + e:<40} {f.line()}", flush=True)
        print(f"== {len(plan) - not_fresh}/{len(plan)} fresh (profile {args.profile}, {results_dir})")
        return 1 if not_fresh else 0

    enable_compile_cache(Path(work_root()))
    if results_dir.resolve() == Path(base.paths.results_dir).resolve() and git_sha(str(root)).endswith("-dirty"):
        print("warning: the tree has uncommitted changes under mlsys_repro/, conf/ or data/: results written now are "
              "marked -dirty and show as stale until rerun on a clean commit", file=sys.stderr, flush=True)
    failures: list[str] = []
    crashed = False
    cache, cache_paper = RunCache(), None  # shared by a paper's experiments (tasks, compiled trainers, agents)
    t_all = time.monotonic()
    print(f"== {len(plan)} experiments, profile={args.profile}, results in {results_dir}", flush=True)
    for i, (paper, name) in enumerate(plan, 1):
        label = f"[{i}/{len(plan)}] {paper}/{name}"
        print(f"{label}: start (elapsed {fmt_seconds(time.monotonic() - t_all)})", flush=True)
        if paper != cache_paper:  # no paper reads another's entries: free the previous paper's
            cache, cache_paper = RunCache(), paper
        release_compiled()
        try:
            spec = compose_run([f"experiment={paper}/{name}", f"profile={args.profile}", *args.override],
                               conf_dir=args.conf_dir)
            status_, path, secs = run_experiment(spec, results_dir / paper, force=args.force, cache=cache)
        except KeyboardInterrupt:
            done = i - 1
            stop_interrupted(f"\n{label}: interrupted. {done}/{len(plan)} experiments finished and saved in "
                             f"{results_dir}; long trainings keep checkpoints under paths.checkpoint_dir. Run the same "
                             "command again to resume (fresh results are skipped).")
        except KNOWN_ERRORS as e:
            failures.append(f"{paper}/{name}: {e}")
            print(f"{label}: FAILED: {e}", flush=True)
            if args.debug:
                traceback.print_exc()
            continue
        except Exception as e:
            crashed = True
            failures.append(f"{paper}/{name}: crashed ({type(e).__name__}: {e})")
            print(f"{label}: CRASHED: {type(e).__name__}: {e}"
                  + ("" if args.debug else " (--debug prints the traceback)"), flush=True)
            if args.debug:
                traceback.print_exc()
            continue
        if status_ == "skipped":
            print(f"{label}: fresh, skipped ({path.name}; --force reruns)", flush=True)
        else:
            print(f"{label}: wrote {path} in {fmt_seconds(secs)}", flush=True)

    if not args.no_claims:
        from mlsys_repro.common.repro.claims import check

        print("== claims", flush=True)
        try:
            verdicts = check(papers, results_dir, args.conf_dir, profile=args.profile)
            print(verdict_totals(verdicts, papers, results_dir), flush=True)
            failures += [f"{v.paper}/{v.claim.id}: result file damaged: {v.damaged}"
                         for p in papers for v in verdicts.get(p, []) if v.damaged]
        except KNOWN_ERRORS as e:
            failures.append(f"claims: {e}")
        except Exception as e:
            crashed = True
            failures.append(f"claims checker crashed ({type(e).__name__}: {e})")
            if args.debug:
                traceback.print_exc()
    print(f"== done in {fmt_seconds(time.monotonic() - t_all)}; {len(failures)} failure(s)", flush=True)
    for f in failures:
        print(f"  FAILED {f}", flush=True)
    return (1 if crashed else 2) if failures else 0


if __name__ == "__main__":
    exit_process(main())
