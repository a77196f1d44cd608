"""The gate contract: a closed vocabulary, one definition per role, the per-cell validity rule and the reference
definitions on hand-made curves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.repro.claims import parse_claims
from mlsys_repro.common.repro.errors import ClaimsSchemaError
from mlsys_repro.common.repro.gates import GATES, beats_prior, cell_valid, plateaued, reached, unknown_gates


def test_vocabulary_is_closed_and_every_name_has_one_of_four_definitions():
    assert {g.role for g in GATES.values()} == {"plateau", "learned", "reached", "acts"}
    for role in ("plateau", "learned", "reached", "acts"):
        defs = {g.definition.split(";")[0] for g in GATES.values() if g.role == role}
        assert len(defs) == 1, role  # names of one role share one definition (details after ';' name the prior)
    assert unknown_gates(["converged", "beats_trivial_on_test", "wins"]) == ["beats_trivial_on_test", "wins"]


def test_claims_schema_rejects_an_unknown_gate_with_a_suggestion():
    base = {"id": "c", "class": "check", "source": "notes", "experiment": "e", "metric": "m", "ours": "a",
            "baseline": "b", "kind": "ratio", "paper_value": 2.0}
    with pytest.raises(ClaimsSchemaError, match="did you mean 'converged'"):
        parse_claims([{**base, "requires": ["convergd"]}])
    with pytest.raises(ClaimsSchemaError, match="gate_fraction must be"):
        parse_claims([{**base, "requires": ["converged"], "gate_fraction": 1.5}])
    with pytest.raises(ClaimsSchemaError, match="gate_fraction without requires"):
        parse_claims([{**base, "gate_fraction": 0.5}])
    assert parse_claims([{**base, "requires": ["converged"], "gate_fraction": 0.6}])[0].gate_fraction == 0.6


@pytest.mark.parametrize("passed, fraction, valid", [
    ([1, 1, 1, 1, 0], 0.8, True),     # 4/5 = 80 %: valid
    ([1, 1, 1, 0, 0], 0.8, False),    # 3/5
    ([1, 1, 0], 0.8, False),          # 2/3
    ([1, 1, 0], 0.6, True),
    ([1] * 12 + [0] * 3, 0.8, True),  # 12/15
])
def test_cell_valid(passed, fraction, valid):
    assert cell_valid(passed, fraction) is valid


def test_cell_valid_refuses_empty_and_nan():
    with pytest.raises(ValueError, match="no gate rows"):
        cell_valid([])
    with pytest.raises(ValueError, match="finite"):
        cell_valid([1.0, float("nan")])


@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=40))
@settings(max_examples=100, deadline=None)
def test_cell_valid_is_the_pass_share(passed):
    assert cell_valid(passed) == (sum(passed) / len(passed) >= 0.8 - 1e-12)


def test_plateaued_on_hand_made_curves():
    falling = [10, 9, 8, 7, 6, 5, 4, 3]
    flat = [10, 6, 5, 5, 5.01, 5, 4.99, 5]
    assert not plateaued(falling, rel_tol=0.05) and plateaued(flat, rel_tol=0.05)
    assert plateaued([1, 2, 3, 3, 3, 3, 3, 3], rel_tol=0.01, better="higher")
    assert not plateaued([1, 2, 3, 4, 5, 6, 7, 8], rel_tol=0.01, better="higher")
    with pytest.raises(ValueError, match="too short"):
        plateaued([1.0], rel_tol=0.05)


def test_beats_prior_and_reached():
    assert beats_prior(0.9, 1.0, rel_margin=0.05) and not beats_prior(0.97, 1.0, rel_margin=0.05)
    assert beats_prior(0.6, 0.5, better="higher") and not beats_prior(0.5, 0.5, better="higher")
    assert reached([0.1, 0.5, 0.91], 0.9) and not reached([0.1, 0.5, 0.89], 0.9)
    assert reached([3.0, 1.0], 1.0, better="lower")
