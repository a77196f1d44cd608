"""The DNN applications as flax NNX graph networks, and their per-layer profiles taken from the models themselves.

Each model is a list of :class:`Op` (a DAG in topological order: ``inputs`` index earlier ops, ``-1`` is the
model input). :class:`GraphNet` builds the NNX layers and runs the graph. :func:`profile` traces the network with
``jax.eval_shape`` to get every op's output shape, and derives per-layer FLOPs, activation bytes, parameter bytes
and the features the latency regressors need. Architectures follow torchvision's AlexNet, VGG-16, ResNet-18 and
the MobileNet-v1 paper (Howard et al. 2017), for 224x224x3 inputs, batch 1, float32 (ReLU fused into the op
before it; dropout omitted: inference).

``block_end`` marks the partition points (a cut after the op is allowed): every layer of a chain (AlexNet, VGG),
the end of each residual block (ResNet) or depthwise-separable block (MobileNet), as partitioning systems do.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

LAYER_TYPES = ("conv", "dw_conv", "linear", "maxpool", "avgpool", "batchnorm", "add")
INPUT_SHAPE = (224, 224, 3)
BYTES_PER_VALUE = 4  # float32 activations and weights
INPUT_FRAME_BYTES = 224 * 224 * 3  # a raw uint8 RGB frame is what leaves the camera's site


@dataclass(frozen=True)
class Op:
    kind: str
    inputs: tuple[int, ...] = (-2,)  # -2: the previous op (or the model input for op 0); -1: the model input
    cout: int = 0
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    relu: bool = False
    block_end: bool = True
    name: str = ""


@dataclass(frozen=True)
class LayerProfile:
    """Per-op arrays of one model, index = op id (topological order)."""

    name: str
    kinds: tuple[str, ...]
    inputs: tuple[tuple[int, ...], ...]  # producer op ids, -1 = model input
    out_shapes: tuple[tuple[int, ...], ...]
    in_shapes: tuple[tuple[int, ...], ...]  # shape of the first input of each op
    flops: np.ndarray  # float64 [L]
    out_bytes: np.ndarray  # float64 [L]
    param_bytes: np.ndarray  # float64 [L]
    features: tuple[dict[str, float], ...]  # what the latency regressor of the op's kind needs
    block_end: np.ndarray  # bool [L]
    input_bytes: float  # bytes of one input frame as sent over the network

    @property
    def num_layers(self) -> int:
        return len(self.kinds)

    def consumers(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.kinds]
        for j, ins in enumerate(self.inputs):
            for i in ins:
                if i >= 0:
                    out[i].append(j)
        return out


# ---------------------------------------------------------------------------------------------- architectures


def alexnet() -> list[Op]:
    return [
        Op("conv", cout=64, kernel=11, stride=4, padding=2, relu=True, name="conv1"),
        Op("maxpool", kernel=3, stride=2, name="pool1"),
        Op("conv", cout=192, kernel=5, padding=2, relu=True, name="conv2"),
        Op("maxpool", kernel=3, stride=2, name="pool2"),
        Op("conv", cout=384, kernel=3, padding=1, relu=True, name="conv3"),
        Op("conv", cout=256, kernel=3, padding=1, relu=True, name="conv4"),
        Op("conv", cout=256, kernel=3, padding=1, relu=True, name="conv5"),
        Op("maxpool", kernel=3, stride=2, name="pool5"),
        Op("linear", cout=4096, relu=True, name="fc6"),
        Op("linear", cout=4096, relu=True, name="fc7"),
        Op("linear", cout=1000, name="fc8"),
    ]


def vgg16() -> list[Op]:
    ops: list[Op] = []
    for stage, (ch, n) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)), start=1):
        ops += [Op("conv", cout=ch, kernel=3, padding=1, relu=True, name=f"conv{stage}_{i + 1}") for i in range(n)]
        ops.append(Op("maxpool", kernel=2, stride=2, name=f"pool{stage}"))
    ops += [Op("linear", cout=4096, relu=True, name="fc6"), Op("linear", cout=4096, relu=True, name="fc7"),
            Op("linear", cout=1000, name="fc8")]
    return ops


def resnet18() -> list[Op]:
    ops = [
        Op("conv", cout=64, kernel=7, stride=2, padding=3, block_end=False, name="conv1"),
        Op("batchnorm", relu=True, name="bn1"),
        Op("maxpool", kernel=3, stride=2, padding=1, name="maxpool"),
    ]
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for b in range(2):
            stride = 2 if (stage > 1 and b == 0) else 1
            x = len(ops) - 1  # block input
            p = f"layer{stage}.{b}."
            if stride != 1 or cin != cout:  # projection shortcut first, so prefixes stay meaningful
                ops.append(Op("conv", inputs=(x,), cout=cout, kernel=1, stride=stride, block_end=False,
                              name=p + "downsample.conv"))
                ops.append(Op("batchnorm", block_end=False, name=p + "downsample.bn"))
                short = len(ops) - 1
            else:
                short = x
            ops.append(Op("conv", inputs=(x,), cout=cout, kernel=3, stride=stride, padding=1, block_end=False,
                          name=p + "conv1"))
            ops.append(Op("batchnorm", relu=True, block_end=False, name=p + "bn1"))
            ops.append(Op("conv", cout=cout, kernel=3, padding=1, block_end=False, name=p + "conv2"))
            ops.append(Op("batchnorm", block_end=False, name=p + "bn2"))
            ops.append(Op("add", inputs=(len(ops) - 1, short), relu=True, name=p + "add"))
            cin = cout
    ops += [Op("avgpool", kernel=7, stride=7, name="avgpool"), Op("linear", cout=1000, name="fc")]
    return ops


def mobilenet_v1() -> list[Op]:
    ops = [Op("conv", cout=32, kernel=3, stride=2, padding=1, block_end=False, name="conv1"),
           Op("batchnorm", relu=True, name="bn1")]
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (cout, s) in enumerate(cfg, start=1):
        ops += [Op("dw_conv", kernel=3, stride=s, padding=1, block_end=False, name=f"block{i}.dw"),
                Op("batchnorm", relu=True, block_end=False, name=f"block{i}.dw_bn"),
                Op("conv", cout=cout, kernel=1, block_end=False, name=f"block{i}.pw"),
                Op("batchnorm", relu=True, name=f"block{i}.pw_bn")]
    ops += [Op("avgpool", kernel=7, stride=7, name="avgpool"), Op("linear", cout=1000, name="fc")]
    return ops


ARCHITECTURES = {"alexnet": alexnet, "vgg16": vgg16, "resnet18": resnet18, "mobilenet_v1": mobilenet_v1}


# ---------------------------------------------------------------------------------------------- NNX network


def _resolve_inputs(ops: list[Op]) -> list[tuple[int, ...]]:
    out = []
    for j, op in enumerate(ops):
        ins = tuple((j - 1 if i == -2 else i) for i in op.inputs)
        if any(i >= j or i < -1 for i in ins):
            raise ValueError(f"op {j} ({op.name}) has inputs {op.inputs}; they must be earlier ops or -1")
        out.append(ins)
    return out


def _pool(x, kind: str, k: int, s: int, p: int):
    pad = ((0, 0), (p, p), (p, p), (0, 0))
    if kind == "maxpool":
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, k, k, 1), (1, s, s, 1), pad)
    return jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, k, k, 1), (1, s, s, 1), pad) / (k * k)


class GraphNet(nnx.Module):
    """A DNN given as a DAG of :class:`Op`; ``__call__`` runs it, ``run_op`` runs one op (for profiling)."""

    def __init__(self, ops: list[Op], rngs: nnx.Rngs, input_shape: tuple[int, int, int] = INPUT_SHAPE):
        self.ops = tuple(ops)
        self.inputs = tuple(_resolve_inputs(ops))
        shapes: list[tuple[int, ...]] = []
        layers = []
        for j, op in enumerate(ops):
            src = self.inputs[j][0]
            h, w, c = input_shape if src == -1 else shapes[src]
            pad = ((op.padding, op.padding), (op.padding, op.padding))
            if op.kind == "conv":
                layers.append(nnx.Conv(c, op.cout, (op.kernel, op.kernel), strides=op.stride, padding=pad,
                                       rngs=rngs))
            elif op.kind == "dw_conv":
                layers.append(nnx.Conv(c, c, (op.kernel, op.kernel), strides=op.stride, padding=pad,
                                       feature_group_count=c, rngs=rngs))
            elif op.kind == "linear":
                layers.append(nnx.Linear(h * w * c, op.cout, rngs=rngs))
            elif op.kind == "batchnorm":
                layers.append(nnx.BatchNorm(c, use_running_average=True, rngs=rngs))
            elif op.kind in ("maxpool", "avgpool", "add"):
                layers.append(None)
            else:
                raise ValueError(f"unknown op kind {op.kind!r} (known: {LAYER_TYPES})")
            shapes.append(self._shape_after(op, (h, w, c)))
        self.layers = nnx.List(layers)

    @staticmethod
    def _shape_after(op: Op, s: tuple[int, int, int]) -> tuple[int, ...]:
        h, w, c = s
        if op.kind in ("conv", "dw_conv", "maxpool", "avgpool"):
            ho = (h + 2 * op.padding - op.kernel) // op.stride + 1
            wo = (w + 2 * op.padding - op.kernel) // op.stride + 1
            return (ho, wo, op.cout if op.kind == "conv" else c)
        if op.kind == "linear":
            return (1, 1, op.cout)
        return (h, w, c)

    def run_op(self, j: int, *xs: jax.Array) -> jax.Array:
        op, layer = self.ops[j], self.layers[j]
        x = xs[0]
        if op.kind in ("conv", "dw_conv", "batchnorm"):
            y = layer(x)
        elif op.kind == "linear":
            y = layer(x.reshape(x.shape[0], -1)).reshape(x.shape[0], 1, 1, -1)
        elif op.kind in ("maxpool", "avgpool"):
            y = _pool(x, op.kind, op.kernel, op.stride, op.padding)
        else:  # add
            y = sum(xs[1:], xs[0])
        return jax.nn.relu(y) if op.relu else y

    def forward_all(self, x: jax.Array) -> list[jax.Array]:
        """Every op's output, in op order."""
        outs: list[jax.Array] = []
        for j in range(len(self.ops)):
            outs.append(self.run_op(j, *[x if i == -1 else outs[i] for i in self.inputs[j]]))
        return outs

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.forward_all(x)[-1].reshape(x.shape[0], -1)


def build(name: str, seed: int = 0) -> GraphNet:
    if name not in ARCHITECTURES:
        raise KeyError(f"unknown model {name!r}; known {sorted(ARCHITECTURES)}")
    return GraphNet(ARCHITECTURES[name](), nnx.Rngs(seed))


def build_abstract(name: str) -> GraphNet:
    """The model with shape-only parameters (nothing allocated): enough for shapes, FLOPs and sizes."""
    return nnx.eval_shape(lambda: build(name))


# ---------------------------------------------------------------------------------------------- profiling


def graphdef_inputs(name: str, j: int) -> tuple[int, ...]:
    return tuple(_resolve_inputs(ARCHITECTURES[name]())[j])


def _flops(op: Op, ins: tuple[int, ...], out: tuple[int, ...]) -> float:
    """Floating-point operations of one op for one input (a multiply-add counts 2)."""
    ho, wo, co = out
    h, w, c = ins
    if op.kind == "conv":
        return 2.0 * ho * wo * co * op.kernel * op.kernel * c
    if op.kind == "dw_conv":
        return 2.0 * ho * wo * c * op.kernel * op.kernel
    if op.kind == "linear":
        return 2.0 * h * w * c * co
    if op.kind in ("maxpool", "avgpool"):
        return float(ho * wo * co * op.kernel * op.kernel)
    if op.kind == "batchnorm":
        return 2.0 * h * w * c
    return float(h * w * c)  # add


def _features(op: Op, ins: tuple[int, ...], out: tuple[int, ...]) -> dict[str, float]:
    h, _, c = ins
    if op.kind == "conv":
        return {"HW": h, "kernel": op.kernel, "stride": op.stride, "Cin": c, "Cout": op.cout}
    if op.kind == "dw_conv":
        return {"HW": h, "kernel": op.kernel, "stride": op.stride, "Cin": c}
    if op.kind == "linear":
        return {"in_features": int(np.prod(ins)), "out_features": op.cout}
    if op.kind == "maxpool":
        return {"HW": h, "kernel": op.kernel, "stride": op.stride, "Cin": c}
    if op.kind == "avgpool":
        return {"HW": h, "output": out[0], "Cin": c}
    return {"HW": h, "Cin": c}  # batchnorm, and add (an elementwise op of the same size)


def profile(name: str) -> LayerProfile:
    """Shapes by tracing the NNX model (``jax.eval_shape``, no compute); FLOPs and bytes from those shapes.
    Computed once per world (:class:`mlsys_repro.papers.greenplace.data.World` holds every model's profile)."""
    net = build_abstract(name)
    graphdef, state = nnx.split(net)
    x = jax.ShapeDtypeStruct((1, *INPUT_SHAPE), jnp.float32)
    outs = jax.eval_shape(lambda st, x: nnx.merge(graphdef, st).forward_all(x), state, x)
    out_shapes = tuple(tuple(int(d) for d in o.shape[1:]) for o in outs)
    in_shapes = tuple((INPUT_SHAPE if net.inputs[j][0] == -1 else out_shapes[net.inputs[j][0]])
                      for j in range(len(net.ops)))
    param_bytes = []
    for layer in net.layers:
        n = 0 if layer is None else sum(int(np.prod(v.shape)) for v in jax.tree.leaves(nnx.state(layer)))
        param_bytes.append(float(n * BYTES_PER_VALUE))
    ops = net.ops
    return LayerProfile(
        name=name,
        kinds=tuple(op.kind for op in ops),
        inputs=net.inputs,
        out_shapes=out_shapes,
        in_shapes=in_shapes,
        flops=np.array([_flops(op, i, o) for op, i, o in zip(ops, in_shapes, out_shapes, strict=True)]),
        out_bytes=np.array([float(np.prod(o)) * BYTES_PER_VALUE for o in out_shapes]),
        param_bytes=np.array(param_bytes),
        features=tuple(_features(op, i, o) for op, i, o in zip(ops, in_shapes, out_shapes, strict=True)),
        block_end=np.array([op.block_end for op in ops]),
        input_bytes=float(INPUT_FRAME_BYTES),
    )


def xla_flops(name: str, j: int) -> float:
    """FLOPs XLA's cost analysis reports for op ``j`` alone (a cross-check of :func:`profile`)."""
    graphdef, state = nnx.split(build_abstract(name))
    xs = [jax.ShapeDtypeStruct((1, *profile(name).in_shapes[j]), jnp.float32)] * len(graphdef_inputs(name, j))
    fn = jax.jit(lambda st, *a: nnx.merge(graphdef, st).run_op(j, *a))
    cost = fn.lower(state, *xs).compile().cost_analysis()
    if isinstance(cost, list):
        cost = cost[0]
    return float(cost.get("flops", 0.0))
