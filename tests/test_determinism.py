"""The same seed gives the same results table on the same platform: small experiments run twice, compared exactly.

(tests/test_resume.py also compares two separate processes, one of them killed and resumed.)
"""

from __future__ import annotations

import pandas as pd
import pytest

from mlsys_repro.common.repro.config import compose_run
from mlsys_repro.common.repro.run_all import run_experiment

# (paper, experiment, overrides): one small stochastic experiment per paper that trains or samples
CASES = [
    ("greenplace", "pareto", []),  # the whole smoke profile: test_configs skips its smoke run
    ("petrel", "headline", ["policy=petrel/casp"]),
]


@pytest.mark.parametrize("paper, exp, overrides", [pytest.param(*c, marks=pytest.mark.xdist_group(c[0]),
                                                               id=f"{c[0]}/{c[1]}") for c in CASES])
def test_same_seed_same_table(paper, exp, overrides, tmp_path):
    frames = []
    for run in ("a", "b"):
        spec = compose_run([f"experiment={paper}/{exp}", "profile=smoke", f"paths.checkpoint_dir={tmp_path / 'ck'}",
                            *overrides])
        status, path, _ = run_experiment(spec, tmp_path / run, force=True, log=lambda *a: None)
        assert status == "ran"
        frames.append(pd.read_csv(path))
    a, b = frames
    cols = [c for c in a.columns if c not in ("git_sha", "jax_version")]
    assert len(a) > 0
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)
