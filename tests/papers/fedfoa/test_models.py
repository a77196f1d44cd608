"""SSL networks: the im2col convolution is exactly a 3x3 SAME convolution, shapes and parameter counts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.fedfoa.models import (
    ARCHS,
    BatchNorm,
    Conv3x3,
    NetSpec,
    conv_kernels,
    im2col3x3,
    make_net,
    max_pool2,
    num_params,
)


@pytest.mark.parametrize("cin, cout, hw", [(1, 4, 8), (3, 5, 6)])
def test_im2col_conv_equals_lax_conv(cin, cout, hw):
    from flax import nnx

    conv = Conv3x3(cin, cout, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, hw, hw, cin))
    ref = jax.lax.conv_general_dilated(x, conv.kernel[...].reshape(3, 3, cin, cout), (1, 1), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC")) + conv.bias[...]
    np.testing.assert_allclose(conv(x), ref, rtol=1e-5, atol=1e-5)


def test_im2col_centre_tap_is_the_input():
    x = jnp.arange(2 * 4 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 4, 3)
    cols = im2col3x3(x)
    assert cols.shape == (2, 4, 4, 27)
    np.testing.assert_array_equal(cols[..., 12:15], x)  # (dy, dx) = (1, 1) is the centre
    np.testing.assert_array_equal(cols[:, 0, :, :9], 0.0)  # the top row's upper taps read the zero padding


def test_max_pool2_matches_reduce_window():
    x = jax.random.normal(jax.random.key(0), (2, 6, 4, 3))
    ref = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    np.testing.assert_array_equal(max_pool2(x), ref)


def test_batchnorm_standardises_the_batch():
    x = 3.0 + 2.0 * jax.random.normal(jax.random.key(0), (64, 5))
    y = BatchNorm(5)(x)
    np.testing.assert_allclose(y.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.std(0), 1.0, atol=1e-3)


def test_encoder_sizes_and_shapes():
    # 3x3 kernels flattened to [9 in, out] plus biases, plus GroupNorm scale/bias
    expect = {"cnn_s": 27 * 16 + 144 * 32 + 288 * 64 + (16 + 32 + 64) * 3,  # 23,808
              "cnn_l": 27 * 32 + 288 * 64 + 576 * 128 + (32 + 64 + 128) * 3}  # 93,696
    for arch in ARCHS:
        net = make_net(NetSpec(arch, 3, 32, hidden=64))
        p = net.init(jax.random.key(0))
        assert num_params(p["encoder"]) == expect[arch]
        x = jnp.zeros((4, 16, 16, 3))
        assert net.encode(p, x).shape == (4, ARCHS[arch][-1])
        assert net.embed(p, x).shape == (4, 32)
        assert net.predict(p, net.embed(p, x)).shape == (4, 32)
        assert len(conv_kernels(p)) == 3


def test_vmapped_init_gives_distinct_clients():
    net = make_net(NetSpec("cnn_s", 1, 16, hidden=32))
    ps = jax.vmap(net.init)(jax.random.split(jax.random.key(0), 3))
    k = conv_kernels(ps)[0]
    assert k.shape[0] == 3 and not np.allclose(k[0], k[1])
    z = jax.vmap(net.embed)(ps, jnp.ones((3, 4, 8, 8, 1)))
    assert z.shape == (3, 4, 16)


def test_netspec_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown encoder arch"):
        NetSpec("resnet50", 3, 64)
    with pytest.raises(ValueError, match="proj_dim"):
        NetSpec("cnn_s", 3, 1)
