"""A hand-made two-node, one-model placement problem whose outcomes can be computed by hand."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from mlsys_repro.papers.greenplace.env import EnvParams

T = 48


def tiny_params(**over) -> EnvParams:
    """Node 0: edge site (1 lane, 10/30 W, 1 GB); node 1: cloud (2 lanes, 100/300 W, 10 GB). One model, cuts:
    0 = all remote, 1 = half / half, 2 = all in front. Edge 0.1 s/frame for the whole model, cloud 0.01 s."""
    f = lambda x, dt=jnp.float32: jnp.asarray(x, dt)  # noqa: E731
    p = dict(
        price=f(np.full((T, 2), 0.1)), green_kw=f(np.zeros((T, 2))), ci=f(np.full((T, 2), 400.0)),
        rate=f(np.full(T, 0.01)), local_offset_h=f(0, jnp.int32),
        dev=f([0, 1], jnp.int32), speed=f([1.0, 1.0]), lane_ok=jnp.array([[True, False], [True, True]]),
        p_idle=f([0.01, 0.1]), p_max=f([0.03, 0.3]), mem=f([1e9, 1e10]), site_probs=f([1.0, 0.0]),
        bw=f(np.full((2, 2), 1e7)), rtt=f(np.zeros((2, 2))),
        model_probs=f([1.0]), in_bytes=f([1.5e5]), out_bytes=f([4e3]),
        cand_ok=jnp.array([[True, True, True]]), front_empty=jnp.array([[True, False, False]]),
        back_empty=jnp.array([[False, False, True]]), is_prefix=jnp.array([[True, True, True]]),
        front_lat=f([[[0.0, 0.0], [0.05, 0.005], [0.1, 0.01]]]),
        back_lat=f([[[0.1, 0.01], [0.05, 0.005], [0.0, 0.0]]]),
        cross_bytes=f([[0.0, 1e5, 0.0]]), front_mem=f([[0.0, 5e8, 9e8]]), back_mem=f([[9e8, 5e8, 0.0]]),
        front_params=f([[0.0, 1e8, 2e8]]), back_params=f([[2e8, 1e8, 0.0]]), front_frac=f([[0.0, 0.5, 1.0]]),
        all_front=f([2], jnp.int32), dads_cut=f([[1, 1]], jnp.int32), cloud=f(1, jnp.int32),
        batch_min=f(10.0), batch_max=f(10.0), net_kwh_per_byte=f(0.0), cold_start_s=f(0.0), keep_alive_s=f(600.0),
        load_bps=f(1.25e8), w_energy=f(0.5), c_norm=f(1e-5), t_norm=f(1.0),
        reward_clip=f(10.0), reject_penalty=f(5.0), start_hours=f([0], jnp.int32), episode_jobs=8,
    )
    p.update(over)
    return EnvParams(**p)


def two_site_params(**over) -> EnvParams:
    """:func:`tiny_params` with a second edge site: nodes 0 and 1 are edge sites (as node 0 there; jobs arrive at
    both), node 2 the cloud. All links 1e7 B/s, no RTT (override ``bw`` / ``rtt`` to change)."""
    f = lambda x, dt=jnp.float32: jnp.asarray(x, dt)  # noqa: E731
    p = dict(
        price=f(np.full((T, 3), 0.1)), green_kw=f(np.zeros((T, 3))), ci=f(np.full((T, 3), 400.0)),
        dev=f([0, 0, 1], jnp.int32), speed=f([1.0, 1.0, 1.0]),
        lane_ok=jnp.array([[True, False], [True, False], [True, True]]),
        p_idle=f([0.01, 0.01, 0.1]), p_max=f([0.03, 0.03, 0.3]), mem=f([1e9, 1e9, 1e10]), site_probs=f([0.5, 0.5, 0.0]),
        bw=f(np.full((3, 3), 1e7)), rtt=f(np.zeros((3, 3))), dads_cut=f([[1, 1, 1]], jnp.int32), cloud=f(2, jnp.int32),
    )
    p.update(over)
    return tiny_params(**p)
