"""Client architectures: conv_s2's patches-x-matmul convolution and the per-policy architecture choice."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from mlsys_repro.papers.labelavg.models import conv3x3_matmul
from mlsys_repro.papers.labelavg.schemas import FederationHardware


@pytest.mark.parametrize(("shape", "cin", "cout", "stride"), [((28, 28), 1, 8, 2), ((14, 14), 8, 16, 2),
                                                            ((32, 32), 3, 8, 2), ((7, 9), 2, 4, 1), ((5, 5), 1, 3, 2)])
def test_patch_matmul_conv_equals_lax_conv(shape, cin, cout, stride):
    """conv_s2's convolution (patches x matmul) is nnx.Conv's SAME convolution, for odd and even sizes."""
    conv = nnx.Conv(cin, cout, (3, 3), strides=(stride, stride), padding="SAME", rngs=nnx.Rngs(0))
    conv.bias[...] = jax.random.normal(jax.random.key(2), (cout,))
    x = jax.random.normal(jax.random.key(1), (3, *shape, cin))
    np.testing.assert_allclose(conv3x3_matmul(x, conv.kernel[...], conv.bias[...], stride), conv(x), atol=1e-5)


def test_homogeneous_policies_run_the_fedavg_architecture_on_every_client():
    hw = FederationHardware(name="t", num_clients=4, archs=["mlp", "conv_s2"], homogeneous_arch="mlp")
    assert hw.client_archs("labelavg") == ["mlp", "conv_s2", "mlp", "conv_s2"]
    assert hw.client_archs("labelavg", homogeneous=True) == hw.client_archs("fedavg") == ["mlp"] * 4
