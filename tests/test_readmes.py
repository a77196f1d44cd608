"""Every paper README follows the template (issue #51): a first screen with the claims and the generated verdict
table, then the regime, how each number is produced, results, limits, files, how to run and tests, in that order;
it describes the present (no section named after an issue) and runs modules through the venv or ``mlsys-repro``."""

from __future__ import annotations

import re

import pytest

from mlsys_repro.common.repro.config import papers_in_conf
from tests.conftest import ROOT

SECTIONS = ("## Claims and verdicts", "## Regime", "## How each number is produced", "## Results", "## Limits",
            "## Files", "## How to run", "## Tests")
FIRST_SCREEN = 60  # lines: the verdict table starts within them


def template_problems(text: str) -> list[str]:
    """What keeps ``text`` (a paper README) from the template; empty when it follows it."""
    lines = text.splitlines()
    heads = [(i, ln) for i, ln in enumerate(lines) if ln.startswith("## ")]
    problems = []
    at = [next((i for i, h in heads if h.startswith(s)), None) for s in SECTIONS]
    problems += [f"no section {s!r}" for s, i in zip(SECTIONS, at, strict=True) if i is None]
    found = [i for i in at if i is not None]
    if found != sorted(found):
        problems.append(f"sections out of order (want {', '.join(SECTIONS)})")
    begin = next((i for i, ln in enumerate(lines) if ln.startswith("<!-- verdicts:begin")), None)
    if begin is None or begin >= FIRST_SCREEN:
        problems.append(f"the generated verdict table does not start in the first {FIRST_SCREEN} lines")
    elif at[0] is not None and at[1] is not None and not at[0] < begin < at[1]:
        problems.append("the verdict table is not in 'Claims and verdicts'")
    problems += [f"history heading: {h!r}" for _, h in heads if re.search(r"issue #\d+|before #\d+", h, re.I)]
    if "PYTHONPATH=$PWD" in text:
        problems.append("runs modules with PYTHONPATH=$PWD (use .venv/bin/python or mlsys-repro)")
    return problems


def test_template_checker_on_hand_made_readmes():
    good = "\n".join(["# p: t", "", *SECTIONS[:1], "<!-- verdicts:begin -->", "<!-- verdicts:end -->",
                      *SECTIONS[1:]])
    assert template_problems(good) == []
    swapped = good.replace("## Limits", "## X").replace("## Results", "## Limits").replace("## X", "## Results")
    assert "sections out of order" in " ".join(template_problems(swapped))
    late = good.replace("<!-- verdicts:begin -->", "\n" * FIRST_SCREEN + "<!-- verdicts:begin -->")
    assert any("first 60 lines" in p for p in template_problems(late))
    assert "no section '## Limits'" in template_problems(good.replace("## Limits\n", ""))
    hist = good + "\n## Issue #23: the new regime\nPYTHONPATH=$PWD python -m x"
    assert len(template_problems(hist)) == 2


# READMEs whose numbers wait for a regeneration (their ⟨TBD⟩ placeholders): none
PENDING: set[str] = set()


@pytest.mark.parametrize("paper", [p for p in papers_in_conf() if p not in PENDING])
def test_paper_readme_follows_the_template(paper):
    assert template_problems((ROOT / "mlsys_repro" / "papers" / paper / "README.md").read_text()) == []
