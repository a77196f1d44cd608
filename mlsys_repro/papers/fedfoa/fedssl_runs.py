"""Run the policies of one FedSSL experiment and turn the trained encoders into result rows.

:func:`run_fedssl` is what every training experiment calls: it loads the data the trace names, draws one
client partition per seed, runs every policy on one compiled program (seeds ``vmap``ped), checks the health of
each run (skipped non-finite steps, collapsed representations), evaluates every client's encoder (linear probe
and, if asked, 1 % / 10 % fine-tuning) and reports exact bytes per round.

Validity and diagnostics written into the rows (per seed):

* ``beats_untrained`` (0/1 gate): the policy's client-mean probe accuracy beats the untrained encoders' (the same
  initial weights, ``random_init``) by at least ``params.gate_pp`` points; every superiority claim requires it.
  ``untrained_gap`` is the difference itself (pp).
* per chunk of rounds (``round`` = the last round of the chunk): ``probe_acc`` and ``cka`` (mean linear CKA between
  clients' representations of the same evaluation images), see :func:`make_monitor`;
* ``rel_corr_final``: mean over client pairs of the correlation of the off-diagonal entries of their final relation
  matrices (1 = the clients' feature correlations agree; ~0 = no common basis).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.fl.partition import dirichlet_partition, label_histogram, pad_partitions, split_public
from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.results import metric_rows
from mlsys_repro.common.repro.trainer import num_chunks
from mlsys_repro.papers.fedfoa import relation
from mlsys_repro.papers.fedfoa.data import SSLData, available, check_shards, load_ssl_data
from mlsys_repro.papers.fedfoa.evaluation import compiled_eval, compiled_monitor, mean_pairwise_cka
from mlsys_repro.papers.fedfoa.federation import (
    SHARE_CODE,
    FedShape,
    Knobs,
    TrainOutput,
    bytes_per_round,
    initial_params,
    knobs,
    run_train,
)
from mlsys_repro.papers.fedfoa.models import NetSpec
from mlsys_repro.papers.fedfoa.schemas import FederationHardware, FedSSLParams, FedSSLPolicy


class DatasetUnavailable(RuntimeError):
    """The trace names a dataset that is not installed (Fashion-MNIST comes from a Debian package)."""


def net_specs(hw: FederationHardware, in_channels: int) -> tuple[tuple[NetSpec, int], ...]:
    return tuple((NetSpec(g.arch, in_channels, g.proj_dim, hw.hidden), g.count) for g in hw.clients)


def make_shape(hw: FederationHardware, p: FedSSLParams, in_channels: int, kd_path: bool) -> FedShape:
    return FedShape(groups=net_specs(hw, in_channels), rounds=p.rounds, local_steps=p.local_steps,
                    batch_size=p.batch_size, rank=p.rank, rel_samples=p.rel_samples, kd_path=kd_path,
                    kd_batch=p.kd_batch, image_size=p.image_size, init=p.init)


def policy_knobs(shape: FedShape, pol: FedSSLPolicy, p: FedSSLParams) -> Knobs:
    return knobs(shape, pol.method, backbone=p.backbone, foa=pol.foa, calibrate=pol.calibrate, lam=pol.lam,
                 kd_weight=pol.kd_weight, lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay,
                 target_tau=p.target_tau, dapu_threshold=pol.dapu_threshold, dapu_rel=pol.dapu_rel,
                 ema_scaler_target=pol.ema_scaler_target, calib_floor=p.calib_floor)


def partitions(labels: np.ndarray, num_clients: int, alpha: float, seeds: np.ndarray, min_per_client: int
               ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """One partition per seed: ``(idx [S, K, N], counts [S, K], histograms)``.

    Rows are padded to the pool size ``N`` (not the largest shard), so array shapes depend only on the config and
    every split of the same size reuses one compiled program.
    """
    parts = [dirichlet_partition(labels, num_clients, None if alpha == 0 else alpha, seed=int(s),
                                 min_per_client=min_per_client) for s in seeds]
    padded = [pad_partitions(ps, labels.size) for ps in parts]
    idx = np.stack([a for a, _ in padded])
    counts = np.stack([c for _, c in padded])
    check_shards(counts)
    return idx, counts, [label_histogram(labels, ps) for ps in parts]


@dataclass
class Health:
    """What went wrong in one run, per seed: skipped steps and clients whose final relation matrix collapsed."""

    bad_steps: np.ndarray  # [S]
    collapsed: np.ndarray  # [S] clients whose final representation was non-finite or constant
    messages: list[str]


def health(out: TrainOutput, seeds: np.ndarray, policy: str) -> Health:
    bad = np.asarray(out.stats.bad_steps)  # [S, R, K]
    ok = np.asarray(out.stats.rel_ok)
    collapsed = (~ok[:, -1, :]).sum(-1)
    msgs = []
    for si, s in enumerate(seeds):
        if bad[si].sum():
            r, k = np.argwhere(bad[si] > 0)[0]
            msgs.append(f"{policy} seed {s}: {int(bad[si].sum())} non-finite local steps skipped "
                        f"(first at round {r}, client {k})")
        if collapsed[si]:
            ks = np.flatnonzero(~ok[si, -1]).tolist()
            msgs.append(f"{policy} seed {s}: clients {ks} ended with collapsed (non-finite or constant) "
                        "representations; the server left them out of the aggregate")
    return Health(bad.sum(axis=(1, 2)), collapsed, msgs)


def _flat(tree: Any) -> Any:
    """``[S, k, ...] -> [S * k, ...]``."""
    return jax.tree.map(lambda a: a.reshape(a.shape[0] * a.shape[1], *a.shape[2:]), tree)


def _ft_subset(labels: np.ndarray, fraction: float, seed: int, num_classes: int) -> np.ndarray:
    n = max(num_classes, int(round(fraction * labels.size)))
    if n >= labels.size:
        return np.arange(labels.size)
    return split_public(labels, n, seed=seed)[1]


def _eval_arrays(p: FedSSLParams, data: SSLData) -> tuple[jax.Array, ...]:
    xe, ye = (data.val_x, data.val_y) if p.eval_on == "val" else (data.test_x, data.test_y)
    return tuple(jnp.asarray(a) for a in (data.pool_x, data.pool_y, xe, ye, data.mean, data.std))


def make_monitor(shape: FedShape, p: FedSSLParams, data: SSLData, num_seeds: int, cache: RunCache | None = None):
    """``monitor(carry) -> {"probe_acc": [S, K] (%), "cka": [S]}`` for :func:`run_train`: every client's linear-probe
    accuracy (the protocol of :func:`evaluate`) and the mean linear CKA between clients' representations of the
    first ``p.cka_samples`` evaluation images. Carries ``eval_shape``."""
    arrays = _eval_arrays(p, data)
    n_cka = min(p.cka_samples, int(arrays[3].shape[0]))
    S, K = num_seeds, shape.num_clients

    def monitor(carry_or_groups):
        groups = carry_or_groups.clients if hasattr(carry_or_groups, "clients") else carry_or_groups
        accs, grams = [], []
        for (spec, n), g in zip(shape.groups, groups, strict=True):
            params = g.params if hasattr(g, "params") else g
            fn = compiled_monitor(spec, p.image_size, data.num_classes, p.probe_steps, n_cka, cache)
            acc, gram = fn(_flat(params), *arrays)
            accs.append(acc.reshape(S, n))
            grams.append(gram.reshape(S, n, n_cka, n_cka))
        acc = jnp.concatenate(accs, axis=1) * 100
        cka = mean_pairwise_cka(jnp.concatenate(grams, axis=1)) if K > 1 else jnp.ones((S,))
        return {"probe_acc": acc, "cka": cka}

    monitor.eval_shape = lambda _c: {"probe_acc": jax.ShapeDtypeStruct((S, K), jnp.float32),
                                     "cka": jax.ShapeDtypeStruct((S,), jnp.float32)}
    return monitor


def relation_corr(groups_rel, groups_ok) -> np.ndarray:
    """Per seed: mean over client pairs of the correlation between the off-diagonal entries of their relation
    matrices (rebuilt from the uploaded factors ``[S, k, d, r]``); pairs with a collapsed client are left out (0 if
    none is left)."""
    rel = np.concatenate([np.asarray(r) for r in groups_rel], axis=1)
    ok = np.concatenate([np.asarray(o) for o in groups_ok], axis=1)
    S, K, d, _ = rel.shape
    iu = np.triu_indices(d, 1)
    out = np.zeros(S)
    for s in range(S):
        offs = np.stack([np.asarray(relation.reconstruct(jnp.asarray(rel[s, k])))[iu] for k in range(K)])
        vals = [np.corrcoef(offs[i], offs[j])[0, 1] for i in range(K) for j in range(i + 1, K)
                if ok[s, i] and ok[s, j] and offs[i].std() > 0 and offs[j].std() > 0]
        out[s] = float(np.mean(vals)) if vals else 0.0
    return out


def evaluate(shape: FedShape, p: FedSSLParams, data: SSLData, out_clients, global_params, seeds: np.ndarray,
             cache: RunCache | None = None) -> dict[str, np.ndarray]:
    """Per seed: client-mean / worst-client linear-probe accuracy, per-architecture means, global-model accuracy,
    and fine-tuning accuracy at each labelled fraction (all in %)."""
    x_tr, y_tr, x_te, y_te, mean, std = _eval_arrays(p, data)
    n_cka = min(p.cka_samples, int(x_te.shape[0]))
    S = len(seeds)
    res: dict[str, np.ndarray] = {}
    all_acc = []
    ft_all: dict[float, list[np.ndarray]] = {f: [] for f in p.ft_fractions}
    for (spec, n), params in zip(shape.groups, out_clients, strict=True):
        # the monitor's executable (same shapes as the per-chunk monitor, so compiled once)
        probe = compiled_monitor(spec, p.image_size, data.num_classes, p.probe_steps, n_cka, cache)
        _, ft = compiled_eval(spec, p.image_size, data.num_classes, p.probe_steps, p.ft_steps, p.ft_batch, cache)
        acc = np.asarray(probe(_flat(params), x_tr, y_tr, x_te, y_te, mean, std)[0]).reshape(S, n) * 100
        res[f"probe_acc_{spec.arch}"] = acc.mean(1)
        all_acc.append(acc)
        for f in p.ft_fractions:
            per_seed = []
            for si, s in enumerate(seeds):
                sub = _ft_subset(data.pool_y, f, int(s), data.num_classes)
                keys = jax.random.split(jax.random.key(int(s) + 7919), n)
                one = jax.tree.map(lambda a, si=si: a[si], params)
                per_seed.append(np.asarray(ft(one, keys, jnp.asarray(data.pool_x[sub]), jnp.asarray(data.pool_y[sub]),
                                              x_te, y_te, mean, std)) * 100)
            ft_all[f].append(np.stack(per_seed))
    acc = np.concatenate(all_acc, axis=1)
    res["probe_acc"] = acc.mean(1)
    res["probe_acc_worst"] = acc.min(1)
    for f, parts in ft_all.items():
        res[f"ft_acc_{f * 100:g}pct"] = np.concatenate(parts, axis=1).mean(1)
    if global_params is not None:
        spec = shape.groups[0][0]
        probe, _ = compiled_eval(spec, p.image_size, data.num_classes, p.probe_steps, p.ft_steps, p.ft_batch, cache)
        res["probe_acc_global"] = np.asarray(probe(global_params, x_tr, y_tr, x_te, y_te, mean, std)) * 100
    return res


def load_data(trace: Any, data_dir, p: FedSSLParams) -> SSLData:
    name = trace.options.get("dataset") if trace is not None else None
    if not name:
        raise ValueError("the trace config must name options.dataset (cifar10_jpeg, mnist or fashion_mnist)")
    if not available(name, data_dir):
        raise DatasetUnavailable(f"dataset {name} is not installed here (Fashion-MNIST: apt-get install "
                                 "dataset-fashion-mnist); skipping")
    return load_ssl_data(name, data_dir, n_pool=p.n_pool, n_public=p.n_public, n_val=p.n_val, n_test=p.n_test)


def run_fedssl(ctx) -> list[dict]:
    """Every policy of the experiment on the federation ``ctx.hardware``; returns long-format rows."""
    p: FedSSLParams = ctx.params
    hw: FederationHardware = ctx.hardware
    data = load_data(ctx.trace, ctx.data_dir, p)
    seeds = ctx.seeds()
    if p.n_public < 1 and any(pol.method == "kd" for pol in ctx.policies.values()):
        raise ValueError(f"{ctx.experiment}: the kd policy needs a public set (params.n_public >= 1)")
    # the KD code is compiled in whenever a public set exists, so experiments of one federation share a program
    shape = make_shape(hw, p, data.pool_x.shape[-1], kd_path=p.n_public > 0)
    kns = {name: policy_knobs(shape, pol, p) for name, pol in ctx.policies.items()}  # validate all first
    idx, counts, hists = partitions(data.pool_y, shape.num_clients, p.alpha, seeds, p.min_per_client)
    for s, h in zip(seeds, hists, strict=True):
        ctx.progress.log(f"seed {s} partition ({p.split_name}) class histogram per client: {h.tolist()}")
    args = (jax.vmap(jax.random.key)(jnp.asarray(seeds)), jnp.asarray(idx), jnp.asarray(counts),
            jnp.asarray(data.pool_x), jnp.asarray(data.public_x), jnp.asarray(data.mean), jnp.asarray(data.std))
    cond = {"split": p.split_name, "backbone": p.backbone}
    rows: list[dict] = []
    ctx.progress.start(len(kns) + 1, "policies")
    # the untrained encoders (the initial weights every policy starts from): the reference of the beats_untrained
    # gate; their rows are written only if params.random_init_reference
    rand_rows, rand_acc = random_init_rows(shape, p, data, seeds, cond, ctx.cache)
    if p.random_init_reference:
        rows += rand_rows
    ctx.progress.update(note=f"random_init: probe {rand_acc.mean():.2f}%")
    for name, kn in kns.items():
        pol = ctx.policies[name]
        t0 = time.monotonic()
        mon = make_monitor(shape, p, data, len(seeds), ctx.cache) if p.monitor else None
        out = jax.block_until_ready(run_train(shape, kn, *args, checkpointer=ctx.checkpointer(name), monitor=mon,
                                              cache=ctx.cache))
        t_train = time.monotonic() - t0
        rows += policy_rows(name, pol, shape, p, data, out, seeds, rand_acc, t_train, cond, ctx.progress, ctx.cache)
    return rows


def untrained_gate(acc: np.ndarray, untrained_acc: np.ndarray, gate_pp: float) -> tuple[np.ndarray, np.ndarray]:
    """Per seed ``(gap, beats_untrained)``: ``gap = acc - untrained_acc`` (pp) and 1.0 where ``gap >= gate_pp``
    (non-finite accuracies fail the gate)."""
    gap = np.asarray(acc, float) - np.asarray(untrained_acc, float)
    return gap, np.where(np.isfinite(gap) & (gap >= gate_pp), 1.0, 0.0)


def policy_rows(name: str, pol: FedSSLPolicy, shape: FedShape, p: FedSSLParams, data: SSLData, out: TrainOutput,
                seeds: np.ndarray, rand_acc: np.ndarray, t_train: float, cond: dict, progress,
                cache: RunCache | None = None) -> list[dict]:
    """Result rows of one trained policy (final metrics, the beats_untrained gate, per-round curves)."""
    hl = health(out, seeds, name)
    for m in hl.messages:
        progress.log("WARNING " + m)
    glob = out.server.global_params if SHARE_CODE[pol.method] else None
    ev = evaluate(shape, p, data, [c.params for c in out.clients], glob, seeds, cache)
    b = bytes_per_round(shape, pol.method, pol.foa, data.public_x.shape[0])
    st = out.stats
    gap, gate = untrained_gate(ev["probe_acc"], rand_acc, p.gate_pp)
    metrics = {k: (v, "%") for k, v in ev.items()}
    metrics.update({
        "untrained_gap": (gap, "pp"),
        "beats_untrained": (gate, "bool"),
        "rel_corr_final": (relation_corr([c.rel for c in out.clients], [c.rel_ok for c in out.clients]), "corr"),
        "bytes_up_per_round": (np.full(len(seeds), b["up"]), "B"),
        "bytes_down_per_round": (np.full(len(seeds), b["down"]), "B"),
        "ssl_loss_final": (np.asarray(st.ssl_loss)[:, -1].mean(-1), "loss"),
        "align_loss_final": (np.asarray(st.align_loss)[:, -1].mean(-1), "loss"),
        "feat_std_final": (np.asarray(st.feat_std)[:, -1].mean(-1), "std"),
        "bad_steps": (hl.bad_steps.astype(float), "steps"),
        "collapsed_clients": (hl.collapsed.astype(float), "clients"),
        "train_seconds": (np.full(len(seeds), t_train / len(seeds)), "s"),
    })
    if pol.method == "fedu":
        metrics["dapu_global_frac"] = (np.asarray(st.dapu_global)[:, 1:].mean(axis=(1, 2)), "fraction")
    if pol.method == "fedema":
        metrics["ema_mu_mean"] = (np.asarray(st.ema_mu)[:, 1:].mean(axis=(1, 2)), "mu")
    if pol.calibrate:
        metrics["step_scale_mean"] = (np.asarray(st.step_scale)[:, 1:].mean(axis=(1, 2)), "scale")
    rows = metric_rows(name, metrics, seeds=seeds, **cond)
    if p.round_curves:
        for r in range(shape.rounds):
            rows += metric_rows(name, {
                "ssl_loss": (np.asarray(st.ssl_loss)[:, r].mean(-1), "loss"),
                "align_loss": (np.asarray(st.align_loss)[:, r].mean(-1), "loss"),
            }, seeds=seeds, round=r, **cond)
    if out.monitor is not None:
        rows += monitor_rows(name, out.monitor, shape, seeds, rand_acc, cond)
    progress.update(note=f"{name}: probe {ev['probe_acc'].mean():.2f}% (untrained {rand_acc.mean():.2f}%, "
                         f"train {t_train:.0f}s)")
    return rows


def monitor_rows(name: str, mon: dict, shape: FedShape, seeds: np.ndarray, rand_acc: np.ndarray, cond: dict,
                 ) -> list[dict]:
    """Per chunk of rounds: client-mean probe accuracy, its gap to the untrained encoders, cross-client CKA.
    ``round`` is the last round of the chunk; ``local_steps_done`` the SSL steps per client so far."""
    acc = np.asarray(mon["probe_acc"])  # [S, chunks, K]
    cka = np.asarray(mon["cka"])  # [S, chunks]
    per = shape.rounds // num_chunks(shape.rounds)
    rows = []
    for c in range(acc.shape[1]):
        r = (c + 1) * per - 1
        rows += metric_rows(name, {
            "probe_acc_round": (acc[:, c].mean(-1), "%"),
            "untrained_gap_round": (acc[:, c].mean(-1) - rand_acc, "pp"),
            "cka_round": (cka[:, c], "cka"),
        }, seeds=seeds, round=r, local_steps_done=(r + 1) * shape.local_steps, **cond)
    return rows


def untrained_params(shape: FedShape, seeds: np.ndarray) -> list:
    """Per group, the round-0 client parameters ``[S, k, ...]`` that training starts from (same keys as
    :func:`mlsys_repro.papers.fedfoa.federation.make_train`'s ``start``)."""
    def one(seed):
        return initial_params(shape, jax.random.split(jax.random.key(seed))[0])[1]

    return list(jax.vmap(one)(jnp.asarray(seeds)))


def random_init_rows(shape: FedShape, p: FedSSLParams, data: SSLData, seeds: np.ndarray, cond: dict,
                     cache: RunCache | None = None) -> tuple[list[dict], np.ndarray]:
    """Rows of the untrained encoders (policy ``random_init``: the initial weights every policy starts from):
    linear probe, fine-tuning from them (= supervised training from scratch on the labelled fraction) and the
    cross-client CKA at round 0; also returns their client-mean probe accuracy per seed ``[S]``."""
    inits = untrained_params(shape, seeds)
    ev = evaluate(shape, p, data, inits, None, seeds, cache)
    metrics = {k: (v, "%") for k, v in ev.items()}
    if shape.num_clients > 1:
        mon = make_monitor(shape, p, data, len(seeds), cache)(inits)
        metrics["cka_init"] = (np.asarray(mon["cka"]), "cka")
    return metric_rows("random_init", metrics, seeds=seeds, **cond), ev["probe_acc"]
