"""Meshes over (emulated) devices and a runner for per-device collective code.

Emulated CPU devices: set ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts (the count is
fixed once the backend initialises, so tests that need N devices run in a subprocess). Collective *time* on
emulated devices means nothing; these functions are for numerics and parity, time comes from
:mod:`mlsys_repro.common.sim.netsim`.

Every collective in this package is a per-device function ``fn(x_local, ...)`` meant to run inside
``jax.shard_map``; :func:`spmd` wraps one so it takes and returns arrays stacked along a leading device axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def make_mesh(shape: Sequence[int], names: Sequence[str]) -> Mesh:
    """A mesh over the first ``prod(shape)`` devices, axis types Auto (so unsharded inputs are accepted)."""
    n = 1
    for s in shape:
        n *= int(s)
    if n > jax.device_count():
        raise ValueError(f"mesh {tuple(shape)} needs {n} devices, only {jax.device_count()} present; set "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before importing jax")
    return jax.make_mesh(tuple(shape), tuple(names), axis_types=(AxisType.Auto,) * len(shape),
                         devices=jax.devices()[:n])


def spmd(fn: Callable, mesh: Mesh, n_out: int = 1) -> Callable:
    """Jitted ``shard_map`` of ``fn`` over every mesh axis; inputs/outputs are stacked ``[*mesh.shape, ...]``.

    ``fn`` receives each device's block with the mesh axes squeezed away and returns ``n_out`` arrays.
    """
    axes = tuple(mesh.axis_names)
    spec = P(*axes)
    lead = len(axes)

    def body(*xs):
        outs = fn(*(x.reshape(x.shape[lead:]) for x in xs))
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(o.reshape((1,) * lead + o.shape) for o in outs)

    mapped = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec,) * n_out))

    def run(*xs):
        out = mapped(*(jax.device_put(x, NamedSharding(mesh, spec)) for x in xs))
        return out if n_out > 1 else out[0]

    return run


__all__ = ["make_mesh", "spmd"]
