"""Regenerate the reports from the stored results, without running anything: the reviewer's page
``results/index.html`` (:mod:`mlsys_repro.common.repro.site`), ``results/SUMMARY.md`` and each paper's ``claims.md`` /
``claims.csv``.

    python -m mlsys_repro.common.repro.report [PAPER ...] [--results-dir DIR] [--conf-dir DIR] [--profile P]

The page covers every paper with results under ``DIR`` (default ``results/``); the papers named (default: all) get
their claims.md / claims.csv rewritten. ``./reproduce.sh`` writes the same files after its runs. Prints the page's
path. Exit status: 0 on success, 2 on bad input (unknown paper, malformed claims file, unreadable CSV).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mlsys_repro.common.repro.errors import ClaimsSchemaError, ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlsys_repro.common.repro.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("papers", nargs="*", help="paper keys whose claims.md to rewrite (default: all)")
    ap.add_argument("--results-dir", type=Path, default=None, help="results folder (default: results/)")
    ap.add_argument("--conf-dir", type=Path, default=None, help="Hydra config tree (default: conf/)")
    ap.add_argument("--profile", default="default", help="profile whose runs freshness is judged against")
    args = ap.parse_args(argv)
    from mlsys_repro.common.repro.claims import check
    from mlsys_repro.common.repro.config import compose

    try:
        results_dir = Path(args.results_dir or compose([], conf_dir=args.conf_dir, schemas=()).paths.results_dir)
        verdicts = check(args.papers or None, results_dir, args.conf_dir, quiet=True, profile=args.profile)
    except (ClaimsSchemaError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(len(v) for v in verdicts.values())
    print(f"{n} claims of {len(verdicts)} papers -> {results_dir / 'index.html'} (and SUMMARY.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
