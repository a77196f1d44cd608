"""Layer profile, compute model and the colayer/piece layout: known answers and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.models.small import make_model, pure
from mlsys_repro.papers.canary.compute_model import ComputeModel, Layer, make_layout, profile_layers
from mlsys_repro.papers.canary.data import layout_for_shape
from mlsys_repro.papers.canary.protocols import payload_bytes, sketch_bytes


def test_mlp_and_lenet_flops_known_answers():
    apply, p = pure(make_model("mlp", (28, 28, 1), 10))
    layers = profile_layers(apply, p, (28, 28, 1))
    assert [(l.name, l.size, l.fwd_flops) for l in layers] == [
        ("l1", 157_000, 2 * 784 * 200), ("l2", 40_200, 2 * 200 * 200), ("out", 2010, 2 * 200 * 10)]
    apply, p = pure(make_model("lenet", (28, 28, 1), 10))
    lenet = {l.name: l.fwd_flops for l in profile_layers(apply, p, (28, 28, 1))}
    assert lenet["c1"] == 2 * 28 * 28 * 6 * 25  # SAME padding: 28x28 outputs, 5x5x1 taps
    assert lenet["c2"] == 2 * 10 * 10 * 16 * 150  # VALID: 10x10 outputs, 5x5x6 taps
    assert lenet["f1"] == 2 * 400 * 120


def test_layout_covers_every_parameter_once_and_pieces_do_not_divide():
    lay = layout_for_shape("mlp", (28, 28, 1), 65536, 16384)
    assert lay.colayers == ((2, 1), (0,))  # backward order: out+l2 (168 kB >= 64 kB), then l1
    cover = np.zeros(lay.size, int)
    for s, n in zip(lay.piece_start, lay.piece_len, strict=True):
        cover[s: s + n] += 1
    assert np.all(cover == 1)
    assert lay.piece_len.max() == 16384 and (lay.piece_len < 16384).sum() == 2  # one short piece per colayer
    pos = lay.flat_position()
    assert np.array_equal(np.sort(pos), np.sort(np.flatnonzero(lay.gather_index().reshape(-1) < lay.size)))
    assert np.all(lay.piece_colayer[:-1] <= lay.piece_colayer[1:])


def test_non_adjacent_colayer_is_cut_run_by_run():
    layers = [Layer("a", 10, 0, 1.0), Layer("b", 10, 20, 1.0), Layer("c", 10, 10, 1.0)]
    lay = make_layout(layers, colayer_bytes=80, piece_elems=7)  # backward: c (40 B), b (40 B) -> one colayer
    assert lay.colayer_ranges[0] == ((10, 30),)  # c=[10,20) and b=[20,30) are adjacent in the flat vector
    assert lay.colayer_ranges[1] == ((0, 10),)
    layers = [Layer("a", 10, 0, 1.0), Layer("b", 10, 10, 1.0), Layer("c", 10, 20, 1.0)]
    lay = make_layout(layers, colayer_bytes=10**6, piece_elems=7)
    assert lay.num_colayers == 1 and lay.piece_len.tolist() == [7, 7, 7, 7, 2]


def test_bad_layout_input():
    layers = [Layer("a", 10, 0, 1.0)]
    with pytest.raises(ValueError, match="piece_size"):
        make_layout(layers, 64, 0)
    with pytest.raises(ValueError, match="colayer_bytes"):
        make_layout(layers, 0, 4)
    with pytest.raises(ValueError, match="tile"):
        make_layout([Layer("a", 10, 0, 1.0), Layer("b", 5, 12, 1.0)], 64, 4)
    with pytest.raises(ValueError):
        ComputeModel(0.0)


def test_compute_model_and_ready_times():
    lay = layout_for_shape("mlp", (28, 28, 1), 65536, 16384)
    cm = ComputeModel(1e12, kernel_overhead_s=1e-5, iteration_overhead_s=1e-3)
    ready, total = lay.colayer_ready(cm, 32)
    fwd = 1e-3 + sum(l.fwd_flops * 32 / 1e12 + 1e-5 for l in lay.layers)
    bwd = [2 * l.fwd_flops * 32 / 1e12 + 2e-5 for l in lay.layers]
    assert ready[0] == pytest.approx(fwd + bwd[2] + bwd[1]) and total == pytest.approx(fwd + sum(bwd))
    flat, _ = lay.colayer_ready(cm, 32, pipeline=False)
    assert np.all(flat == total)


def test_exact_byte_counts():
    assert payload_bytes(16384, False, 16384) == 65536
    assert sketch_bytes(16384, 16384) == 16384 + 8
    assert sketch_bytes(16385, 16384) == 16385 + 16  # two pieces, two (lo, scale) headers
    lay = layout_for_shape("mlp", (28, 28, 1), 65536, 16384)
    assert sum(payload_bytes(n, True, 16384) for n in lay.piece_len) == 199_210 + 8 * lay.num_pieces
