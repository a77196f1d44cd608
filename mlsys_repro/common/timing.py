"""A timing model for simulated distributed training: gradient bytes and FLOPs of realistic models.

The simulators of this repository train a small proxy (an MLP or a small CNN on MNIST/CIFAR) for the *numerics*
but may take their *time* from a realistic model: how many bytes one gradient (or parameter) message carries and how
long one iteration computes. This module gives both from a layer-stack description of the model:

* parameters and forward FLOPs per sample, layer by layer, by shape propagation (no arrays are built; convolutions
  and dense layers count ``2 * MACs``; batch-norm, activations, pooling and the softmax are not counted, they are
  < 1 % of the convolution FLOPs of the models here);
* training FLOPs per sample ``= 3 x forward`` (backward = 2 x forward: gradients with respect to activations and
  weights);
* an effective device rate calibrated from a *measured* training throughput of one model on one GPU (Gavel's
  ResNet-50 steps/s on a V100, see :data:`GAVEL_RESNET50_STEPS_PER_S`), so that other models' iteration times on
  that GPU follow from their FLOPs;
* transfer time ``latency + bytes / bandwidth`` and the communication-to-compute ratio of one iteration.

:func:`layer_positions` gives each layer's fractional position in the flattened gradient, so a simulator that
splits a message into pieces can map pieces to layers.

Parameter counts are checked in ``tests/papers/petrel/test_timing.py`` (Petrel is its first user) against
published counts (VGG-16 138,357,544; ResNet-50 25,557,032, both counting batch-norm scale and offset but not
running statistics) and against ``flax.nnx.eval_shape`` of the same layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Gavel (stanford-futuredata/gavel @c4fa400, scheduler/simulation_throughputs.json, MIT licence): ResNet-50,
# batch 64, one GPU, steps per second. The same numbers give conf/hardware/ps_gavel_1gbe.yaml's speed classes.
GAVEL_RESNET50_BATCH = 64
GAVEL_RESNET50_STEPS_PER_S = {"v100": 4.395, "p100": 2.619, "k80": 0.619}


@dataclass(frozen=True)
class Layer:
    """One layer: ``params`` trainable scalars, ``flops`` forward FLOPs per sample (2 x multiply-adds)."""

    name: str
    params: int
    flops: int


@dataclass(frozen=True)
class ModelCost:
    """A model's layers, in the order their parameters appear in the flattened gradient."""

    name: str
    layers: tuple[Layer, ...]

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def fwd_flops(self) -> int:
        """Forward FLOPs per sample."""
        return sum(layer.flops for layer in self.layers)

    def train_flops(self, batch: int) -> int:
        """Forward + backward FLOPs of one iteration on ``batch`` samples (backward = 2 x forward)."""
        return 3 * self.fwd_flops * int(batch)

    def grad_bytes(self, bytes_per_param: int = 4) -> int:
        """Bytes of one dense gradient (or parameter) message, without headers (float32 by default)."""
        return bytes_per_param * self.params


class Stack:
    """Shape propagation for a feed-forward layer stack (NHWC, 'SAME' padding unless stated)."""

    def __init__(self, name: str, hw: tuple[int, int], channels: int):
        self.name = name
        self.h, self.w = hw
        self.c = channels
        self.layers: list[Layer] = []

    def conv(self, cout: int, k: int, stride: int = 1, bias: bool = True, pad: int | None = None,
             name: str = "") -> Stack:
        """A k x k convolution. ``pad=None`` is 'SAME' (output = ceil(in / stride)); an int is explicit padding."""
        if pad is None:
            h, w = math.ceil(self.h / stride), math.ceil(self.w / stride)
        else:
            h, w = (self.h + 2 * pad - k) // stride + 1, (self.w + 2 * pad - k) // stride + 1
        macs = h * w * cout * self.c * k * k
        params = k * k * self.c * cout + (cout if bias else 0)
        self.layers.append(Layer(name or f"conv{len(self.layers)}", params, 2 * macs))
        self.h, self.w, self.c = h, w, cout
        return self

    def bn(self, name: str = "") -> Stack:
        """Batch norm: scale and offset per channel (running statistics are not trained, not sent)."""
        self.layers.append(Layer(name or f"bn{len(self.layers)}", 2 * self.c, 0))
        return self

    def pool(self, k: int = 2, stride: int | None = None, pad: int = 0) -> Stack:
        s = stride or k
        self.h, self.w = (self.h + 2 * pad - k) // s + 1, (self.w + 2 * pad - k) // s + 1
        return self

    def global_pool(self) -> Stack:
        self.h = self.w = 1
        return self

    def flatten(self) -> Stack:
        self.c, self.h, self.w = self.h * self.w * self.c, 1, 1
        return self

    def dense(self, out: int, bias: bool = True, name: str = "") -> Stack:
        macs = self.c * out
        self.layers.append(Layer(name or f"dense{len(self.layers)}", self.c * out + (out if bias else 0), 2 * macs))
        self.c = out
        return self

    def cost(self) -> ModelCost:
        return ModelCost(self.name, tuple(self.layers))


def mlp(in_dim: int, hidden: Sequence[int], out: int, name: str = "mlp") -> ModelCost:
    s = Stack(name, (1, 1), in_dim)
    for i, h in enumerate(hidden):
        s.dense(h, name=f"l{i + 1}")
    return s.dense(out, name="out").cost()


def vgg16(num_classes: int = 1000, image: int = 224) -> ModelCost:
    """VGG-16 (configuration D of Simonyan & Zisserman 2015): 13 3x3 convolutions with biases, 3 dense layers."""
    s = Stack("vgg16", (image, image), 3)
    for block, (n, c) in enumerate(((2, 64), (2, 128), (3, 256), (3, 512), (3, 512))):
        for i in range(n):
            s.conv(c, 3, name=f"conv{block + 1}_{i + 1}")
        s.pool(2)
    s.flatten()
    return s.dense(4096, name="fc6").dense(4096, name="fc7").dense(num_classes, name="fc8").cost()


def resnet50(num_classes: int = 1000, image: int = 224) -> ModelCost:
    """ResNet-50 v1.5 (He et al. 2016; stride 2 in the 3x3 convolution of a bottleneck, as torchvision):
    convolutions without biases, each followed by batch norm; projection shortcuts where the shape changes."""
    s = Stack("resnet50", (image, image), 3)
    s.conv(64, 7, stride=2, bias=False, pad=3, name="conv1").bn("bn1").pool(3, 2, pad=1)
    for stage, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))):
        for b in range(blocks):
            st = stride if b == 0 else 1
            cin, h, w = s.c, s.h, s.w
            p = f"layer{stage + 1}.{b}"
            s.conv(width, 1, bias=False, name=f"{p}.conv1").bn(f"{p}.bn1")
            s.conv(width, 3, stride=st, bias=False, pad=1, name=f"{p}.conv2").bn(f"{p}.bn2")
            s.conv(4 * width, 1, bias=False, name=f"{p}.conv3").bn(f"{p}.bn3")
            if b == 0:  # projection shortcut on the block's input
                oh, ow, oc = s.h, s.w, s.c
                s.h, s.w, s.c = h, w, cin
                s.conv(4 * width, 1, stride=st, bias=False, pad=0, name=f"{p}.downsample").bn(f"{p}.downsample.bn")
                s.h, s.w, s.c = oh, ow, oc
    s.global_pool().flatten()
    return s.dense(num_classes, name="fc").cost()


MODELS: dict[str, Callable[[], ModelCost]] = {
    "vgg16": vgg16,
    "resnet50": resnet50,
    "mnist_mlp32": lambda: mlp(784, [32, 32], 10, name="mnist_mlp32"),
}


def effective_flops_per_s(gpu: str = "v100", model: ModelCost | None = None) -> float:
    """FLOP/s a GPU sustains in training, from Gavel's measured ResNet-50 throughput (batch 64)."""
    model = model or resnet50()
    return model.train_flops(GAVEL_RESNET50_BATCH) * GAVEL_RESNET50_STEPS_PER_S[gpu]


def step_time_s(model: ModelCost, batch: int, flops_per_s: float) -> float:
    """Seconds of one forward + backward iteration on ``batch`` samples."""
    return model.train_flops(batch) / flops_per_s


def transfer_s(nbytes: float, gbps: float, latency_s: float = 0.0) -> float:
    """Seconds to move ``nbytes`` over one link of ``gbps`` gigabits per second."""
    return latency_s + nbytes * 8.0 / (gbps * 1e9)


def comm_compute_ratio(model: ModelCost, batch: int, flops_per_s: float, gbps: float) -> float:
    """One gradient's transfer time over one link / one iteration's compute time."""
    return transfer_s(model.grad_bytes(), gbps) / step_time_s(model, batch, flops_per_s)


def layer_positions(model: ModelCost) -> list[tuple[str, float, float]]:
    """(layer, start, end) as fractions of the flattened gradient, in order (layers without parameters skipped)."""
    total, at, out = model.params, 0, []
    for layer in model.layers:
        if layer.params:
            out.append((layer.name, at / total, (at + layer.params) / total))
            at += layer.params
    return out


def nnx_param_count(factory: Callable[[], object]) -> int:
    """Trainable parameters of a flax NNX module built by ``factory``, via ``nnx.eval_shape`` (no arrays)."""
    import jax
    from flax import nnx

    abstract = nnx.eval_shape(factory)
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
