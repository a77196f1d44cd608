"""Round-based (lease) simulation of a GPU cluster on fixed-shape arrays: racks > servers > GPUs, CPU, memory.

The cluster is a per-GPU ownership table, so every state is a fixed-shape pytree that jits, scans and vmaps:

* :class:`ClusterSpec` (host, static): per-server capacity ``[S, 3]`` = (GPUs, CPU cores, memory GB) and rack
  ids; :meth:`ClusterSpec.uniform` builds Synergy-style homogeneous clusters, :meth:`ClusterSpec.from_servers`
  heterogeneous ones (e.g. from a node list).
* :class:`Occupancy` (device): ``owner[S, G]`` (slot index of the job holding that GPU, ``FREE`` or
  ``ABSENT`` for servers with fewer than ``G`` GPUs), and the CPU cores and memory attached to each held GPU.
  Free capacity, per-job totals and the number of servers a job spans are all derived from it, so capacity can
  never drift out of sync.
* :class:`SpeedModel`: a job's progress rate from its model's measured throughput profile over
  (CPU per GPU, memory per GPU), bilinearly interpolated and clamped to the grid, times a per-model placement
  penalty when the job spans more than one server.
* :class:`JobTable` / :class:`SimState`: jobs sorted by arrival; a fixed number ``C`` of *active slots*
  (pending or running jobs). Jobs enter free slots in arrival order; when ``C >= N`` job ``i`` always uses
  slot ``i``.
* :func:`simulate`: ``lax.while_loop`` over rounds of ``round_s`` seconds (Synergy's 300 s leases). Each round:
  jump over idle gaps, admit arrivals, call the policy's ``schedule(state) -> state`` (it places, preempts and
  sets allocations through :func:`place` / :func:`preempt`), run every running job for one round at its
  profiled speed (a job that finishes inside the round finishes at its exact time), release finished jobs.

Units: seconds, CPU cores, GB. ``work`` is a job's run time at speed 1.0, i.e. at the GPU-proportional fair share
of CPU and memory on one server, which is what a trace's duration means (Synergy's convention).

Priority keys: XLA:CPU sorts a single int32 array an order of magnitude faster than floats or several keys, so
policies express priorities as int32 keys from :func:`float_key` / :func:`int_key` packed with the slot index
(:func:`pack_keys`), and :func:`priority_order` sorts them once per round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

FREE = -1
ABSENT = -2
EMPTY, PENDING, RUNNING = 0, 1, 2
EPS = 1e-4
INT_MAX = np.iinfo(np.int32).max


# ---------------------------------------------------------------------------------------------- cluster


@dataclass(frozen=True)
class ClusterSpec:
    """Static description of a cluster: ``capacity[s] = (gpus, cpus, mem_gb)`` and ``rack[s]`` per server."""

    capacity: np.ndarray
    rack: np.ndarray
    name: str = "cluster"

    def __post_init__(self) -> None:
        cap = np.asarray(self.capacity, np.float32)
        rack = np.asarray(self.rack, np.int32)
        if cap.ndim != 2 or cap.shape[1] != 3 or cap.shape[0] < 1:
            raise ValueError(f"capacity must be [servers, 3] (gpus, cpus, mem_gb), got shape {cap.shape}")
        if rack.shape != (cap.shape[0],):
            raise ValueError(f"rack must have one id per server ({cap.shape[0]}), got shape {rack.shape}")
        if not np.all(np.isfinite(cap)) or np.any(cap <= 0):
            raise ValueError("every server needs a positive, finite number of GPUs, CPUs and GB of memory")
        if np.any(cap[:, 0] != np.round(cap[:, 0])):
            raise ValueError("GPU counts must be integers")
        object.__setattr__(self, "capacity", cap)
        object.__setattr__(self, "rack", rack)

    @classmethod
    def uniform(cls, racks: int, servers_per_rack: int, gpus: int, cpus: float, mem_gb: float,
                name: str = "cluster") -> ClusterSpec:
        """``racks x servers_per_rack`` identical servers (Synergy's ``default_cluster.ini`` shape)."""
        if racks < 1 or servers_per_rack < 1:
            raise ValueError(f"need >= 1 rack and server per rack, got {racks} x {servers_per_rack}")
        n = racks * servers_per_rack
        cap = np.tile(np.array([[gpus, cpus, mem_gb]], np.float32), (n, 1))
        return cls(cap, np.repeat(np.arange(racks, dtype=np.int32), servers_per_rack), name)

    @classmethod
    def from_servers(cls, gpus, cpus, mem_gb, rack=None, name: str = "cluster") -> ClusterSpec:
        """Heterogeneous servers from per-server arrays (rack ids default to 0)."""
        cap = np.stack([np.asarray(gpus, np.float32), np.asarray(cpus, np.float32),
                        np.asarray(mem_gb, np.float32)], axis=1)
        rack = np.zeros(cap.shape[0], np.int32) if rack is None else np.asarray(rack, np.int32)
        return cls(cap, rack, name)

    @property
    def num_servers(self) -> int:
        return int(self.capacity.shape[0])

    @property
    def max_gpus(self) -> int:
        """``G``: the widest server, the second axis of the ownership table."""
        return int(self.capacity[:, 0].max())

    @property
    def total_gpus(self) -> int:
        return int(self.capacity[:, 0].sum())

    def arrays(self) -> Cluster:
        g = self.max_gpus
        exists = np.arange(g)[None, :] < self.capacity[:, :1]
        return Cluster(jnp.asarray(self.capacity), jnp.asarray(self.rack), jnp.asarray(exists))


class Cluster(NamedTuple):
    """Device arrays of a :class:`ClusterSpec`."""

    cap: jax.Array  # [S, 3] float32
    rack: jax.Array  # [S] int32
    gpu_exists: jax.Array  # [S, G] bool

    @property
    def fair_per_gpu(self) -> jax.Array:
        """``[S, 2]`` GPU-proportional share of (CPU, memory) per GPU on each server."""
        return self.cap[:, 1:] / self.cap[:, :1]


class Occupancy(NamedTuple):
    owner: jax.Array  # [S, G] int32: slot index, FREE or ABSENT
    cpu: jax.Array  # [S, G] float32 CPU cores attached to the GPU
    mem: jax.Array  # [S, G] float32 GB attached to the GPU


def empty_occupancy(cl: Cluster) -> Occupancy:
    z = jnp.zeros(cl.gpu_exists.shape, jnp.float32)
    return Occupancy(jnp.where(cl.gpu_exists, FREE, ABSENT).astype(jnp.int32), z, z)


def server_free(cl: Cluster, occ: Occupancy) -> jax.Array:
    """``[S, 3]`` free (GPUs, CPUs, GB) per server."""
    used = jnp.stack([(occ.owner >= 0).sum(1).astype(jnp.float32), occ.cpu.sum(1), occ.mem.sum(1)], axis=1)
    return cl.cap - used


def server_used(occ: Occupancy) -> jax.Array:
    return jnp.stack([(occ.owner >= 0).sum(1).astype(jnp.float32), occ.cpu.sum(1), occ.mem.sum(1)], axis=1)


def overcommit(cl: Cluster, occ: Occupancy) -> jax.Array:
    """Largest amount by which any server's allocation exceeds its capacity in any resource (<= 0 is valid)."""
    return jnp.max(server_used(occ) - cl.cap)


class JobUsage(NamedTuple):
    gpus: jax.Array  # [C] int32
    cpu: jax.Array  # [C] float32
    mem: jax.Array  # [C] float32
    servers: jax.Array  # [C] int32 number of distinct servers


def job_usage(occ: Occupancy, num_slots: int) -> JobUsage:
    """Per-slot totals derived from the ownership table."""
    o = occ.owner
    seg = jnp.where(o >= 0, o, num_slots).ravel()
    n = num_slots + 1
    g = jax.ops.segment_sum(jnp.ones_like(seg), seg, n)[:num_slots]
    c = jax.ops.segment_sum(occ.cpu.ravel(), seg, n)[:num_slots]
    m = jax.ops.segment_sum(occ.mem.ravel(), seg, n)[:num_slots]
    # first GPU of each owner within a server row marks one (server, job) pair
    gsz = o.shape[1]
    earlier = jnp.tril(jnp.ones((gsz, gsz), bool), k=-1)  # earlier[k, k'] = k' < k
    dup = ((o[:, :, None] == o[:, None, :]) & earlier[None]).any(-1)
    first = jnp.where((o >= 0) & ~dup, o, num_slots).ravel()
    s = jax.ops.segment_sum(jnp.ones_like(first), first, n)[:num_slots]
    return JobUsage(g.astype(jnp.int32), c, m, s.astype(jnp.int32))


def release(occ: Occupancy, slot_mask: jax.Array) -> Occupancy:
    """Free every GPU (and its CPU/memory) held by a slot with ``slot_mask[slot]``."""
    o = occ.owner
    hit = (o >= 0) & slot_mask[jnp.clip(o, 0, slot_mask.shape[0] - 1)]
    return Occupancy(jnp.where(hit, FREE, o), jnp.where(hit, 0.0, occ.cpu), jnp.where(hit, 0.0, occ.mem))


def assign(occ: Occupancy, slot, take: jax.Array, cpu_per_gpu: jax.Array, mem_per_gpu: jax.Array) -> Occupancy:
    """Give ``slot`` the first ``take[s]`` free GPUs of each server with the per-GPU CPU/memory of that server."""
    free = occ.owner == FREE
    rank = jnp.cumsum(free, axis=1)
    sel = free & (rank <= take[:, None])
    return Occupancy(jnp.where(sel, slot, occ.owner).astype(jnp.int32),
                     jnp.where(sel, cpu_per_gpu[:, None], occ.cpu), jnp.where(sel, mem_per_gpu[:, None], occ.mem))


def gpus_that_fit(free: jax.Array, cpu_per_gpu: jax.Array, mem_per_gpu: jax.Array) -> jax.Array:
    """``[S]`` how many GPUs of a job with this per-GPU demand each server can host now."""
    by_cpu = jnp.where(cpu_per_gpu > 0, jnp.floor(free[:, 1] / jnp.maximum(cpu_per_gpu, EPS) + EPS), 1e9)
    by_mem = jnp.where(mem_per_gpu > 0, jnp.floor(free[:, 2] / jnp.maximum(mem_per_gpu, EPS) + EPS), 1e9)
    return jnp.maximum(jnp.minimum(free[:, 0], jnp.minimum(by_cpu, by_mem)), 0.0).astype(jnp.int32)


def fill_plan(free: jax.Array, gpus, cpu_per_gpu: jax.Array, mem_per_gpu: jax.Array,
              consolidate) -> tuple[jax.Array, jax.Array]:
    """Synergy's placement: ``take[S]`` GPUs per server for a job of ``gpus`` GPUs, and whether it fits.

    If ``consolidate`` (Synergy: jobs of more than one GPU) and some server can host the whole job, use the one
    with the fewest free GPUs (lowest index on ties). Otherwise take GPUs from servers in ascending order of free
    GPUs, as many as each can host with the demand, until the job is complete (this is what Synergy's heap of
    servers keyed by free GPUs does). ``cpu_per_gpu``/``mem_per_gpu`` are per server (``[S]``).
    """
    s = free.shape[0]
    k = gpus_that_fit(free, cpu_per_gpu, mem_per_gpu)
    idx = jnp.arange(s, dtype=jnp.int32)
    nfree = free[:, 0].astype(jnp.int32)
    single = k >= gpus
    best = jnp.argmin(jnp.where(single, nfree * s + idx, INT_MAX))
    use_single = jnp.asarray(consolidate) & single.any()
    sk = jnp.sort(jnp.where(k > 0, nfree * s + idx, INT_MAX))
    valid = sk != INT_MAX
    order = jnp.where(valid, sk % s, 0)
    ks = jnp.where(valid, k[order], 0)
    before = jnp.cumsum(ks) - ks
    take_sorted = jnp.clip(gpus - before, 0, ks)
    spread = jnp.zeros(s, jnp.int32).at[order].add(take_sorted.astype(jnp.int32))
    take = jnp.where(use_single, (idx == best).astype(jnp.int32) * gpus, spread)
    ok = use_single | (ks.sum() >= gpus)
    return take.astype(jnp.int32), ok


def top_up(cl: Cluster, occ: Occupancy, target_cpu: jax.Array, target_mem: jax.Array,
           rank: jax.Array) -> Occupancy:
    """Grow the CPU/memory attached to held GPUs towards per-GPU targets (``[S, G]``) from each server's free
    CPU/memory; GPUs whose owner has a lower ``rank[C]`` go first (ties by position). Never shrinks an
    allocation and never exceeds capacity."""
    c = rank.shape[0]
    o = occ.owner
    gsz = o.shape[1]
    held = o >= 0
    r = jnp.where(held, rank[jnp.clip(o, 0, c - 1)], INT_MAX // (2 * gsz))
    ck = jnp.sort(r * gsz + jnp.arange(gsz, dtype=jnp.int32)[None, :], axis=1) % gsz
    free = server_free(cl, occ)
    rows = jnp.arange(o.shape[0])[:, None]
    out = []
    for arr, tgt, f in ((occ.cpu, target_cpu, free[:, 1]), (occ.mem, target_mem, free[:, 2])):
        want = jnp.where(held, jnp.maximum(tgt - arr, 0.0), 0.0)
        ws = jnp.take_along_axis(want, ck, axis=1)
        before = jnp.cumsum(ws, axis=1) - ws
        grant_sorted = jnp.clip(jnp.maximum(f, 0.0)[:, None] - before, 0.0, ws)
        out.append(arr + jnp.zeros_like(arr).at[rows, ck].set(grant_sorted))
    return occ._replace(cpu=out[0], mem=out[1])


# ---------------------------------------------------------------------------------------------- speed


class SpeedModel(NamedTuple):
    """Normalised throughput ``tput[model, cpu_level, mem_level]`` (1.0 = fair share) and placement penalties,
    as device arrays (a pytree, so it is an argument of jitted code, not a baked-in constant). Build it with
    :func:`speed_model`, which validates.

    ``speed = tput(cpu/GPU, mem/GPU) * (penalty[model] if the job spans > 1 server else 1)``.
    """

    tput: jax.Array  # [M, nc, nm]
    cpu_levels: jax.Array  # [nc]
    mem_levels: jax.Array  # [nm]
    penalty: jax.Array  # [M]

    @property
    def num_models(self) -> int:
        return int(self.tput.shape[0])


def speed_model(tput, cpu_levels, mem_levels, penalty) -> SpeedModel:
    """Validate host arrays and return a :class:`SpeedModel`."""
    t = np.asarray(tput, np.float32)
    c, m = np.asarray(cpu_levels, np.float32), np.asarray(mem_levels, np.float32)
    p = np.asarray(penalty, np.float32)
    if t.ndim != 3 or t.shape[1:] != (c.size, m.size):
        raise ValueError(f"tput must be [models, {c.size}, {m.size}], got {t.shape}")
    if c.size < 2 or m.size < 2 or np.any(np.diff(c) <= 0) or np.any(np.diff(m) <= 0):
        raise ValueError("cpu_levels and mem_levels need >= 2 strictly increasing values")
    if p.shape != (t.shape[0],) or np.any(p <= 0) or np.any(p > 1):
        raise ValueError("penalty needs one value in (0, 1] per model")
    if np.any(t <= 0) or not np.all(np.isfinite(t)):
        raise ValueError("throughputs must be positive and finite")
    return SpeedModel(jnp.asarray(t), jnp.asarray(c), jnp.asarray(m), jnp.asarray(p))


def _interp_axis(levels: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    n = levels.shape[0]
    i = jnp.clip(jnp.searchsorted(levels, x, side="right") - 1, 0, n - 2)
    lo, hi = levels[i], levels[i + 1]
    return i, jnp.clip((x - lo) / (hi - lo), 0.0, 1.0)


def profile_tput(sm: SpeedModel, model: jax.Array, cpu_per_gpu: jax.Array, mem_per_gpu: jax.Array) -> jax.Array:
    """Bilinear interpolation of the throughput grid, clamped at its edges."""
    tput = sm.tput
    i, a = _interp_axis(sm.cpu_levels, cpu_per_gpu)
    j, b = _interp_axis(sm.mem_levels, mem_per_gpu)
    t00, t01 = tput[model, i, j], tput[model, i, j + 1]
    t10, t11 = tput[model, i + 1, j], tput[model, i + 1, j + 1]
    return (1 - a) * ((1 - b) * t00 + b * t01) + a * ((1 - b) * t10 + b * t11)


def job_speed(sm: SpeedModel, model: jax.Array, usage: JobUsage) -> jax.Array:
    """Progress rate (work-seconds per second) of every slot; 0 where the slot holds no GPU."""
    g = jnp.maximum(usage.gpus, 1).astype(jnp.float32)
    t = profile_tput(sm, model, usage.cpu / g, usage.mem / g)
    pen = jnp.where(usage.servers > 1, sm.penalty[model], 1.0)
    return jnp.where(usage.gpus > 0, t * pen, 0.0)


# ---------------------------------------------------------------------------------------------- jobs, state


class JobTable(NamedTuple):
    """Jobs sorted by arrival (``[N]``); rows ``>= num_jobs`` are padding and never arrive."""

    arrival: jax.Array  # float32 s
    work: jax.Array  # float32 s at speed 1
    gpus: jax.Array  # int32
    model: jax.Array  # int32
    num_jobs: jax.Array  # int32 scalar


class SimStats(NamedTuple):
    rounds: jax.Array
    gpu_s: jax.Array  # allocated GPU-seconds
    cpu_s: jax.Array  # allocated CPU-core-seconds
    mem_s: jax.Array  # allocated GB-seconds
    placements: jax.Array
    preemptions: jax.Array
    admit_capped: jax.Array  # rounds in which arrivals had to wait for a free slot or the admit cap
    max_overcommit: jax.Array  # max over rounds of overcommit(); must stay <= ~0


class SimState(NamedTuple):
    t: jax.Array  # start of the current round (s)
    occ: Occupancy
    slot_job: jax.Array  # [C] int32 job index or -1
    status: jax.Array  # [C] int32 EMPTY / PENDING / RUNNING
    remaining: jax.Array  # [C] float32 work left
    attained: jax.Array  # [C] float32 GPU-seconds of service received
    run_s: jax.Array  # [C] float32 wall seconds run
    wait_since: jax.Array  # [C] float32 when the job last became pending
    next_job: jax.Array  # int32 next trace index to admit
    finish: jax.Array  # [N] float32 completion time, -1 until done
    start: jax.Array  # [N] float32 first start time, -1 until started
    stats: SimStats


@dataclass(frozen=True)
class SimConfig:
    """Static simulation parameters."""

    round_s: float = 300.0
    num_slots: int = 0  # C; 0 = one slot per job (exact arrival-order tie-breaks)
    admit_per_round: int = 256
    max_rounds: int = 200_000
    # checkpoint-restore cost of a preemption (s of fair-share work added to a job stopped at a round's schedule
    # and not restarted in it; a job stopped and restarted within the round moves nothing and pays nothing)
    restore_s: float = 0.0

    def __post_init__(self) -> None:
        if self.round_s <= 0:
            raise ValueError("round_s must be > 0")
        if self.restore_s < 0:
            raise ValueError("restore_s must be >= 0")
        if self.num_slots < 0 or self.admit_per_round < 1 or self.max_rounds < 1:
            raise ValueError("num_slots >= 0, admit_per_round >= 1, max_rounds >= 1")


def make_jobs(arrival, work, gpus, model, num_jobs=None, pad_to: int | None = None) -> JobTable:
    """Validate and pack host arrays (sorted by arrival, positive work and GPUs) into a :class:`JobTable`."""
    arrival = np.asarray(arrival, np.float64)
    work, gpus, model = np.asarray(work, np.float64), np.asarray(gpus), np.asarray(model)
    n = arrival.size
    if not (work.size == gpus.size == model.size == n):
        raise ValueError("arrival, work, gpus and model need the same length")
    if n and (np.any(np.diff(arrival) < 0) or arrival[0] < 0):
        raise ValueError("arrivals must be non-negative and sorted")
    if np.any(work <= 0) or np.any(gpus < 1) or not np.all(np.isfinite(work)):
        raise ValueError("every job needs work > 0 and >= 1 GPU")
    size = pad_to or n
    if size < n:
        raise ValueError(f"pad_to={size} < {n} jobs")

    def pad(x, v, dt):
        out = np.full(size, v, dt)
        out[:n] = x
        return out

    return JobTable(jnp.asarray(pad(arrival, np.inf, np.float32)), jnp.asarray(pad(work, 1.0, np.float32)),
                    jnp.asarray(pad(gpus, 1, np.int32)), jnp.asarray(pad(model, 0, np.int32)),
                    jnp.asarray(n if num_jobs is None else num_jobs, jnp.int32))


def init_state(cl: Cluster, jobs: JobTable, cfg: SimConfig) -> SimState:
    n = jobs.arrival.shape[0]
    c = cfg.num_slots or n
    zc = jnp.zeros(c, jnp.float32)
    z = jnp.zeros((), jnp.float32)
    zi = jnp.zeros((), jnp.int32)
    return SimState(
        t=z, occ=empty_occupancy(cl), slot_job=jnp.full(c, -1, jnp.int32), status=jnp.zeros(c, jnp.int32),
        remaining=zc, attained=zc, run_s=zc, wait_since=zc, next_job=zi,
        finish=jnp.full(n, -1.0, jnp.float32), start=jnp.full(n, -1.0, jnp.float32),
        stats=SimStats(zi, z, z, z, zi, zi, zi, jnp.asarray(-jnp.inf, jnp.float32)))


def slot_attr(state: SimState, jobs: JobTable, name: str) -> jax.Array:
    """A job attribute (``gpus``, ``model``, ``arrival``, ``work``) gathered per slot (padding row for empty)."""
    return getattr(jobs, name)[jnp.clip(state.slot_job, 0, jobs.arrival.shape[0] - 1)]


def admit(state: SimState, jobs: JobTable, cfg: SimConfig) -> SimState:
    """Move jobs with ``arrival <= t`` from the trace into free slots, in arrival order."""
    n = jobs.arrival.shape[0]
    c = state.status.shape[0]
    a = min(cfg.admit_per_round, n)
    idx = state.next_job + jnp.arange(a, dtype=jnp.int32)
    arr = jobs.arrival[jnp.clip(idx, 0, n - 1)]
    eligible = (idx < jobs.num_jobs) & (arr <= state.t)
    n_elig = eligible.sum()
    if c == n:  # one slot per job: job i lives in slot i
        slots = jnp.where(eligible, idx, c)
        n_take = n_elig
    else:
        empty = state.status == EMPTY
        n_take = jnp.minimum(n_elig, empty.sum())
        free_slots = jnp.nonzero(empty, size=a, fill_value=c)[0]
        slots = jnp.where(jnp.arange(a) < n_take, free_slots, c)
    slot_job = state.slot_job.at[slots].set(idx, mode="drop")
    status = state.status.at[slots].set(PENDING, mode="drop")
    remaining = state.remaining.at[slots].set(jobs.work[jnp.clip(idx, 0, n - 1)], mode="drop")
    zeros = jnp.zeros(a, jnp.float32)
    attained = state.attained.at[slots].set(zeros, mode="drop")
    run_s = state.run_s.at[slots].set(zeros, mode="drop")
    wait_since = state.wait_since.at[slots].set(arr, mode="drop")
    more_waiting = (state.next_job + n_take < jobs.num_jobs) & (
        jobs.arrival[jnp.clip(state.next_job + n_take, 0, n - 1)] <= state.t)
    stats = state.stats._replace(admit_capped=state.stats.admit_capped + more_waiting.astype(jnp.int32))
    return state._replace(slot_job=slot_job, status=status, remaining=remaining, attained=attained, run_s=run_s,
                          wait_since=wait_since, next_job=state.next_job + n_take.astype(jnp.int32), stats=stats)


def place(state: SimState, jobs: JobTable, slot, take: jax.Array, cpu_per_gpu: jax.Array,
          mem_per_gpu: jax.Array, ok) -> SimState:
    """If ``ok``, start pending ``slot`` on the planned GPUs (``take[S]``) with per-server CPU/memory per GPU."""
    occ = assign(state.occ, jnp.where(ok, slot, FREE), jnp.where(ok, take, 0), cpu_per_gpu, mem_per_gpu)
    job = state.slot_job[slot]
    first = ok & (state.start[job] < 0)
    return state._replace(
        occ=occ,
        status=state.status.at[slot].set(jnp.where(ok, RUNNING, state.status[slot])),
        start=state.start.at[job].set(jnp.where(first, state.t, state.start[job])),
        stats=state.stats._replace(placements=state.stats.placements + ok.astype(jnp.int32)))


def preempt(state: SimState, slot_mask: jax.Array) -> SimState:
    """Stop the running slots in ``slot_mask`` (they keep their progress and become pending). A job stopped and
    restarted within the same round is not counted as preempted (:func:`sim_round` counts net stops)."""
    hit = slot_mask & (state.status == RUNNING)
    return state._replace(
        occ=release(state.occ, hit), status=jnp.where(hit, PENDING, state.status),
        wait_since=jnp.where(hit, state.t, state.wait_since))


def charge_restore(state: SimState, stopped: jax.Array, restore_s: float) -> SimState:
    """Count the net preemptions ``stopped`` (slots running before a round's schedule and pending after it) and
    charge each ``restore_s`` seconds of work: the checkpoint-restore it pays when it runs again."""
    return state._replace(
        remaining=state.remaining + jnp.where(stopped, restore_s, 0.0),
        stats=state.stats._replace(preemptions=state.stats.preemptions + stopped.sum().astype(jnp.int32)))


def advance(cl: Cluster, sm: SpeedModel, state: SimState, jobs: JobTable, round_s: float) -> SimState:
    """Run every running slot for one round at its current speed, complete and release finished jobs."""
    c = state.status.shape[0]
    usage = job_usage(state.occ, c)
    running = state.status == RUNNING
    speed = jnp.where(running, job_speed(sm, slot_attr(state, jobs, "model"), usage), 0.0)
    progress = speed * round_s
    done = running & (state.remaining <= progress + 1e-3)
    dt = jnp.where(done, state.remaining / jnp.maximum(speed, 1e-9), jnp.where(running, round_s, 0.0))
    dt = jnp.clip(dt, 0.0, round_s)
    finish_t = state.t + dt
    job = jnp.where(done, state.slot_job, jobs.arrival.shape[0])
    g = usage.gpus.astype(jnp.float32)
    stats = state.stats._replace(
        rounds=state.stats.rounds + 1,
        gpu_s=state.stats.gpu_s + (g * dt).sum(), cpu_s=state.stats.cpu_s + (usage.cpu * dt).sum(),
        mem_s=state.stats.mem_s + (usage.mem * dt).sum(),
        max_overcommit=jnp.maximum(state.stats.max_overcommit, overcommit(cl, state.occ)))
    return state._replace(
        occ=release(state.occ, done),
        slot_job=jnp.where(done, -1, state.slot_job),
        status=jnp.where(done, EMPTY, state.status),
        remaining=jnp.where(done, 0.0, jnp.maximum(state.remaining - progress, 0.0)),
        attained=state.attained + g * dt, run_s=state.run_s + dt,
        finish=state.finish.at[job].set(finish_t, mode="drop"),
        stats=stats)


def jump_idle(state: SimState, jobs: JobTable, round_s: float) -> SimState:
    """With no active job, skip to the first round boundary at or after the next arrival."""
    n = jobs.arrival.shape[0]
    idle = ~(state.status != EMPTY).any() & (state.next_job < jobs.num_jobs)
    nxt = jobs.arrival[jnp.clip(state.next_job, 0, n - 1)]
    t_jump = jnp.ceil(nxt / round_s) * round_s
    return state._replace(t=jnp.where(idle, jnp.maximum(state.t, t_jump), state.t))


def is_done(state: SimState, jobs: JobTable) -> jax.Array:
    return (state.next_job >= jobs.num_jobs) & ~(state.status != EMPTY).any()


ScheduleFn = Callable[[SimState], SimState]


def rounds_until_event(state: SimState, jobs: JobTable, round_s: float, speed: jax.Array) -> jax.Array:
    """How many rounds can run with the allocation unchanged: one if a job is pending, else up to and including
    the round in which the first running job completes or the next job arrives (at least 1)."""
    n = jobs.arrival.shape[0]
    running = state.status == RUNNING
    pending = (state.status == PENDING).any()
    fin = jnp.where(running & (speed > 0), state.remaining / jnp.maximum(speed, 1e-9), jnp.inf).min()
    nxt = jnp.where(state.next_job < jobs.num_jobs, jobs.arrival[jnp.clip(state.next_job, 0, n - 1)] - state.t,
                    jnp.inf)
    k = jnp.ceil(jnp.minimum(fin, nxt) / round_s - 1e-6)
    k = jnp.where(jnp.isfinite(k), k, 1.0)
    return jnp.where(pending, 1.0, jnp.clip(k, 1.0, 1e6))


def sim_round(cl: Cluster, sm: SpeedModel, jobs: JobTable, cfg: SimConfig, schedule: ScheduleFn,
              state: SimState) -> SimState:
    """One lease round: jump idle gaps, admit, schedule, run, release; then advance the clock.

    With no pending job the allocation cannot change until the next arrival or completion, so those rounds run
    in one step (same result, fewer iterations).
    """
    state = jump_idle(state, jobs, cfg.round_s)
    state = admit(state, jobs, cfg)
    was_running = state.status == RUNNING
    state = schedule(state)
    stopped = was_running & (state.status == PENDING)
    state = charge_restore(state, stopped, cfg.restore_s)
    c = state.status.shape[0]
    speed = jnp.where(state.status == RUNNING,
                      job_speed(sm, slot_attr(state, jobs, "model"), job_usage(state.occ, c)), 0.0)
    k = rounds_until_event(state, jobs, cfg.round_s, speed)
    state = advance(cl, sm, state, jobs, cfg.round_s * k)
    stats = state.stats._replace(rounds=state.stats.rounds + k.astype(jnp.int32) - 1)
    return state._replace(t=state.t + cfg.round_s * k, stats=stats)


def simulate(cl: Cluster, sm: SpeedModel, jobs: JobTable, cfg: SimConfig, schedule: ScheduleFn) -> SimState:
    """Run rounds until every job of ``jobs`` has finished (or ``cfg.max_rounds``). Jittable and vmappable."""
    state = init_state(cl, jobs, cfg)

    def cond(s):
        return ~is_done(s, jobs) & (s.stats.rounds < cfg.max_rounds)

    return jax.lax.while_loop(cond, lambda s: sim_round(cl, sm, jobs, cfg, schedule, s), state)


# ---------------------------------------------------------------------------------------------- priorities


def slot_bits(num_slots: int) -> int:
    return max(1, int(np.ceil(np.log2(max(num_slots, 2)))))


def float_key(x: jax.Array, bits: int) -> jax.Array:
    """Monotone map of float32 values to non-negative ints of ``bits`` bits (keeps sign, exponent and the top
    ``bits - 9`` mantissa bits, i.e. a relative resolution of ``2**-(bits - 9)``)."""
    i = jax.lax.bitcast_convert_type(jnp.asarray(x, jnp.float32) + 0.0, jnp.int32)  # -0.0 -> +0.0
    mono = jnp.where(i >= 0, i, i ^ INT_MAX)  # signed order of floats
    return ((mono >> (32 - bits)) + (1 << (bits - 1))).astype(jnp.int32)


def int_key(x: jax.Array, bits: int) -> jax.Array:
    """Clip non-negative ints into ``bits`` bits."""
    return jnp.clip(jnp.asarray(x, jnp.int32), 0, (1 << bits) - 1)


def pack_keys(prio: jax.Array, eligible: jax.Array) -> jax.Array:
    """``prio`` (from :func:`float_key`/:func:`int_key` with ``31 - slot_bits(C)`` bits) packed with the slot
    index; ineligible slots get ``INT_MAX`` so they sort last."""
    c = prio.shape[0]
    b = slot_bits(c)
    return jnp.where(eligible, (prio << b) | jnp.arange(c, dtype=jnp.int32), INT_MAX)


def priority_order(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Slots sorted by packed key, and whether each position holds an eligible slot."""
    c = keys.shape[0]
    s = jnp.sort(keys)
    return (s & ((1 << slot_bits(c)) - 1)).astype(jnp.int32), s != INT_MAX


def prio_bits(num_slots: int) -> int:
    return 31 - slot_bits(num_slots)


# ---------------------------------------------------------------------------------------------- results


@dataclass
class SimResult:
    """Host-side summary of one finished simulation."""

    jct: np.ndarray  # per job, s
    queueing: np.ndarray  # first start - arrival, s
    makespan: float
    finished: bool
    util: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)


def summarize(cl: Cluster, jobs: JobTable, state: SimState) -> SimResult:
    """JCT, queueing delay, makespan and utilisation of one (non-batched) final state."""
    n = int(jobs.num_jobs)
    arr = np.asarray(jobs.arrival)[:n]
    fin = np.asarray(state.finish)[:n]
    st = np.asarray(state.start)[:n]
    finished = bool(np.all(fin >= 0))
    span = float(fin.max() - arr.min()) if finished and n else float("nan")
    cap = np.asarray(cl.cap).sum(0)
    busy = max(span, 1e-9)
    s = state.stats
    return SimResult(
        jct=fin - arr, queueing=st - arr, makespan=span, finished=finished,
        util={"gpu": float(s.gpu_s) / (cap[0] * busy), "cpu": float(s.cpu_s) / (cap[1] * busy),
              "mem": float(s.mem_s) / (cap[2] * busy)},
        counters={"rounds": int(s.rounds), "placements": int(s.placements), "preemptions": int(s.preemptions),
                  "admit_capped": int(s.admit_capped), "max_overcommit": float(s.max_overcommit)})


__all__ = [
    "ABSENT", "EMPTY", "FREE", "PENDING", "RUNNING", "Cluster", "ClusterSpec", "JobTable", "JobUsage",
    "Occupancy", "SimConfig", "SimResult", "SimState", "SimStats", "SpeedModel", "admit", "advance", "assign",
    "charge_restore", "empty_occupancy", "fill_plan", "float_key", "gpus_that_fit", "init_state", "int_key",
    "is_done", "job_speed", "job_usage", "jump_idle", "make_jobs", "overcommit", "pack_keys", "place", "preempt",
    "prio_bits", "priority_order", "profile_tput", "release", "rounds_until_event", "server_free", "server_used",
    "sim_round", "simulate", "slot_attr", "slot_bits", "speed_model", "summarize", "top_up",
]
