"""Claims checker: paper claims (``mlsys_repro/papers/<key>/claims.yaml``) against measured long-format result CSVs.

``check`` writes ``results/<paper>/claims.md`` + ``claims.csv``, ``results/SUMMARY.md`` and the reviewer's page
``results/index.html`` (:mod:`mlsys_repro.common.repro.site`).

Three parts: :mod:`.schema` (the claims file format), :mod:`.evaluate` (effects, CIs and the verdict rules) and
:mod:`.report` (claims.md / claims.csv / SUMMARY.md). Command line::

    python -m mlsys_repro.common.repro.claims [PAPER ...] [--results-dir DIR]  # recheck papers, rewrite their reports
    python -m mlsys_repro.common.repro.claims --claims FILE.yaml --csv-dir DIR --out VERDICTS.csv
        # any claims file against any folder of <experiment>.csv files; needs nothing else of the repository

Exit status: 0 on success, 2 on bad input (unknown paper, malformed claims file, unreadable CSV) or a damaged result
file (NaN values, a missing column, seeds on one side only: the reports show those claims INCONCLUSIVE "result file
damaged", and the command names them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mlsys_repro.common.repro.claims.evaluate import VERDICTS, Verdict, classify, evaluate, evaluate_all
from mlsys_repro.common.repro.claims.report import (
    paper_markdown,
    run_args,
    summary_markdown,
    verdict_frame,
    write_paper_report,
    write_summary,
)
from mlsys_repro.common.repro.claims.schema import CLASSES, DEFAULT_TOLERANCE, KINDS, Claim, load_claims, parse_claims
from mlsys_repro.common.repro.errors import ClaimsSchemaError, ConfigError, did_you_mean
from mlsys_repro.common.repro.stats import mean_ci

__all__ = [
    "CLASSES", "DEFAULT_TOLERANCE", "KINDS", "VERDICTS", "Claim", "Verdict", "check", "check_file", "check_paper",
    "classify", "evaluate", "evaluate_all", "load_claims", "main", "mean_ci", "paper_markdown", "parse_claims",
    "summary_markdown", "verdict_frame",
]


def read_frames(csv_dir: Path, experiments: Sequence[str]) -> dict[str, pd.DataFrame | None]:
    """``{experiment: rows}`` from ``<csv_dir>/<experiment>.csv`` (``None`` where the file is absent)."""
    out: dict[str, pd.DataFrame | None] = {}
    for e in dict.fromkeys(experiments):
        p = Path(csv_dir) / f"{e}.csv"
        if not p.exists():
            out[e] = None
            continue
        try:
            out[e] = pd.read_csv(p)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise ClaimsSchemaError(f"{p}: cannot read as CSV ({type(err).__name__}: {err})") from None
    return out


def check_file(claims_path: Path, csv_dir: Path) -> tuple[str, list[Verdict]]:
    """Evaluate a claims file against the CSVs of one folder: ``(paper, verdicts)``."""
    paper, claims = load_claims(claims_path)
    return paper, evaluate_all(claims, read_frames(csv_dir, [c.experiment for c in claims]), paper)


def check_paper(paper: str, claims_path: Path, results_dir: Path) -> list[Verdict]:
    """Verdicts of one paper's claims against ``<results_dir>/<paper>/*.csv``."""
    _, claims = load_claims(claims_path)
    return evaluate_all(claims, read_frames(Path(results_dir) / paper, [c.experiment for c in claims]), paper)


def check(papers: Sequence[str] | None = None, results_dir: Path | None = None, conf_dir: Path | None = None,
          quiet: bool = False, profile: str = "default") -> dict[str, list[Verdict]]:
    """Check the claims of ``papers`` (default: every paper), write their claims.md/csv, and the summary and page of
    the papers checked plus every other paper with results in ``results_dir``. Freshness is judged against
    ``profile``'s runs.

    Only the papers asked for are imported (their schemas, package and experiments, to compose their runs): another
    paper with results in ``results_dir`` is shown on the summary and the page from its claims file and result files
    alone (the verdicts are the same; its freshness is judged without its code: see
    :func:`mlsys_repro.common.repro.status.recorded_status`), and its claims.md / claims.csv are left as they are."""
    from mlsys_repro.common.repro.config import compose, papers_in_conf
    from mlsys_repro.common.repro.status import paper_status, recorded_status

    cfg = compose([], conf_dir=conf_dir, schemas=())  # paths only: no paper's schemas
    results_dir = Path(results_dir or cfg.paths.results_dir)
    available = papers_in_conf(cfg.paths.conf_dir)
    wanted = list(papers) if papers else ([p for p in available if (results_dir / p).is_dir()] or available)
    unknown = [p for p in wanted if p not in available]
    if unknown:
        raise ConfigError(did_you_mean("paper", unknown, available))
    everything: dict[str, list[Verdict]] = {}
    fresh: dict[str, dict[str, str]] = {}
    titles: dict[str, str] = {}
    broken: list[str] = []
    args = run_args(profile, results_dir, Path(cfg.paths.results_dir))  # in every regenerate command of the reports
    # the papers asked for and those with results in this folder: a folder with one paper's results gets a summary
    # of that paper, not SKIPPED rows for the others (and checking it composes no other paper)
    scope = [p for p in available if p in wanted or (results_dir / p).is_dir()]
    for paper in scope:
        asked = paper in wanted
        pcfg = compose([f"paper={paper}"], conf_dir=conf_dir, schemas=None if asked else ()).paper
        path = package_dir(pcfg.module, load=asked) / pcfg.claims
        if not path.exists():
            continue
        try:
            everything[paper] = check_paper(paper, path, results_dir)
        except ClaimsSchemaError as e:  # one malformed claims file must not stop the other papers' verdicts
            broken.append(f"{paper}: {e}")
            continue
        titles[paper] = str(pcfg.title)
        states = (paper_status(paper, results_dir, profile, conf_dir) if asked
                  else recorded_status(paper, results_dir, cfg.paths.root, pcfg.module, profile, conf_dir))
        fresh[paper] = {e: f.line() for e, f in states.items()}
        for v in everything[paper]:
            st = states.get(v.claim.experiment)
            if st is not None and st.state == "incomplete" and v.verdict != "SKIPPED":
                _mark_damaged(v, st.line())
        if asked:
            write_paper_report(paper, pcfg.title, everything[paper], results_dir, fresh[paper], args)
            if not quiet:
                for v in everything[paper]:
                    print(f"  {paper}/{v.claim.id} [{v.claim.cls}]: {v.shown}  {v.measured()}  {v.note}")
    write_summary(everything, results_dir, fresh)
    from mlsys_repro.common.repro.site import write_site

    write_site(results_dir, everything, fresh, titles, args=args)
    if broken:
        raise ClaimsSchemaError("malformed claims files (the other papers were checked):\n  " + "\n  ".join(broken))
    return everything


def package_dir(module: str, load: bool = True) -> Path:
    """The folder of the package ``module`` (a paper's: its claims file lives there); ``load=False`` finds it without
    running the package (its parents are imported: ``mlsys_repro.papers``, no paper)."""
    import importlib
    import importlib.util

    if load:
        return Path(importlib.import_module(module).__file__).parent
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)
    return Path(spec.origin).parent


def _mark_damaged(v: Verdict, why: str) -> None:
    """A verdict read from a result file that is incomplete (truncated, edited, NaN, stitched) is not counted."""
    v.ungated = v.ungated or v.verdict
    v.verdict, v.damaged = "INCONCLUSIVE", why
    v.note = f"result file damaged ({why}); {v.note}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlsys_repro.common.repro.claims", description=__doc__.split("\n\n")[0])
    ap.add_argument("papers", nargs="*", help="paper keys (default: all)")
    ap.add_argument("--results-dir", type=Path, default=None, help="results folder (default: results/)")
    ap.add_argument("--profile", default="default", help="profile whose runs freshness is judged against")
    ap.add_argument("--claims", type=Path, default=None, help="a claims file to check on its own (with --csv-dir)")
    ap.add_argument("--csv-dir", type=Path, default=None, help="folder of <experiment>.csv for --claims")
    ap.add_argument("--out", type=Path, default=None, help="write the verdict table (CSV) here (with --claims)")
    ap.add_argument("--sync-readmes", action="store_true",
                    help="rewrite the verdict table of each paper's README from its committed claims.csv")
    args = ap.parse_args(argv)
    if args.sync_readmes:
        return sync_readmes(args.papers or None, args.results_dir)
    try:
        if args.claims is not None or args.csv_dir is not None:
            if args.claims is None or args.csv_dir is None or args.papers:
                ap.error("--claims and --csv-dir go together, without paper names")
            paper, verdicts = check_file(args.claims, args.csv_dir)
            frame = verdict_frame(verdicts)[["claim", "verdict", "ungated", "mean", "lo", "hi", "n", "note"]]
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                frame.to_csv(args.out, index=False)
            else:
                frame.to_csv(sys.stdout, index=False)
            return _damaged_exit(verdicts)
        everything = check(args.papers or None, args.results_dir, profile=args.profile)
    except (ClaimsSchemaError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return _damaged_exit([v for vs in everything.values() for v in vs])


def sync_readmes(papers: Sequence[str] | None = None, results_dir: Path | None = None) -> int:
    """Rewrite the generated verdict table of each paper's README (a checkout's ``mlsys_repro/papers/<p>/README.md``)
    from ``<results_dir>/<p>/claims.csv``."""
    from mlsys_repro.common.repro.claims.report import sync_readme
    from mlsys_repro.common.repro.schema import repo_root

    root = Path(repo_root())
    results_dir = Path(results_dir or root / "results")
    for readme in sorted((root / "mlsys_repro" / "papers").glob("*/README.md")):
        paper = readme.parent.name
        csv = results_dir / paper / "claims.csv"
        if (papers and paper not in papers) or not csv.exists():
            continue
        if sync_readme(readme, csv):
            print(f"updated {readme.relative_to(root)}")
    return 0


def _damaged_exit(verdicts: Sequence[Verdict]) -> int:
    """2 (with one line per claim) when a result file behind a verdict is damaged, else 0."""
    bad = [v for v in verdicts if v.damaged]
    for v in bad:
        print(f"error: {v.paper}/{v.claim.id}: result file damaged: {v.damaged}", file=sys.stderr)
    return 2 if bad else 0
