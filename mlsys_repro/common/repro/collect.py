"""Gather a Hydra multirun into one long-format table, and check the paper's claims on it where that is meaningful.

    python -m mlsys_repro.common.repro.collect RUNDIR [--out FILE.csv] [--no-claims]

``RUNDIR`` is a multirun folder (``runs/multirun/<date>_<time>``). Every job folder under it that holds
``.hydra/overrides.yaml`` contributes the rows of its result CSVs (the long format of
:mod:`mlsys_repro.common.repro.results`), with two columns added: ``job`` (the folder's name) and ``overrides`` (the
job's command-line overrides, joined by spaces), plus one ``override.<key>`` column per swept key (its value in that
job). The table goes to ``RUNDIR/collected.csv``.

Claims: rows are also written per experiment to ``RUNDIR/collected/<paper>/<experiment>.csv`` and the paper's
``claims.yaml`` is checked against that folder (verdicts in ``RUNDIR/collected/<paper>/verdicts.csv``), but only
when the jobs are disjoint: no two jobs wrote a row with the same (experiment, policy, metric, seed, condition).
A sweep over a setting (e.g. a bandwidth) writes the same keys once per point; pooling those would mix
conditions, so the check is skipped with a message and the table is left for the reader.

Exit status: 0 on success, 2 when RUNDIR holds no job folder or a CSV cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from mlsys_repro.common.repro.errors import ClaimsSchemaError
from mlsys_repro.common.repro.schema import repo_root

# Columns of the long format that are not a condition of the measurement (provenance and the value itself).
_NOT_KEYS = {"value", "unit", "git_sha", "config_hash", "jax_version", "backend", "created_utc", "profile",
             "job", "overrides"}
_SKIP_FILES = {"claims.csv", "verdicts.csv", "collected.csv"}


class CollectError(ValueError):
    """RUNDIR is not a multirun folder, or one of its CSVs cannot be read."""


def job_dirs(rundir: Path) -> list[Path]:
    """Job folders under ``rundir`` (any depth), in job-number order where the names are numbers."""
    dirs = sorted({p.parent.parent for p in Path(rundir).rglob(".hydra/overrides.yaml")})

    def key(d: Path):
        rel = d.relative_to(rundir).as_posix()
        head = rel.split("_", 1)[0]
        return (0, int(head), rel) if head.isdigit() else (1, 0, rel)

    return sorted(dirs, key=key)


def _overrides(job: Path) -> list[str]:
    data = yaml.safe_load((job / ".hydra/overrides.yaml").read_text()) or []
    return [str(x) for x in data]


def collect(rundir: Path) -> pd.DataFrame:
    """One long-format frame of every job's result rows, with ``job``, ``overrides`` and ``override.<key>``."""
    rundir = Path(rundir)
    jobs = job_dirs(rundir)
    if not jobs:
        raise CollectError(f"{rundir}: no Hydra job folder (no */.hydra/overrides.yaml) under it")
    frames = []
    for job in jobs:
        ovs = _overrides(job)
        for csv in sorted(job.glob("*.csv")):
            if csv.name in _SKIP_FILES:
                continue
            try:
                df = pd.read_csv(csv)
            except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
                raise CollectError(f"{csv}: cannot read as CSV ({type(e).__name__}: {e})") from None
            if not {"paper", "experiment", "policy", "metric", "value"} <= set(df.columns):
                continue  # not a result table (e.g. a side file an experiment wrote)
            df.insert(0, "overrides", " ".join(ovs))
            df.insert(0, "job", job.relative_to(rundir).as_posix())
            for ov in ovs:
                k, _, v = ov.partition("=")
                df[f"override.{k.lstrip('+~')}"] = v
            frames.append(df)
    if not frames:
        raise CollectError(f"{rundir}: {len(jobs)} job folder(s) but no result CSV in any of them")
    return pd.concat(frames, ignore_index=True, sort=False)


def duplicated_keys(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose measurement key (every column but provenance, value and override.*) occurs in two jobs."""
    keys = [c for c in df.columns if c not in _NOT_KEYS and not c.startswith("override.")]
    per_job = df.drop_duplicates(subset=[*keys, "job"])
    return per_job[per_job.duplicated(subset=keys, keep=False)]


def claims_file(rundir: Path, paper: str) -> Path | None:
    """The claims.yaml of ``paper``: beside the package its jobs ran (``paper.module`` in a job's config)."""
    import importlib.util

    for cfg in sorted(Path(rundir).rglob(".hydra/config.yaml")):
        data = yaml.safe_load(cfg.read_text()) or {}
        node = data.get("paper") or {}
        if node.get("key") == paper and node.get("module"):
            try:
                spec = importlib.util.find_spec(str(node["module"]))
            except (ImportError, ValueError):
                spec = None
            if spec and spec.origin and (Path(spec.origin).parent / "claims.yaml").is_file():
                return Path(spec.origin).parent / "claims.yaml"
    p = Path(repo_root()) / "mlsys_repro" / "papers" / paper / "claims.yaml"
    return p if p.is_file() else None


def check_claims(df: pd.DataFrame, out_dir: Path, rundir: Path) -> dict[str, pd.DataFrame]:
    """Write per-experiment CSVs under ``out_dir/<paper>/`` and check each paper's claims on them."""
    from mlsys_repro.common.repro.claims import check_file, verdict_frame

    out: dict[str, pd.DataFrame] = {}
    for paper, rows in df.groupby("paper", sort=True):
        d = Path(out_dir) / str(paper)
        d.mkdir(parents=True, exist_ok=True)
        for exp, sub in rows.groupby("experiment", sort=True):
            sub.drop(columns=[c for c in sub.columns if c.startswith("override.")] + ["job", "overrides"]).to_csv(
                d / f"{exp}.csv", index=False)
        claims = claims_file(rundir, str(paper))
        if claims is None:
            continue
        _, verdicts = check_file(claims, d)
        ran = set(rows["experiment"].astype(str))
        frame = verdict_frame([v for v in verdicts if v.claim.experiment in ran])
        frame.to_csv(d / "verdicts.csv", index=False)
        out[str(paper)] = frame
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlsys_repro.common.repro.collect",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("rundir", type=Path, help="a multirun folder, e.g. runs/multirun/2026-12-03_21-40-00")
    ap.add_argument("--out", type=Path, default=None, help="where the table goes (default RUNDIR/collected.csv)")
    ap.add_argument("--no-claims", action="store_true", help="only gather the table")
    a = ap.parse_args(argv)
    try:
        df = collect(a.rundir)
    except (CollectError, ClaimsSchemaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = a.out or a.rundir / "collected.csv"
    df.to_csv(out, index=False)
    print(f"{df['job'].nunique()} jobs, {len(df)} rows -> {out}")
    if a.no_claims:
        return 0
    dup = duplicated_keys(df)
    if len(dup):
        jobs = sorted(dup["job"].unique())
        print(f"claims not checked: jobs {', '.join(jobs[:6])}{' ...' if len(jobs) > 6 else ''} wrote the same "
              "(experiment, policy, metric, seed) rows, so the sweep varies a setting, not the compared policies; "
              "pooling them would mix conditions. Compare the points in the table (override.* columns).")
        return 0
    try:
        verdicts = check_claims(df, a.rundir / "collected", a.rundir)
    except ClaimsSchemaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for paper, frame in verdicts.items():
        for _, r in frame.iterrows():
            print(f"  {paper}/{r['claim']}: {r['verdict']}")
    if not verdicts:
        print("no claims file for the collected papers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
