"""Hydra command-line entry point for one experiment: single runs, sweeps, and cluster arrays.

    python -m mlsys_repro.common.repro.main experiment=swallow/headline profile=smoke
    python -m mlsys_repro.common.repro.main -m experiment=swallow/headline policy=swallow/fvdf,swallow/sebf
    python -m mlsys_repro.common.repro.main -m $(python -m mlsys_repro.common.repro.run_all swallow --sweep-arg) \\
        profile=full output=results paths.results_dir=$PWD/runs/full hydra/launcher=slurm \\
        hydra.launcher.partition=gpu

By default results go to Hydra's run directory (``runs/...``, git-ignored). ``output=results`` writes
``results/<paper>/<experiment>.csv`` instead, skipping experiments whose stored config hash matches, exactly like
``./reproduce.sh`` does (the checkout's ``results/`` takes only the default profile and whole experiments: another
profile or ``policy=`` is refused there, so name another ``paths.results_dir``); run
``python -m mlsys_repro.common.repro.claims`` afterwards to refresh the verdicts. A multirun writes one flat folder
per job (``runs/multirun/<date>_<time>/<job number>/``); gather them into one table with
``python -m mlsys_repro.common.repro.collect RUNDIR``.

Like ``./reproduce.sh`` it uses the persistent XLA compile cache (``.jax_cache``, or JAX_COMPILATION_CACHE_DIR), and
it reports through Python ``logging``, so Hydra's job log (``<run dir>/main.log``) holds the progress lines.
``--cfg job`` prints the configuration that will run: the experiment node with the profile's block merged and the
command line's values on top (Hydra's own ``--cfg hydra`` / ``--cfg all`` are unchanged).

Exit codes as ``run_all``: a known error (config, trace format, missing data, a result file locked by another run)
prints one ``error: ...`` line and exits 2, as do Hydra's own config errors (unknown group option, bad override);
``--debug`` prints the traceback instead. Ctrl-C prints one line saying what is kept and exits 130.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from mlsys_repro.common.repro.config import (
    CONF_DIR,
    RunSpec,
    check_experiment_found,
    pin_explicit_overrides,
    register_paper_schemas,
    validate,
)
from mlsys_repro.common.repro.errors import ConfigError, exit_process, stop_interrupted
from mlsys_repro.common.repro.run_all import KNOWN_ERRORS, enable_compile_cache, refuse_foreign_results, run_experiment
from mlsys_repro.common.repro.schema import work_root

register_paper_schemas()
log = logging.getLogger("mlsys_repro.main")
_SHOW_JOB_CONFIG = False
_DEBUG = False


class KnownFailure(CompactHydraException):
    """A known error of one sweep job, re-raised so that Hydra prints its message without a traceback; ``cli`` turns
    the exit status Hydra gives it (1) into 2. Picklable (one string), so it comes back from joblib/submitit jobs."""


def effective_config(spec: RunSpec) -> DictConfig:
    """The config as it will run: ``experiment`` replaced by its profile-merged node (command-line values pinned)."""
    out = spec.cfg.copy()
    OmegaConf.set_readonly(out, False)
    with open_dict(out):
        out.experiment = spec.experiment.copy()
    OmegaConf.set_readonly(out.experiment, False)
    return out


def output_dir(cfg: DictConfig, run_dir: str) -> tuple[Path, bool]:
    """Where ``output=`` sends the result and whether to rerun a fresh one: ``runs`` -> Hydra's run dir (always
    rerun), ``results`` -> ``paths.results_dir/<paper>`` (skip if fresh; the checkout's ``results/`` takes the default
    profile and whole experiments only). Anything else is a ConfigError."""
    if cfg.output == "results":
        narrowed = f"policy={cfg.policy.name}" if cfg.get("policy") is not None else ""
        refuse_foreign_results(Path(cfg.paths.results_dir), str(cfg.profile.name), narrowed)
        return Path(cfg.paths.results_dir) / cfg.experiment.paper, False
    if cfg.output == "runs":
        return Path(run_dir), True
    raise ConfigError(f"output must be 'runs' or 'results', got {cfg.output!r}")


def interrupted_line(label: str, out: Path, checkpoint_dir: str | None) -> str:
    """The one line printed on Ctrl-C: what was (not) saved and how to resume."""
    kept = (f"checkpoints of long trainings are kept under {checkpoint_dir}, so " if checkpoint_dir else "")
    return (f"{label}: interrupted; no result was written to {out} (results are written whole, at the end); "
            f"{kept}run the same command again to resume.")


def _take_flag(argv: list[str], flag: str) -> tuple[list[str], bool]:
    """Remove every ``flag`` from ``argv``; say whether it was there."""
    return [a for a in argv if a != flag], flag in argv


def _take_cfg_job(argv: list[str]) -> tuple[list[str], bool]:
    """Remove ``--cfg job`` / ``-c job`` (either spelling) from ``argv``; say whether it was there."""
    out, found, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        if a in ("--cfg", "-c") and i + 1 < len(argv) and argv[i + 1] == "job":
            found, i = True, i + 2
            continue
        if a in ("--cfg=job", "-c=job"):
            found, i = True, i + 1
            continue
        out.append(a)
        i += 1
    return out, found


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> str:
    """Hydra's task: one experiment. A known error (unless ``--debug``) prints one line and exits 2; in a sweep it
    is logged and becomes a :class:`KnownFailure`, so the other jobs still run and Hydra reports it at the end."""
    try:
        return _task(cfg)
    except KNOWN_ERRORS as e:
        if _DEBUG:
            raise
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            log.error(f"error: {e}")
            raise KnownFailure(f"error: {e}") from None
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None  # not an Exception: Hydra lets it through without its own report


def _task(cfg: DictConfig) -> str:
    hc = HydraConfig.get()
    check_experiment_found(cfg, hc.runtime.choices.get("experiment"))
    pin_explicit_overrides(cfg, list(hc.overrides.task))
    spec = validate(cfg)
    if spec.experiment is None:
        raise ConfigError("no experiment selected: pass experiment=<paper>/<name> (see ./reproduce.sh --list)")
    exp = spec.experiment
    if _SHOW_JOB_CONFIG:
        print(OmegaConf.to_yaml(effective_config(spec), resolve=False), end="")
        return ""
    out, force = output_dir(cfg, hc.runtime.output_dir)
    enable_compile_cache(Path(work_root()))
    label = f"{exp.paper}/{exp.name}"
    try:
        status, path, secs = run_experiment(spec, out, force=force, log=log.info)
    except KeyboardInterrupt:
        stop_interrupted(interrupted_line(label, out, cfg.paths.get("checkpoint_dir")))
    log.info(f"{label}: {status} -> {path} ({secs:.1f}s)")
    return str(path)


def cli(argv: Sequence[str]) -> int:
    """Run Hydra's ``main`` on ``argv`` (after taking out ``--cfg job`` and ``--debug``); return the exit status:
    0 ok, 1 a crash, 2 a known or Hydra config error, 130 interrupted."""
    global _SHOW_JOB_CONFIG, _DEBUG
    argv, _SHOW_JOB_CONFIG = _take_cfg_job(list(argv))
    argv, _DEBUG = _take_flag(argv, "--debug")
    if _DEBUG:
        os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing a trimmed trace
    sys.argv[1:] = argv
    try:
        main()
    except SystemExit as e:
        # Hydra prints a config or known error's message and exits 1; the error it handled is the exit's context.
        if e.code == 1 and isinstance(e.__context__, CompactHydraException):
            return 2
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:  # before the job started (imports, composition)
        print("interrupted outside the experiment; results are written whole, so nothing is half-written. Run the "
              "same command again to resume.", file=sys.stderr, flush=True)
        return 130
    except (*KNOWN_ERRORS, CompactHydraException):  # only with --debug (HYDRA_FULL_ERROR): traceback, then 2
        traceback.print_exc()
        return 2
    return 0


if __name__ == "__main__":
    exit_process(cli(sys.argv[1:]))
