"""Gradient compression kernels: exact error bounds, unbiasedness, wire format, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.quant import sketch
from mlsys_repro.common.quant.pieces import from_pieces, num_pieces, piece_lengths, to_pieces

# ------------------------------------------------------------------------------------------------ pieces


def test_pieces_when_size_does_not_divide():
    x = jnp.arange(10.0)
    xp, valid = to_pieces(x, 4)
    assert xp.shape == (3, 4) and valid.sum() == 10 and not bool(valid[2, 2])
    assert piece_lengths(10, 4).tolist() == [4, 4, 2]
    np.testing.assert_array_equal(from_pieces(xp, 10), x)
    assert num_pieces(0, 4) == 0 and piece_lengths(0, 4).size == 0
    assert np.asarray(xp)[2].tolist() == [8.0, 9.0, 0.0, 0.0]
    edge, valid_e = to_pieces(x, 4, pad="edge")  # the last element repeated: row min/max need no mask
    assert np.asarray(edge)[2].tolist() == [8.0, 9.0, 9.0, 9.0] and bool((valid_e == valid).all())
    with pytest.raises(ValueError, match="pad must be"):
        to_pieces(x, 4, pad="reflect")


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_zero_or_invalid_piece_size_is_rejected(bad):
    with pytest.raises(ValueError, match="piece_size"):
        num_pieces(10, bad)
    with pytest.raises(ValueError, match="piece_size"):
        sketch.wire_bytes(10, bad)


def test_pieces_need_a_flat_tensor():
    with pytest.raises(ValueError, match="flat"):
        to_pieces(jnp.zeros((2, 3)), 2)


# ------------------------------------------------------------------------------------------------ sketch

# a few fixed shapes (each new shape is a new XLA compilation); values are free
arrays = st.sampled_from([1, 13, 100, 257]).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=n, max_size=n),
    st.sampled_from([1, 4, 64, 100])))


@settings(max_examples=40, deadline=None)
@given(arrays)
def test_deterministic_error_is_at_most_half_a_step(case):
    vals, piece = case
    x = jnp.asarray(vals, jnp.float32)
    sk = sketch.quantize(x, piece)
    xh = sketch.dequantize(sk, x.size)
    err = np.abs(np.asarray(x, np.float64) - np.asarray(xh, np.float64))
    assert np.all(err <= np.asarray(sketch.error_bound(sk, x.size)))
    np.testing.assert_array_equal(xh, sketch.roundtrip(x, piece))
    # the minimum of every piece is stored exactly (up to XLA's flush of subnormals to zero)
    lo = np.asarray(sk.lo)
    for i, ln in enumerate(piece_lengths(x.size, piece)):
        seg = np.asarray(x)[i * piece: i * piece + ln]
        assert abs(float(lo[i]) - float(seg.min())) <= np.finfo(np.float32).tiny


def test_bound_is_tight_so_a_wrong_scale_would_fail():
    x = jax.random.normal(jax.random.key(0), (4096,))
    sk = sketch.quantize(x, 512)
    err = jnp.abs(x - sketch.dequantize(sk, 4096))
    half = np.repeat(np.asarray(sk.scale) / 2, 512)
    assert float(jnp.max(err / half)) > 0.95  # the worst element uses almost the whole half-step
    assert sk.codes.dtype == jnp.uint8 and int(sk.codes.max()) == 255 and int(sk.codes.min()) == 0


def test_constant_piece_is_exact_and_scale_zero():
    x = jnp.full((7,), 3.25)
    sk = sketch.quantize(x, 4)
    assert np.all(np.asarray(sk.scale) == 0)
    np.testing.assert_array_equal(sketch.dequantize(sk, 7), x)


def test_stochastic_rounding_is_unbiased_and_within_one_step():
    x = jax.random.normal(jax.random.key(1), (256,)) * 0.01
    keys = jax.random.split(jax.random.key(2), 2000)
    outs = jax.vmap(lambda k: sketch.roundtrip(x, 64, k))(keys)
    sk = sketch.quantize(x, 64)
    assert bool(jnp.all(jnp.abs(outs - x) <= sketch.error_bound(sk, 256, stochastic=True)))
    mean_err = np.asarray(outs.mean(0) - x)
    se = np.repeat(np.asarray(sk.scale), 64) / 2 / np.sqrt(len(keys))  # Bernoulli sd <= scale/2
    assert np.all(np.abs(mean_err) <= 5 * se + 1e-9)
    # deterministic rounding of the same data is biased for some elements: the test can tell them apart
    det_err = np.abs(np.asarray(sketch.roundtrip(x, 64) - x))
    assert det_err.max() > 20 * se.max()


def test_error_feedback_carries_the_residual():
    x = jax.random.normal(jax.random.key(3), (100,))
    res = jnp.zeros(100)
    total_sent = jnp.zeros(100)
    for _ in range(50):
        sk, res = sketch.ef_quantize(x, res, 16)
        total_sent += sketch.dequantize(sk, 100)
    # the sum of what was sent tracks the sum of the inputs up to one residual
    np.testing.assert_allclose(total_sent + res, 50 * x, rtol=1e-4, atol=1e-4)
    assert float(jnp.max(jnp.abs(res))) <= float(jnp.max(sketch.error_bound(sk, 100)))


def test_wire_format_roundtrip_and_exact_byte_count():
    x = jax.random.normal(jax.random.key(4), (1000,))
    sk = sketch.quantize(x, 300)
    buf = sketch.to_bytes(sk, 1000)
    assert len(buf) == sketch.wire_bytes(1000, 300) == 1000 + 4 * 8
    back = sketch.from_bytes(buf, 1000, 300)
    np.testing.assert_array_equal(sketch.dequantize(back, 1000), sketch.dequantize(sk, 1000))
    assert np.frombuffer(buf[:4], "<f4")[0] == float(sk.lo[0])
    with pytest.raises(ValueError, match="needs"):
        sketch.from_bytes(buf[:-1], 1000, 300)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_is_reported_never_encoded(bad):
    x = np.linspace(-1, 1, 20).astype(np.float32)
    x[13] = bad
    with pytest.raises(sketch.NonFiniteGradientError, match="1 piece") as ei:
        sketch.quantize_checked(x, 8, where="layer f1")
    assert ei.value.pieces.tolist() == [1] and "layer f1" in str(ei.value)
    sk = sketch.quantize(jnp.asarray(x), 8)  # the jitted kernel poisons the piece instead of encoding it
    out = np.asarray(sketch.dequantize(sk, 20))
    assert np.all(np.isnan(out[8:16])) and np.all(np.isfinite(out[:8])) and np.all(np.isfinite(out[16:]))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_last_element_poisons_only_the_short_last_piece(bad):
    # the short last piece is padded by repeating its last element: padding must neither hide nor spread it
    x = np.linspace(-1, 1, 21).astype(np.float32)
    x[-1] = bad
    sk = sketch.quantize(jnp.asarray(x), 8)
    out = np.asarray(sketch.dequantize(sk, 21))
    assert np.all(np.isnan(out[16:])) and np.all(np.isfinite(out[:16]))
    assert np.all(np.asarray(sk.codes)[2] == 0)


@given(st.integers(1, 40), st.integers(1, 9), st.integers(0, 2**31 - 1))
@settings(max_examples=12, deadline=None)
def test_padding_codes_are_zero_and_statistics_ignore_padding(n, piece, seed):
    x = np.random.default_rng(seed).normal(size=n).astype(np.float32) * 3 + 10  # all far from the pad value 0
    sk = sketch.quantize(jnp.asarray(x), piece)
    codes, lo, scale = map(np.asarray, sk)
    last = n - (codes.shape[0] - 1) * piece
    assert np.all(codes[-1, last:] == 0)
    seg = x[(codes.shape[0] - 1) * piece:]
    assert lo[-1] == seg.min()
    assert scale[-1] == pytest.approx((float(seg.max()) - float(seg.min())) / 255, rel=1e-6, abs=1e-12)


def test_empty_tensor_has_no_pieces_and_no_bytes():
    sk = sketch.quantize(jnp.zeros((0,)), 8)
    assert sk.codes.shape == (0, 8)
    assert sketch.wire_bytes(0, 8) == 0 and sketch.to_bytes(sk, 0) == b""


def test_roundtrip_pieces_batched_matches_flat():
    x = jax.random.normal(jax.random.key(5), (3, 4, 16))
    out = sketch.roundtrip_pieces(x)
    for i in range(3):
        np.testing.assert_allclose(out[i].reshape(-1), sketch.roundtrip(x[i].reshape(-1), 16), rtol=1e-6, atol=1e-6)
