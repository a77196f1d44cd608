"""Training numerics: real gradients of a real model on real data, aggregated the way each protocol does.

``make_train(setup, exchange) -> train(seeds)`` builds one jitted function that trains ``N`` data-parallel
workers for ``T`` iterations with the whole loop in ``lax.scan`` (an outer scan over evaluation blocks, an inner
scan over iterations) and ``vmap`` over seeds. Per iteration every worker computes the gradient of its own
mini-batch (its shard of the training set) at its own parameters; the protocol's aggregation turns the ``N``
gradients into the update each worker applies (worker-local momentum SGD on the applied update:
``v = mu v + delta``, ``theta -= lr v``). Test accuracy of worker 0 is recorded every ``eval_every`` iterations.

Aggregation (what is summed, and where 8-bit rounding happens; ``RT`` = sketch round trip of one piece):

* ``exact``: the fp32 mean (PS, ring all-reduce, BML; Canary without the sketch).
* ``ring8``: Horovod-style ring with the sketch: chunk ``j`` starts at worker ``j`` and is re-sketched at every
  hop (``p <- RT(p) + g_next``), the finished chunk is sketched once more for the all-gather.
* ``ps8``: BytePS-style: every worker's shard pieces are sketched (push), the server sums the decoded pieces
  and sketches the sum (pull).
* ``tree``: Canary's per-piece reduce toward the owner along BCube levels; a sender's partial is sketched
  (``RT``), a receiving holder adds the decoded partials to its own fp32 partial; the owner's sum is sketched for
  the broadcast. Without the sketch it is the exact sum.
* ``ako``: every worker applies its own gradient at once and partition ``t mod p`` of its accumulated gradient
  reaches each peer when the schedule says (``visible``); nothing is lost or counted twice.

For Canary with staleness ``s > 0`` the aggregated piece ``(t, q)`` is applied by worker ``w`` at the iteration
``visible[t, w, q]`` the discrete-event schedule gives (between ``t + 1`` and ``t + 1 + s``); updates are
scaled by ``1 / N`` in every protocol, so each gradient enters every replica exactly once with weight ``1 / N``.

``local_first`` ([ours], the async variant of issue #24): worker ``w`` applies its *own* fp32 gradient at once
(at ``t + 1``, like Ako) and, when the aggregated piece ``(t, q)`` becomes visible, only the rest of it: the
aggregate minus its own exact contribution (so the sketch error of the aggregate stays in, and only remote pieces
are stale). Each gradient still enters every replica exactly once with weight ``1 / N``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.flatten_util import ravel_pytree

from mlsys_repro.common.collectives.bcube import BCube
from mlsys_repro.common.models.data import ImageData
from mlsys_repro.common.models.small import accuracy, cross_entropy, make_model, pure
from mlsys_repro.common.quant import sketch
from mlsys_repro.papers.canary.compute_model import Layout
from mlsys_repro.papers.canary.protocols import piece_tree

KINDS = ("exact", "ring8", "ps8", "tree", "ako")


@dataclass(frozen=True)
class Setup:
    """Model, data and optimiser shared by every policy of one experiment."""

    model: str
    data: ImageData
    layout: Layout
    num_workers: int
    batch: int
    iterations: int
    eval_every: int
    lr: float
    momentum: float

    def __post_init__(self) -> None:
        if self.iterations % self.eval_every:
            raise ValueError(f"iterations ({self.iterations}) must be a multiple of eval_every ({self.eval_every})")
        if self.batch < 1 or self.num_workers < 1:
            raise ValueError("batch and num_workers must be >= 1")


@dataclass(frozen=True)
class Exchange:
    """How one policy aggregates (see the module docstring)."""

    kind: str
    sketch: bool = False
    bcube: tuple[int, int] = (3, 1)  # (n, k) of the tree; k = 0 is a single switch
    visible: np.ndarray | None = field(default=None, repr=False)  # [T, N, Q] canary / [T, N_s, N_r] ako
    ako_partitions: int = 1
    local_first: bool = False  # tree with a schedule: own gradient at once, only remote pieces stale

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"exchange kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "ako" and self.visible is None:
            raise ValueError("ako needs a visibility schedule")
        if self.local_first and (self.kind != "tree" or self.visible is None):
            raise ValueError("local_first needs Canary's tree with a visibility schedule (staleness > 0)")

    def key(self) -> tuple:
        """Identity of the numerics: equal keys train identically (used to share runs between policies)."""
        vis = None if self.visible is None else hash(np.ascontiguousarray(self.visible).tobytes())
        return (self.kind, self.sketch, self.bcube if self.kind == "tree" else None, vis, self.ako_partitions,
                self.local_first)


def _rt_rows(x: jax.Array, enabled: bool) -> jax.Array:
    """Sketch round trip of every ``[L]`` row of ``[..., P, L]``, one piece per row, for rows whose padding repeats
    a valid element of the same row: the values of :func:`mlsys_repro.common.quant.sketch.roundtrip_pieces` with
    the padding masked out (the row min/max are the same) without the mask, which costs ~6x the time on CPU.
    Padding slots of the output repeat that element's round trip, so the rows stay so padded."""
    if not enabled:
        return x
    lo, hi = jnp.min(x, axis=-1), jnp.max(x, axis=-1)
    scale = (hi - lo) / sketch.LEVELS
    safe = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round((x - lo[..., None]) / safe[..., None]), 0, sketch.LEVELS)
    out = lo[..., None] + q * scale[..., None]
    return jnp.where((jnp.isfinite(lo) & jnp.isfinite(hi))[..., None], out, jnp.nan)


def _rt_flat(x: jax.Array, piece: int, enabled: bool) -> jax.Array:
    """Sketch round trip of ``[..., M]`` cut into pieces of ``piece`` elements (the last one shorter: padded with
    its last element, :func:`_rt_rows`)."""
    if not enabled:
        return x
    m = x.shape[-1]
    p = -(-m // piece)
    xp = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, p * piece - m)], mode="edge").reshape((*x.shape[:-1], p, piece))
    return _rt_rows(xp, True).reshape((*x.shape[:-1], -1))[..., :m]


def tree_stages(n: int, k: int, num_pieces: int, num_workers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Canary's per-piece reduce tree (:func:`mlsys_repro.papers.canary.protocols.piece_tree`) as compact gather
    indices.

    Stage ``j`` maps the partials held before it (``[H_j, Q]`` slots; ``H_0 = N``, every server) to the partials
    held after it: ``(keep [H_{j+1}, Q], send [n - 1, H_{j+1}, Q])``, slot indices into the previous holders, so
    ``after[r] = before[keep[r]] + sum_i RT(before[send[i, r]])``. Only the ``N - 1`` partials that cross the
    network are sketched; after ``k + 1`` stages the single holder is the piece's owner.
    """
    bc = BCube(n, k)
    if bc.num_servers != num_workers:
        raise ValueError(f"BCube({n}, {k}) has {bc.num_servers} servers, not {num_workers}")
    owner, _, send_stage, target = piece_tree(bc, num_pieces)
    holders = [list(range(num_workers)) for _ in range(num_pieces)]  # server in each slot, per piece
    stages = []
    for j in range(bc.num_levels):
        keep_cols, send_cols, new_holders = [], [], []
        for q in range(num_pieces):
            slot_of = {h: i for i, h in enumerate(holders[q])}
            recv = [h for h in holders[q] if send_stage[q][h] > j]
            senders = {r: [h for h in holders[q] if send_stage[q][h] == j and target[q][h] == r] for r in recv}
            if any(len(v) != bc.n - 1 for v in senders.values()):
                raise AssertionError("a receiving holder must get exactly n - 1 partials per stage")
            keep_cols.append([slot_of[r] for r in recv])
            send_cols.append([[slot_of[h] for h in senders[r]] for r in recv])
            new_holders.append(recv)
        keep = np.asarray(keep_cols).T  # [H_{j+1}, Q]
        send = np.transpose(np.asarray(send_cols), (2, 1, 0))  # [n-1, H_{j+1}, Q]
        stages.append((keep, send))
        holders = new_holders
    if [h[0] for h in holders] != list(owner):
        raise AssertionError("the tree must end at each piece's owner")
    return stages


def _sum0(x: jax.Array) -> jax.Array:
    """Sum over the leading axis as chained adds (XLA on CPU is slow at reducing a major axis)."""
    out = x[0]
    for i in range(1, x.shape[0]):
        out = out + x[i]
    return out


def aggregate(g: jax.Array, ex: Exchange, layout: Layout, gidx: jax.Array | None = None,
              flat_pos: jax.Array | None = None) -> jax.Array:
    """Sum over workers of ``g [N, D]`` as the protocol computes it; returns ``[D]``.

    ``gidx`` / ``flat_pos`` (:meth:`Layout.gather_index`, :meth:`Layout.flat_position`) may be passed in as traced
    arrays so they are not baked into the compiled program as constants.
    """
    gidx = layout.gather_index() if gidx is None else gidx
    flat_pos = layout.flat_position() if flat_pos is None else flat_pos
    n_w, d = g.shape
    piece = layout.piece_elems
    if ex.kind == "exact":
        return _sum0(g)
    if ex.kind in ("ring8", "ps8"):
        c = -(-d // n_w)
        gc = jnp.pad(g, ((0, 0), (0, c * n_w - d))).reshape(n_w, n_w, c)  # [worker, chunk, elems]
        if ex.kind == "ps8":
            agg = _rt_flat(_sum0(_rt_flat(gc, piece, ex.sketch)), piece, ex.sketch)
        else:
            j = np.arange(n_w)
            part = gc[j, j]
            for h in range(1, n_w):
                part = _rt_flat(part, piece, ex.sketch) + gc[(j + h) % n_w, j]
            agg = _rt_flat(part, piece, ex.sketch)
        return agg.reshape(-1)[:d]
    if ex.kind == "tree":
        # [N, Q, L]; a padding slot repeats its piece's first element, at every holder and stage (sums and round
        # trips keep it so), which is what lets _rt_rows skip the mask
        x = g[:, jnp.where(gidx < d, gidx, gidx[:, :1])]
        qi = np.arange(layout.num_pieces)
        for keep, send in tree_stages(*ex.bcube, layout.num_pieces, n_w):
            nxt = x[keep, qi]
            moved = _rt_rows(x[send, qi], ex.sketch)  # [n-1, H, Q, L]: only what crosses the network
            x = nxt + _sum0(moved)
        agg = _rt_rows(x[0], ex.sketch)  # the owner's sum, sketched once for the broadcast
        return agg.reshape(-1)[flat_pos]
    raise ValueError(f"aggregate() does not handle {ex.kind!r}")


def _masks(ex: Exchange, T: int, n_w: int, layout: Layout) -> tuple[np.ndarray, int]:
    """Per-iteration arrival masks from a visibility schedule, and the delay window they need."""
    vis = np.asarray(ex.visible)
    t_idx = np.arange(T)
    if ex.kind == "ako":
        off = vis - t_idx[:, None, None]
        eye = np.eye(n_w, dtype=bool)[None]
        off = np.where(eye, 1, off)
        window = int(max(1, off.max()))
        m = np.zeros((T + 1, n_w, window, n_w), bool)  # [t, receiver, age, sender]
        for age in range(window):
            src = t_idx - age
            ok = src >= 0
            hit = (vis[src[ok]] == (t_idx[ok] + 1)[:, None, None]) & ~eye  # [.., s, r]
            m[t_idx[ok] + 1, :, age, :] = np.swapaxes(hit, 1, 2)
        return m, window
    off = vis - t_idx[:, None, None]
    if off.min() < 1:
        raise ValueError("an aggregated piece became visible before the iteration that produced it ended")
    window = int(off.max())
    m = np.zeros((T + 1, n_w, window, layout.num_pieces), bool)  # [t, worker, age, piece]
    for age in range(window):
        src = t_idx - age
        ok = src >= 0
        m[t_idx[ok] + 1, :, age, :] = vis[src[ok]] == (t_idx[ok] + 1)[:, None, None]
    return m, window


def make_train(setup: Setup, ex: Exchange):
    """``train(seeds int[S]) -> {"acc": [S, T / eval_every + 1], "loss": [S, T / eval_every]}``.

    Synchronous exchanges keep one replica (all workers hold the same parameters); the exact mean is then the
    gradient of the summed per-worker losses, computed in one batched backward pass. So does Canary when every
    worker sees every piece at the same iteration (the replicas cannot differ then); otherwise each worker has
    its own replica.
    """
    lay, data = setup.layout, setup.data
    n_w, B, T, E = setup.num_workers, setup.batch, setup.iterations, setup.eval_every
    apply, p0 = pure(make_model(setup.model, data.in_shape, data.num_classes, seed=0))
    flat0, unravel = ravel_pytree(p0)
    d = int(flat0.size)
    if d != lay.size:
        raise ValueError(f"layout covers {lay.size} parameters, model has {d}")
    gidx = lay.gather_index()
    flat_pos = lay.flat_position()
    n_train = data.x_train.shape[0]
    shard = n_train // n_w
    if shard < B:
        raise ValueError(f"{n_train} training examples cannot give {n_w} workers a batch of {B}")
    asynchronous = ex.visible is not None
    masks, window = _masks(ex, T, n_w, lay) if asynchronous else (None, 0)
    # Canary with the same visibility at every worker keeps every replica identical: one replica suffices
    shared = ex.kind == "tree" and asynchronous and not ex.local_first and bool(np.all(masks == masks[:, :1]))
    replicas = asynchronous and not shared
    if shared:
        masks = masks[:, 0]  # [T + 1, age, Q]
    if ex.kind == "ako":
        p = ex.ako_partitions
        m = -(-d // p)
        part_rows = np.mod(np.arange(T)[:, None] - np.arange(window)[None, :], p)

    def to_tree(theta):
        return unravel(theta)

    def loss_fn(theta, x, y):
        return cross_entropy(apply(to_tree(theta), x), y)

    def summed_loss(theta, x, y):  # sum over workers of each worker's mean loss
        losses = jax.vmap(lambda a, b: loss_fn(theta, a, b))(x, y)
        return losses.sum(), losses.mean()

    per_replica_grad = jax.vmap(jax.value_and_grad(loss_fn))
    shared_grad = jax.vmap(jax.value_and_grad(loss_fn), in_axes=(None, 0, 0))
    summed_grad = jax.grad(summed_loss, has_aux=True)

    def init(seed, flat_init):
        key = jax.random.key(seed)
        order = jax.random.permutation(key, n_train)[: shard * n_w].reshape(n_w, shard)
        theta = flat_init
        if replicas:
            theta = jnp.broadcast_to(theta, (n_w, d))
        st = {"theta": theta, "v": jnp.zeros_like(theta), "order": order}
        if ex.kind == "ako":
            st["acc"] = jnp.zeros((n_w, p * m))
            st["buf"] = jnp.zeros((window, n_w, m))
        elif asynchronous:
            st["buf"] = jnp.zeros((window, lay.num_pieces, lay.piece_elems))
            if ex.local_first:
                st["own"] = jnp.zeros((window, n_w, lay.num_pieces, lay.piece_elems))
        return st

    def step(c, st, xs):
        """One iteration; ``c`` holds the data, masks and index arrays (jit arguments, not constants)."""
        t, mask = xs
        gidx, flat_pos = c["gidx"], c["flat_pos"]
        pos = (t * B + jnp.arange(B)) % shard
        idx = st["order"][:, pos]
        x, y = c["xtr"][idx], c["ytr"][idx]
        st = dict(st)
        if not asynchronous:
            if ex.kind == "exact":
                g_sum, loss = summed_grad(st["theta"], x, y)
            else:
                loss, g = shared_grad(st["theta"], x, y)
                g_sum = aggregate(g, ex, lay, gidx, flat_pos)
            delta = g_sum / n_w
        else:
            loss, g = (per_replica_grad if replicas else shared_grad)(st["theta"], x, y)
            ages = (t - jnp.arange(window)) % window
            if ex.kind == "ako":
                acc = st["acc"].at[:, :d].add(g)
                row = t % p
                msg = lax.dynamic_slice_in_dim(acc, row * m, m, axis=1)  # [N, m]
                st["acc"] = lax.dynamic_update_slice_in_dim(acc, jnp.zeros_like(msg), row * m, axis=1)
                st["buf"] = buf = st["buf"].at[t % window].set(msg)
                got = jnp.einsum("ras,asm->ram", mask.astype(g.dtype), buf[ages])  # [N_r, age, m]
                onehot = jax.nn.one_hot(c["part_rows"][t], p, dtype=g.dtype)  # [age, p]
                placed = jnp.einsum("ram,ap->rpm", got, onehot).reshape(n_w, p * m)[:, :d]
                delta = (g + placed) / n_w
            else:
                agg = aggregate(g, ex, lay, gidx, flat_pos)
                pieces = jnp.concatenate([agg, jnp.zeros(1)])[gidx]  # [Q, L]
                st["buf"] = buf = st["buf"].at[t % window].set(pieces)
                if ex.local_first:
                    own = jnp.concatenate([g, jnp.zeros((n_w, 1))], axis=1)[:, gidx]  # [N, Q, L], exact
                    st["own"] = own_buf = st["own"].at[t % window].set(own)
                    got = jnp.einsum("waq,aql->wql", mask.astype(g.dtype), buf[ages])  # [N, Q, L]
                    mine = jnp.einsum("waq,awql->wql", mask.astype(g.dtype), own_buf[ages])
                    delta = (g + (got - mine).reshape(n_w, -1)[:, flat_pos]) / n_w
                elif replicas:
                    got = jnp.einsum("waq,aql->wql", mask.astype(g.dtype), buf[ages])  # [N, Q, L]
                    delta = got.reshape(n_w, -1)[:, flat_pos] / n_w
                else:
                    got = jnp.einsum("aq,aql->ql", mask.astype(g.dtype), buf[ages])  # [Q, L]
                    delta = got.reshape(-1)[flat_pos] / n_w
        v = c["momentum"] * st["v"] + delta
        st["v"] = v
        st["theta"] = st["theta"] - c["lr"] * v
        return st, jnp.mean(loss)

    def evaluate(c, theta):
        return accuracy(apply(to_tree(theta[0] if replicas else theta), c["xte"]), c["yte"])

    def run_one(seed, flat_init, c):
        st = init(seed, flat_init)
        acc0 = evaluate(c, st["theta"])

        def block(st, b):
            ts = b * E + jnp.arange(E)
            ms = c["masks"][ts + 1] if asynchronous else jnp.zeros((E,))
            st, losses = lax.scan(lambda s_, xs: step(c, s_, xs), st, (ts, ms))
            return st, (evaluate(c, st["theta"]), losses.mean())

        st, (accs, losses) = lax.scan(block, st, jnp.arange(T // E))
        return {"acc": jnp.concatenate([acc0[None], accs]), "loss": losses}

    consts = {"xtr": data.x_train, "ytr": data.y_train, "xte": data.x_test, "yte": data.y_test,
              "gidx": gidx, "flat_pos": flat_pos, "lr": np.float32(setup.lr), "momentum": np.float32(setup.momentum)}
    if asynchronous:
        consts["masks"] = masks
    if ex.kind == "ako":
        consts["part_rows"] = part_rows
    run = jax.jit(jax.vmap(run_one, in_axes=(0, 0, None)))

    def train(seeds, lr: float | None = None, momentum: float | None = None) -> dict[str, np.ndarray]:
        """Train one replica set per seed (model init and data shards both follow the seed); ``lr`` and
        ``momentum`` override the setup's optimiser without recompiling."""
        inits = jnp.stack([ravel_pytree(pure(make_model(setup.model, data.in_shape, data.num_classes,
                                                        seed=int(s)))[1])[0] for s in seeds])
        c = dict(consts, lr=np.float32(setup.lr if lr is None else lr),
                 momentum=np.float32(setup.momentum if momentum is None else momentum))
        out = run(jnp.asarray(seeds, dtype=jnp.int32), inits, jax.tree.map(jnp.asarray, c))
        res = {k: np.asarray(v) for k, v in out.items()}
        if not np.all(np.isfinite(res["loss"])):
            raise FloatingPointError(f"{ex.kind}: training diverged (non-finite loss)")
        return res

    return train


__all__ = ["KINDS", "Exchange", "Setup", "aggregate", "make_train", "tree_stages"]
