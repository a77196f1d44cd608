"""Federated self-supervised training: FedFoA and the FedSSL baselines in one jitted program.

``make_train(shape) -> train(knobs, key, idx, counts, images, public, mean, std)`` runs ``shape.rounds`` rounds of

1. *download*: parameter-sharing methods update each client from the last global model (FedBYOL/FedSimSiam:
   replace; FedU: replace the online encoder, divergence-aware predictor; FedEMA: divergence-scaled EMA);
2. *local training*: ``shape.local_steps`` SSL steps per client on its own shard (BYOL or SimSiam), plus the
   relation-alignment term (FedFoA) and/or the public-set distillation term (KD);
3. *upload and aggregate*: parameters (weighted by shard size), relation factors ``L_k [d, r]`` (FedFoA) or
   normalised projector features of the public set (KD).

The whole run is one ``lax.scan`` over rounds inside one ``jit``; clients of one architecture are stacked and
``vmap``ped, architecture groups run one after the other inside the round, and seeds are ``vmap``ped outside
(:func:`compiled_train`). State is a pytree of arrays (:class:`Carry`), so a run is checkpointed between chunks
of rounds and resumed after a kill (:func:`run_train`, through the shared driver).

Initialisation (``FedShape.init``): ``"common"`` (default) -- the server draws one initial model and broadcasts it,
so homogeneous clients start identical; in a heterogeneous federation every architecture group starts from one
model and all groups share the projector head (its last linear layer and batch-norm) and the predictor, whose
shapes do not depend on the encoder. Relation matrices (and KD features) are then expressed in a common projector
basis. ``"independent"`` -- every client draws its own initialisation (the earlier behaviour; kept only to show
what a relation exchanged without a common basis carries, see tests/papers/fedfoa/test_federation.py).

What changes the compiled program is the static :class:`FedShape` (architectures and sizes); *which* method
and SSL backbone run is the traced :class:`Knobs` (see :func:`knobs`), so every policy of every experiment
with the same shape reuses one executable. Methods:

| method | exchanged | models |
|---|---|---|
| ``local`` | nothing | any |
| ``fedavg`` | online encoder + projector + predictor (FedBYOL / FedSimSiam) | homogeneous |
| ``fedu`` | same; predictor by DAPU (Zhuang et al., ICCV 2021) | homogeneous, BYOL |
| ``fedema`` | same; EMA update scaled by divergence (Zhuang et al., ICLR 2022) | homogeneous, BYOL |
| ``kd`` | public-set features up, mean sample-similarity matrix down (relational KD) | any, needs public data |
| ``foa=True`` | + relation factor ``L [d, r]`` each way (FedFoA); with ``local`` this is FedFoA itself | any |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.trainer import ChunkedTrainer, compile_trainer
from mlsys_repro.papers.fedfoa import relation
from mlsys_repro.papers.fedfoa.augment import AugmentSpec, eval_view, two_views
from mlsys_repro.papers.fedfoa.models import Net, NetSpec, Params, conv_kernels, make_net
from mlsys_repro.papers.fedfoa.ssl import BACKBONES, ema_update, normalize, siamese_loss

METHODS = ("local", "fedavg", "fedu", "fedema", "kd")
INITS = ("common", "independent")
# the parts of the net whose shapes do not depend on the encoder: common across architectures under init="common"
HEAD_PARTS = (("projector", "l2"), ("projector", "bn"), ("predictor",))
SHARE_CODE = {"local": 0, "kd": 0, "fedavg": 1, "fedu": 2, "fedema": 3}
# XLA:CPU at optimisation level 1 compiles these programs ~2x faster than the default (2) at equal run time
# (measured; see README "Performance").
COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}


class ConfigurationError(ValueError):
    """A federation that the chosen method cannot run (e.g. FedAvg across different architectures)."""


@dataclass(frozen=True)
class FedShape:
    """Everything that shapes the compiled program (hashable: it keys the executable cache).

    ``groups`` lists ``(architecture, number of clients)``; client ids run through the groups in order.
    ``kd_path`` compiles the public-set distillation code in (needed only if a KD policy will run).
    """

    groups: tuple[tuple[NetSpec, int], ...]
    rounds: int = 10
    local_steps: int = 20
    batch_size: int = 64
    rank: int = 16  # r of the uploaded factor L [d, r]
    rel_samples: int = 256  # images a client embeds to extract its relation matrix
    kd_path: bool = False
    kd_batch: int = 64
    image_size: int = 16
    augment: AugmentSpec = field(default=None)  # type: ignore[assignment]
    init: str = "common"  # common | independent (see the module docstring)

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ConfigurationError(f"init must be one of {INITS}, got {self.init!r}")
        if self.augment is None:
            object.__setattr__(self, "augment", AugmentSpec(out_size=self.image_size))
        if self.augment.out_size != self.image_size:
            raise ConfigurationError(f"augment.out_size {self.augment.out_size} != image_size {self.image_size}")
        if not self.groups or any(n < 1 for _, n in self.groups):
            raise ConfigurationError(f"every architecture group needs >= 1 client, got {self.groups}")
        if len({s for s, _ in self.groups}) != len(self.groups):
            raise ConfigurationError("list each architecture once in groups (with its client count)")
        # relation matrices (and KD features) are compared across clients: one projector dimension for all
        relation.check_dims([s.proj_dim for s, _ in self.groups], [s.arch for s, _ in self.groups])
        d = self.groups[0][0].proj_dim
        if not 1 <= self.rank <= d:
            raise ConfigurationError(f"rank must be in [1, d={d}], got {self.rank}")
        for name in ("rounds", "local_steps", "batch_size", "rel_samples", "kd_batch", "image_size"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.rel_samples < 2 or self.batch_size < 2:
            raise ConfigurationError("rel_samples and batch_size must be >= 2 (batch statistics)")

    @property
    def num_clients(self) -> int:
        return sum(n for _, n in self.groups)

    @property
    def proj_dim(self) -> int:
        return self.groups[0][0].proj_dim

    @property
    def homogeneous(self) -> bool:
        return len(self.groups) == 1

    def group_slices(self) -> list[slice]:
        out, start = [], 0
        for _, n in self.groups:
            out.append(slice(start, start + n))
            start += n
        return out


class Knobs(NamedTuple):
    """Traced method switches and hyperparameters (scalars; one program runs every policy)."""

    simsiam: jax.Array  # bool: SimSiam objective (else BYOL)
    share: jax.Array  # int32: 0 none, 1 FedAvg (FedBYOL/FedSimSiam), 2 FedU, 3 FedEMA
    foa: jax.Array  # bool: relation alignment (FedFoA)
    calibrate: jax.Array  # bool: scale local steps by agreement with R_g
    kd: jax.Array  # bool: public-set feature distillation
    lam: jax.Array  # alignment weight lambda
    kd_weight: jax.Array
    lr: jax.Array  # peak learning rate (cosine over rounds)
    momentum: jax.Array
    weight_decay: jax.Array
    target_tau: jax.Array  # BYOL target EMA
    dapu_threshold: jax.Array  # FedU mu (absolute; used when dapu_rel == 0)
    dapu_rel: jax.Array  # FedU: if > 0, mu = dapu_rel * median over clients of the round-0 divergence
    ema_scaler_target: jax.Array  # FedEMA auto-scaler tau
    calib_floor: jax.Array  # smallest step scale calibration applies


def knobs(shape: FedShape, method: str, *, backbone: str = "byol", foa: bool = False, calibrate: bool = False,
          lam: float = 1.0, kd_weight: float = 1.0, lr: float = 0.05, momentum: float = 0.9, weight_decay: float = 5e-4,
          target_tau: float = 0.99, dapu_threshold: float = 0.4, dapu_rel: float = 0.0,
          ema_scaler_target: float = 0.7, calib_floor: float = 0.1) -> Knobs:
    """Validate a policy against ``shape`` and pack it as traced knobs (raises ConfigurationError)."""
    if method not in METHODS:
        raise ConfigurationError(f"unknown method {method!r}; known: {METHODS}")
    if SHARE_CODE[method] and not shape.homogeneous:
        raise ConfigurationError(
            f"{method} exchanges model parameters and needs homogeneous clients; got architectures "
            f"{[s.arch for s, _ in shape.groups]} (FedFoA and KD work with heterogeneous models)")
    if backbone not in BACKBONES:
        raise ConfigurationError(f"unknown SSL backbone {backbone!r}; known: {BACKBONES}")
    if method in ("fedu", "fedema") and backbone != "byol":
        raise ConfigurationError(f"{method} is defined for BYOL (predictor + target network), got {backbone}")
    if method == "kd" and not shape.kd_path:
        raise ConfigurationError("method kd needs a program compiled with kd_path=True (and a public set)")
    if calibrate and not foa:
        raise ConfigurationError("calibrate uses the aggregated relation matrix: it needs foa=True")
    if lam < 0 or kd_weight < 0 or lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0:
        raise ConfigurationError("need lam >= 0, kd_weight >= 0, lr > 0, 0 <= momentum < 1, weight_decay >= 0")
    if not 0 <= target_tau < 1 or dapu_threshold < 0 or dapu_rel < 0 or ema_scaler_target <= 0 \
            or not 0 < calib_floor <= 1:
        raise ConfigurationError("need 0 <= target_tau < 1, dapu_threshold >= 0, ema_scaler_target > 0, "
                                 "dapu_rel >= 0, 0 < calib_floor <= 1")
    f = jnp.float32
    return Knobs(jnp.bool_(backbone == "simsiam"), jnp.int32(SHARE_CODE[method]), jnp.bool_(foa),
                 jnp.bool_(calibrate), jnp.bool_(method == "kd"),
                 f(lam), f(kd_weight), f(lr), f(momentum), f(weight_decay), f(target_tau), f(dapu_threshold),
                 f(dapu_rel), f(ema_scaler_target), f(calib_floor))


class ClientState(NamedTuple):
    """One architecture group, every leaf stacked over its clients ``[k, ...]``."""

    params: Params  # online encoder, projector, predictor
    target: Params  # BYOL target network (SimSiam: unused copy)
    div: jax.Array  # [k] divergence of the last local training (FedU / FedEMA)
    scaler: jax.Array  # [k] FedEMA lambda_k (0 until first measured)
    dapu_global: jax.Array  # [k] bool: FedU takes the global predictor at the next download
    dapu_mu: jax.Array  # [k] FedU's divergence threshold in force (fixed at round 0 when dapu_rel > 0)
    rel: jax.Array  # [k, d, r] last relation factor of this client
    rel_ok: jax.Array  # [k] bool


class ServerState(NamedTuple):
    global_params: Params  # FedAvg aggregate (homogeneous programs; otherwise an unused init)
    rel_g: jax.Array  # [d, r] aggregated relation factor
    has_rel: jax.Array  # bool: rel_g has been aggregated at least once
    consensus: jax.Array  # [P, P] KD consensus: mean over clients of the public set's cosine-similarity matrix
    has_cons: jax.Array  # bool


class RoundStats(NamedTuple):
    """Per round, per client ``[K]`` (client order)."""

    ssl_loss: jax.Array
    align_loss: jax.Array  # measured for every method (a diagnostic), optimised only with FedFoA
    kd_loss: jax.Array
    bad_steps: jax.Array  # steps whose loss or gradient was not finite (update skipped)
    rel_ok: jax.Array  # the client's relation matrix was finite and not collapsed
    step_scale: jax.Array  # calibration factor applied to the learning rate
    div: jax.Array  # divergence of this round's local training
    ema_mu: jax.Array  # FedEMA mixing weight used at this round's download
    dapu_global: jax.Array  # FedU used the global predictor at this round's download
    feat_std: jax.Array  # mean std of projector features on the relation sample (collapse monitor)


class Carry(NamedTuple):
    """The state between rounds: what a checkpoint holds."""

    clients: tuple[ClientState, ...]
    server: ServerState
    round: jax.Array  # int32: rounds done


class TrainOutput(NamedTuple):
    clients: tuple[ClientState, ...]  # final per-group client states
    server: ServerState
    stats: RoundStats  # leaves [rounds, K]
    monitor: Any = None  # run_train(monitor=...): the monitor's output after each chunk, leaves [S, chunks, ...]


def cosine_lr(peak: jax.Array, t: jax.Array, rounds: int) -> jax.Array:
    """EasyFL's per-round cosine schedule: ``0.5 lr (1 + cos(pi t / R))``."""
    return 0.5 * peak * (1 + jnp.cos(jnp.pi * t / rounds))


def divergence(before: Params, after: Params) -> jax.Array:
    """Mean over the encoder's conv kernels of ``||W_after - W_before||_2`` (FedU/FedEMA authors' code)."""
    ks = [jnp.sqrt(jnp.sum((a - b) ** 2)) for a, b in zip(conv_kernels(before), conv_kernels(after), strict=True)]
    return jnp.mean(jnp.stack(ks))


def with_head(params: Params, head_from: Params) -> Params:
    """``params`` with the encoder-independent head parts (:data:`HEAD_PARTS`) taken from ``head_from``."""
    out = jax.tree.map(lambda a: a, params)
    for path in HEAD_PARTS:
        src, dst = head_from, out
        for key in path[:-1]:
            src, dst = src[key], dst[key]
        dst[path[-1]] = jax.tree.map(lambda a: a, src[path[-1]])
    return out


def initial_params(shape: FedShape, key: jax.Array) -> tuple[Params, list[Params]]:
    """``(server model, [stacked client params per group])`` at round 0.

    ``init="common"``: the server's model (architecture of group 0) is every client's model in a homogeneous
    federation; in a heterogeneous one each group gets one model of its architecture, with the projector head and
    predictor of the server's model. ``init="independent"``: one draw per client.
    """
    nets = [make_net(s) for s, _ in shape.groups]
    kg, kc = jax.random.split(key)
    global_params = nets[0].init(kg)
    groups = []
    for gi, ((_, n), net) in enumerate(zip(shape.groups, nets, strict=True)):
        kgi = jax.random.fold_in(kc, gi)
        if shape.init == "independent":
            groups.append(jax.vmap(net.init)(jax.random.split(kgi, n)))
            continue
        one = global_params if gi == 0 else with_head(net.init(kgi), global_params)
        groups.append(jax.tree.map(lambda a, n=n: jnp.broadcast_to(a, (n, *a.shape)), one))
    return global_params, groups


def relational_kd_loss(z: jax.Array, target_sim: jax.Array) -> jax.Array:
    """``mean((Z Z^T - S)^2)`` for L2-normalised ``z [B, d]`` and a target similarity matrix ``S [B, B]``.

    Basis-invariant: rotating ``z`` (any orthogonal map of the feature space) leaves it unchanged."""
    return jnp.mean((z @ z.T - target_sim) ** 2)


def similarity_consensus(feats: jax.Array, ok: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Server step of relational KD: ``(mean over ok clients of F_k F_k^T [P, P], any_ok)`` from the uploaded
    L2-normalised public-set features ``feats [K, P, d]`` (non-ok clients, e.g. non-finite, are left out)."""
    grams = jnp.einsum("kpd,kqd->kpq", jnp.where(ok[:, None, None], feats, 0.0),
                       jnp.where(ok[:, None, None], feats, 0.0))
    n = ok.sum()
    return grams.sum(0) / jnp.maximum(n, 1), n > 0


def _select(cond, a, b):
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


def _mix(a, b, w):
    """``w a + (1 - w) b`` leafwise."""
    return jax.tree.map(lambda x, y: w * x + (1 - w) * y, a, b)


def download(kn: Knobs, st: ClientState, g: Params, t: jax.Array) -> tuple[ClientState, jax.Array, jax.Array]:
    """Server -> clients for parameter-sharing methods; returns (state, FedEMA mu [k], FedU global-predictor [k]).

    Round 0 all clients start from the server's initial model (online, predictor and target). Later rounds:
    FedBYOL/FedSimSiam replace encoder, projector and predictor and keep the local BYOL target (EasyFL
    ``--update_encoder online --update_predictor global``); FedU does the same but takes the global predictor
    only while the client's divergence is below ``dapu_threshold`` (DAPU); FedEMA sets
    ``theta <- mu theta_local + (1 - mu) theta_global`` for encoder, projector and predictor with
    ``mu = min(lambda_k d_k, 1)`` and ``lambda_k = tau / d_k`` at the first measurement. ``share == 0``: no-op.
    """
    k = st.div.shape[0]
    gk = jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *a.shape)), g)
    first = t == 0
    local = st.params
    fedu_pred = st.dapu_global | first
    fedu = {**gk, "predictor": jax.vmap(_select)(fedu_pred, gk["predictor"], local["predictor"])}
    mu = jnp.where(first, 0.0, jnp.minimum(st.scaler * st.div, 1.0))
    fedema = jax.vmap(_mix)(local, gk, mu)
    new = _select(kn.share == 1, gk, _select(kn.share == 2, fedu, _select(kn.share == 3, fedema, local)))
    target = _select((kn.share > 0) & first, gk, st.target)
    mu = jnp.where(kn.share == 3, mu, 0.0)
    used_global_pred = jnp.where(kn.share == 2, fedu_pred, kn.share > 0)
    return st._replace(params=new, target=target), mu, used_global_pred


class _Ctx(NamedTuple):
    """Per-round inputs shared by every client of a group."""

    kn: Knobs
    lr: jax.Array
    rel_g: jax.Array  # [d, d] reconstructed global relation matrix
    use_align: jax.Array  # bool
    consensus: jax.Array  # [P, P]
    use_kd: jax.Array  # bool


def make_local_train(shape: FedShape, net: Net) -> Callable[..., tuple[Params, Params, jax.Array]]:
    """One client's round of local SSL.

    ``(params, target, key, idx [M], count, scale, ctx, images, mean, std, public_view) -> (params, target,
    stats [4])``, stats = mean SSL loss, alignment loss, KD loss over finite steps, and the number of skipped
    (non-finite) steps. SGD with momentum and weight decay (torch semantics), a fresh optimiser each round as
    EasyFL clients do; a step whose loss or gradient is not finite is skipped and counted.
    """

    def local_train(params, target, key, idx, count, scale, ctx: _Ctx, images, mean, std, public_view):
        kn = ctx.kn
        tx = optax.chain(optax.add_decayed_weights(kn.weight_decay), optax.trace(decay=kn.momentum))
        opt_state = tx.init(params)

        def kd_term(p, kp):  # relational KD: match the consensus sample similarities of a public batch
            j = jax.random.randint(kp, (shape.kd_batch,), 0, public_view.shape[0])
            zp = normalize(net.embed(p, public_view[j]))
            return relational_kd_loss(zp, ctx.consensus[j][:, j])

        def loss_fn(p, tg, v1, v2, kp):
            ssl, (z1, z2) = siamese_loss(net, p, tg, v1, v2, kn.simsiam)
            al = relation.alignment_loss(jnp.concatenate([z1, z2]), ctx.rel_g)
            total = ssl + jnp.where(ctx.use_align, kn.lam, 0.0) * al
            kdl = jnp.float32(0)
            if shape.kd_path:
                kdl = jax.lax.cond(ctx.use_kd, kd_term, lambda p, kp: jnp.float32(0), p, kp)
                total = total + kn.kd_weight * kdl
            return total, jnp.stack([ssl, al, kdl])

        def step(carry, k):
            p, tg, o = carry
            kb, ka, kp = jax.random.split(k, 3)
            j = idx[jax.random.randint(kb, (shape.batch_size,), 0, count)]
            v1, v2 = two_views(ka, images[j], shape.augment, mean, std)
            (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, tg, v1, v2, kp)
            finite = jnp.isfinite(loss) & jnp.all(jnp.stack([jnp.all(jnp.isfinite(x))
                                                              for x in jax.tree.leaves(grads)]))
            updates, o_new = tx.update(grads, o, p)
            p_new = jax.tree.map(lambda a, u: a - ctx.lr * scale * u, p, updates)
            p = _select(finite, p_new, p)
            o = _select(finite, o_new, o)
            tg = _select(kn.simsiam, tg, ema_update(tg, p, kn.target_tau))
            return (p, tg, o), jnp.concatenate([parts, (~finite).astype(jnp.float32)[None]])

        (params, target, _), per_step = jax.lax.scan(step, (params, target, opt_state),
                                                     jax.random.split(key, shape.local_steps))
        good = 1.0 - per_step[:, 3]
        means = (per_step[:, :3] * good[:, None]).sum(0) / jnp.maximum(good.sum(), 1.0)
        return params, target, jnp.concatenate([means, per_step[:, 3].sum()[None]])

    return local_train


def make_train(shape: FedShape) -> Callable[..., TrainOutput]:
    """``train(knobs, key, idx [K, M], counts [K], images u8 [N,H,W,C], public u8 [P,H,W,C], mean [C], std [C])``.

    ``idx``/``counts`` are one seed's padded partition (:func:`mlsys_repro.common.fl.partition.pad_partitions`);
    ``public`` is read only when ``shape.kd_path`` (pass a 1-image dummy otherwise). Pure; see :func:`compiled_train`
    for the jitted, seed-vmapped form.
    """
    nets = [make_net(s) for s, _ in shape.groups]
    local = [make_local_train(shape, net) for net in nets]
    slices = shape.group_slices()
    d, r = shape.proj_dim, shape.rank

    def init(kn: Knobs, key: jax.Array, num_public: int) -> tuple[tuple[ClientState, ...], ServerState]:
        global_params, groups = initial_params(shape, key)
        states = []
        for (_, n), p in zip(shape.groups, groups, strict=True):
            states.append(ClientState(
                params=p, target=p, div=jnp.zeros((n,)), scaler=jnp.zeros((n,)),
                dapu_global=jnp.ones((n,), bool), dapu_mu=jnp.zeros((n,)), rel=jnp.zeros((n, d, r)),
                rel_ok=jnp.zeros((n,), bool)))
        server = ServerState(global_params, jnp.zeros((d, r)), jnp.array(False),
                             jnp.zeros((num_public, num_public)), jnp.array(False))
        return tuple(states), server

    def client_round(gi, kn, server, st, t, kt, idx, counts, images, mean, std, public_view, rel_g_full):
        sl, net, lt = slices[gi], nets[gi], local[gi]
        n = sl.stop - sl.start
        mu, used_gp = jnp.zeros((n,)), jnp.zeros((n,), bool)
        if shape.homogeneous:
            st, mu, used_gp = download(kn, st, server.global_params, t)
        before = st.params
        agree = jax.vmap(lambda L: relation.agreement(relation.reconstruct(L), rel_g_full))(st.rel)
        use_cal = kn.calibrate & server.has_rel & st.rel_ok
        scale = jnp.where(use_cal, jnp.clip(agree, kn.calib_floor, 1.0), 1.0)
        ctx = _Ctx(kn, cosine_lr(kn.lr, t, shape.rounds), rel_g_full, kn.foa & server.has_rel, server.consensus,
                   kn.kd & server.has_cons)
        kl, ks = jax.random.split(jax.random.fold_in(kt, gi))
        params, target, lstats = jax.vmap(lt, in_axes=(0, 0, 0, 0, 0, 0, None, None, None, None, None))(
            st.params, st.target, jax.random.split(kl, n), idx[sl], counts[sl], scale, ctx, images, mean, std,
            public_view)
        div = jax.vmap(divergence)(before, params)
        # FedU's threshold: absolute (the authors' mu), or relative to the round-0 divergence scale (median over
        # clients, reported to the server once and broadcast): see README "FedU"
        mu_rel = jnp.where(t == 0, kn.dapu_rel * jnp.median(div), st.dapu_mu[0])
        dapu_mu = jnp.broadcast_to(jnp.where(kn.dapu_rel > 0, mu_rel, kn.dapu_threshold), (n,))
        dapu = jnp.where(kn.share == 2, div < dapu_mu, st.dapu_global)
        scaler = jnp.where((kn.share == 3) & (st.scaler <= 0), kn.ema_scaler_target / jnp.maximum(div, 1e-12),
                           st.scaler)

        def embed_sample(p, k, ix, c):  # the clean view of rel_samples images of the client's own shard
            j = ix[jax.random.randint(k, (shape.rel_samples,), 0, c)]
            return net.embed(p, eval_view(images[j], shape.image_size, mean, std))

        z = jax.vmap(embed_sample)(params, jax.random.split(ks, n), idx[sl], counts[sl])
        rk, ok = jax.vmap(relation.relation_matrix)(z)
        lk = jax.vmap(lambda m: relation.factorise(m, r))(rk)
        st = st._replace(params=params, target=target, div=div, dapu_global=dapu, dapu_mu=dapu_mu, scaler=scaler,
                         rel=lk, rel_ok=ok)
        feats = None
        if shape.kd_path:
            feats = jax.lax.cond(
                kn.kd, lambda p: normalize(jax.vmap(net.embed, in_axes=(0, None))(p, public_view)),
                lambda p: jnp.zeros((n, public_view.shape[0], d)), params)
        stats = (lstats, ok, scale, div, mu, used_gp, jnp.std(z, axis=1).mean(-1))
        return st, (lk, ok, feats), stats

    def public_size(public) -> int:
        num_public = public.shape[0] if shape.kd_path else 1
        if num_public == 0:
            raise ConfigurationError("kd_path=True needs a non-empty public set (n_public > 0)")
        return num_public

    def start(kn: Knobs, key, public) -> Carry:
        """Initial client and server states, round 0."""
        kinit, _ = jax.random.split(key)
        states, server = init(kn, kinit, public_size(public))
        return Carry(states, server, jnp.int32(0))

    def advance(kn: Knobs, carry: Carry, key, idx, counts, images, public, mean, std, *, rounds: int
                ) -> tuple[Carry, RoundStats]:
        """``rounds`` more rounds from ``carry`` (stats leaves ``[rounds, K]``). Round ``t`` draws its randomness
        from ``fold_in(key, t)``, so chunks of any size replay the one-shot run exactly."""
        public_size(public)
        _, kloop = jax.random.split(key)
        public_view = eval_view(public, shape.image_size, mean, std) if shape.kd_path else None
        w = counts.astype(jnp.float32)

        def round_fn(carry, t):
            states, server = carry
            kt = jax.random.fold_in(kloop, t)
            rel_g_full = relation.reconstruct(server.rel_g)
            outs = [client_round(gi, kn, server, states[gi], t, kt, idx, counts, images, mean, std, public_view,
                                 rel_g_full) for gi in range(len(shape.groups))]
            new_states = tuple(o[0] for o in outs)
            if shape.homogeneous:
                agg = jax.tree.map(lambda a: jnp.tensordot(w / w.sum(), a, axes=1), new_states[0].params)
                server = server._replace(global_params=_select(kn.share > 0, agg, server.global_params))
            lk = jnp.concatenate([o[1][0] for o in outs])
            oks = jnp.concatenate([o[1][1] for o in outs])
            lg, any_ok = relation.aggregate(lk, w, oks, r)
            upd = kn.foa & any_ok
            server = server._replace(rel_g=jnp.where(upd, lg, server.rel_g), has_rel=server.has_rel | upd)
            if shape.kd_path:
                feats = jnp.concatenate([o[1][2] for o in outs])
                fin = jnp.all(jnp.isfinite(feats), axis=(1, 2))
                cons, any_fin = similarity_consensus(feats, fin)
                upd = kn.kd & any_fin
                server = server._replace(consensus=jnp.where(upd, cons, server.consensus),
                                         has_cons=server.has_cons | upd)
            cat = [jnp.concatenate(x) for x in zip(*[o[2] for o in outs], strict=True)]
            ls = cat[0]
            rs = RoundStats(ssl_loss=ls[:, 0], align_loss=ls[:, 1], kd_loss=ls[:, 2], bad_steps=ls[:, 3],
                            rel_ok=cat[1], step_scale=cat[2], div=cat[3], ema_mu=cat[4], dapu_global=cat[5],
                            feat_std=cat[6])
            return (new_states, server), rs

        (states, server), stats = jax.lax.scan(round_fn, (carry.clients, carry.server),
                                               carry.round + jnp.arange(rounds))
        return Carry(states, server, carry.round + rounds), stats

    def train(kn: Knobs, key, idx, counts, images, public, mean, std) -> TrainOutput:
        carry, stats = advance(kn, start(kn, key, public), key, idx, counts, images, public, mean, std,
                               rounds=shape.rounds)
        return TrainOutput(carry.clients, carry.server, stats)

    train.start, train.advance = start, advance
    return train


def compiled_train(shape: FedShape) -> Callable[..., TrainOutput]:
    """``jit(vmap over seeds)`` of :func:`make_train` in one piece: ``(knobs, keys [S], idx [S,K,M], counts [S,K],
    images, public, mean, std)``; built afresh (the reference :func:`run_train` is checked against)."""
    train = make_train(shape)
    return jax.jit(jax.vmap(train, in_axes=(None, 0, 0, 0, None, None, None, None)),
                   compiler_options=COMPILER_OPTIONS)


def chunked_trainer(shape: FedShape, cache: RunCache | None = None) -> ChunkedTrainer:
    """The training of ``shape`` through the shared driver (:func:`mlsys_repro.common.repro.trainer.compile_trainer`):
    vmapped over seeds, ``num_chunks(shape.rounds)`` equal jitted chunks of rounds; ``start(knobs, keys, public)``,
    ``advance(carry, knobs, keys, idx, counts, images, public, mean, std)``. Built once per shape and run when
    ``cache`` (the run cache) is given, so all policies and experiments of one shape share an executable."""

    def build() -> ChunkedTrainer:
        train = make_train(shape)

        def advance(carry, kn, keys, idx, counts, images, public, mean, std, rounds):
            return train.advance(kn, carry, keys, idx, counts, images, public, mean, std, rounds=rounds)

        return compile_trainer(train.start, advance, shape.rounds, start_axes=(None, 0, None),
                               advance_axes=(0, None, 0, 0, 0, None, None, None, None), steps_arg="rounds",
                               compiler_options=COMPILER_OPTIONS)

    return build() if cache is None else cache.get("fedfoa.trainer", shape, build)


def run_train(shape: FedShape, kn: Knobs, keys, idx, counts, images, public, mean, std,
              checkpointer=None, monitor=None, cache: RunCache | None = None) -> TrainOutput:
    """All seeds of one policy in :func:`mlsys_repro.common.repro.trainer.num_chunks` jitted chunks of rounds (see
    :func:`chunked_trainer`), saved with ``checkpointer`` (a :class:`mlsys_repro.common.repro.checkpoint.Checkpointer`,
    or None) after each chunk and resumed from its latest save. Bit-identical to :func:`compiled_train` on the same
    platform; stats leaves ``[S, rounds, K]``.

    ``monitor`` (optional): ``carry -> pytree of [S, ...] arrays``, evaluated after every chunk (e.g. per-round
    probe accuracy and cross-client similarity); it must offer ``monitor.eval_shape(carry)``. Its outputs are
    checkpointed with the chunk's stats and returned stacked as ``TrainOutput.monitor`` (leaves ``[S, chunks,
    ...]``)."""
    trainer = chunked_trainer(shape, cache)
    done = trainer.run((kn, keys, public), (kn, keys, idx, counts, images, public, mean, std), monitor=monitor,
                       checkpointer=checkpointer)
    return TrainOutput(done.state.clients, done.state.server, done.steps, done.curve)


def bytes_per_round(shape: FedShape, method: str, foa: bool, num_public: int = 0) -> dict[str, float]:
    """Exact payload bytes per client per round, ``{"up": .., "down": ..}`` (mean over clients; float32).

    Parameter-sharing methods move the online encoder + projector + predictor each way; FedFoA moves one factor
    ``L [d, r]`` each way; relational KD uploads ``[P, d]`` features and downloads the ``[P, P]`` consensus
    similarity matrix.
    """
    from mlsys_repro.common.fl.comm import nbytes

    up = 0.0
    if SHARE_CODE[method]:
        up += nbytes(jax.eval_shape(make_net(shape.groups[0][0]).init, jax.random.key(0)))
    if foa:
        up += nbytes(jax.ShapeDtypeStruct((shape.proj_dim, shape.rank), jnp.float32))
    down = up
    if method == "kd":
        up += nbytes(jax.ShapeDtypeStruct((num_public, shape.proj_dim), jnp.float32))
        down += nbytes(jax.ShapeDtypeStruct((num_public, num_public), jnp.float32))
    return {"up": up, "down": down}
