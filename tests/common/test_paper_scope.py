"""Checking or reporting one paper touches only that paper (#51): the claims step and ``--status`` for swallow, on a
copy of the committed results (every paper's result files present), import no other paper's modules (schemas
included), and the summary still shows the other papers as a full check does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT

PAPER = "swallow"
# the papers whose modules the process imported, printed as the command's last line
_IMPORTED = ("print(sorted({m.split('.')[2] for m in sys.modules if m.startswith('mlsys_repro.papers.')}))")


def _run(call: str, tmp_path) -> tuple[subprocess.CompletedProcess, object]:
    res = tmp_path / "results"
    shutil.copytree(ROOT / "results", res, ignore=shutil.ignore_patterns("*.png", "*.lock"))
    code = f"import sys; {call.format(res=str(res))}; print('rc', rc); {_IMPORTED}"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)})
    return out, res


def test_checking_one_papers_claims_imports_no_other_paper(tmp_path):
    out, res = _run("from mlsys_repro.common.repro.claims import main; "
                    f"rc = main(['{PAPER}', '--results-dir', {{res!r}}])", tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "rc 0", out.stdout[-3000:] + out.stderr[-3000:]
    assert lines[-1] == f"[{PAPER!r}]", f"other papers' modules imported: {lines[-1]}"
    # the other papers are still on the summary, as a full check writes it (from their claims files and CSVs)
    others = sorted(p.name for p in (ROOT / "results").iterdir() if (p / "claims.csv").exists() and p.name != PAPER)
    summary = (res / "SUMMARY.md").read_text()
    assert others and all(f"\n| {p} | " in summary for p in others)  # the per-paper counts
    assert summary == (ROOT / "results" / "SUMMARY.md").read_text(), \
        "a one-paper check must write the SUMMARY a full check writes (see tests/test_committed_results.py)"


def test_status_of_one_paper_imports_no_other_paper(tmp_path):
    out, _ = _run("from mlsys_repro.common.repro.run_all import main; "
                  f"rc = main(['{PAPER}', '--status', '--results-dir', {{res!r}}])", tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2] in ("rc 0", "rc 1"), out.stdout[-3000:] + out.stderr[-3000:]  # 1: something not fresh
    assert all(ln.startswith(f"{PAPER}/") for ln in lines[:-3]), lines[:-3]
    assert lines[-1] == f"[{PAPER!r}]", f"other papers' modules imported: {lines[-1]}"
