"""Gradient Exchange Index: every contribution merged once, every aggregate applied once, retirement."""

from __future__ import annotations

import pytest

from mlsys_repro.papers.canary.gei import GEIError, GradientExchangeIndex


def _complete(g: GradientExchangeIndex, t: int, q: int) -> None:
    for s in range(g.num_workers):
        g.contribute(t, q, 0, 1 << s)
    g.finish(t, q, 0)


def test_merge_take_finish_apply_retire():
    g = GradientExchangeIndex(num_pieces=2, num_workers=3)
    g.contribute(0, 0, 1, 0b010)
    g.contribute(0, 0, 2, 0b100)
    moved = g.take(0, 0, 2)
    assert g.contribute(0, 0, 1, moved) == 0b110
    g.contribute(0, 0, 0, 0b001)
    g.contribute(0, 0, 0, g.take(0, 0, 1))
    g.finish(0, 0, 0)
    assert g.is_complete(0, 0) and not g.is_complete(0, 1)
    _complete(g, 0, 1)
    for w in range(3):
        assert not g.iteration_done(0, w)
        g.apply(0, 0, w)
        g.apply(0, 1, w)
        assert g.iteration_done(0, w)
    assert g.retire_finished() == [0] and g.lowest_open == 1 and g.iteration_done(-1, 0)
    assert g.state_counts["applied"] == 6


def test_double_merge_and_double_apply_raise():
    g = GradientExchangeIndex(1, 2)
    g.contribute(0, 0, 0, 0b01)
    with pytest.raises(GEIError, match="twice"):
        g.contribute(0, 0, 0, 0b01)
    with pytest.raises(GEIError, match="without sources"):
        g.finish(0, 0, 0)
    with pytest.raises(GEIError, match="before it is complete"):
        g.apply(0, 0, 1)
    g.contribute(0, 0, 0, 0b10)
    g.finish(0, 0, 0)
    with pytest.raises(GEIError, match="late contribution"):
        g.contribute(0, 0, 1, 0b01)
    g.apply(0, 0, 1)
    with pytest.raises(GEIError, match="twice"):
        g.apply(0, 0, 1)


def test_bad_indices_and_retire_order():
    g = GradientExchangeIndex(2, 2)
    with pytest.raises(GEIError, match="piece index"):
        g.contribute(0, 5, 0, 1)
    with pytest.raises(GEIError, match="holds no partial"):
        g.take(0, 0, 1)
    assert g.retire(1) is False  # iterations retire in order
    with pytest.raises(ValueError):
        GradientExchangeIndex(0, 3)
