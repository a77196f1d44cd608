"""Evaluation of SSL encoders: linear probe on frozen features and semi-supervised fine-tuning.

* :func:`features` -- encoder representations (pre-projector) of many images for stacked client params.
* :func:`linear_probe` -- multinomial logistic regression on standardised frozen features, full-batch Adam for a
  fixed number of steps with a small L2 penalty (no hyperparameter is chosen on the test set).
* :func:`fine_tune` -- encoder + linear head trained end to end with cross-entropy on a small labelled subset
  (1 % / 10 % of the SSL pool), random horizontal flips, Adam; top-1 on the test set.

* :func:`centered_gram`, :func:`pairwise_cka`, :func:`mean_pairwise_cka` -- linear CKA (Kornblith et al., 2019)
  between clients' representations of the same images: basis-invariant, so it compares clients whose features
  live in unrelated bases or have different widths.

All are pure and ``vmap``-able over clients and seeds; :func:`compiled_eval` and :func:`compiled_monitor` share the
jitted forms per architecture and sizes through the run cache.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from mlsys_repro.common.models.small import cross_entropy
from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.papers.fedfoa.augment import eval_view
from mlsys_repro.papers.fedfoa.federation import COMPILER_OPTIONS
from mlsys_repro.papers.fedfoa.models import Net, NetSpec, Params, make_net


def features(net: Net, params: Params, images: jax.Array, image_size: int, mean: jax.Array, std: jax.Array,
             chunk: int = 500) -> jax.Array:
    """Representations ``[N, rep]`` of uint8 ``images [N, H, W, C]`` (evaluation view), ``chunk`` at a time."""
    n = images.shape[0]
    chunk = min(chunk, n)
    pad = (-n) % chunk
    xs = jnp.concatenate([images, jnp.zeros((pad, *images.shape[1:]), images.dtype)])
    xs = xs.reshape(-1, chunk, *images.shape[1:])
    out = jax.lax.map(lambda xb: net.encode(params, eval_view(xb, image_size, mean, std)), xs)
    return out.reshape(-1, out.shape[-1])[:n]


def linear_probe(f_train: jax.Array, y_train: jax.Array, f_test: jax.Array, y_test: jax.Array,
                 num_classes: int, steps: int = 300, lr: float = 0.05, l2: float = 1e-4) -> jax.Array:
    """Test top-1 of a logistic-regression probe trained on ``(f_train, y_train)`` (features standardised with
    the training statistics). Non-finite features give accuracy 0 rather than NaN (a collapsed encoder)."""
    ok = jnp.all(jnp.isfinite(f_train)) & jnp.all(jnp.isfinite(f_test))
    f_train = jnp.where(ok, f_train, 0.0)
    f_test = jnp.where(ok, f_test, 0.0)
    mu = f_train.mean(0)
    sd = f_train.std(0) + 1e-6
    xtr, xte = (f_train - mu) / sd, (f_test - mu) / sd
    w = {"w": jnp.zeros((xtr.shape[1], num_classes)), "b": jnp.zeros((num_classes,))}
    tx = optax.adam(lr)

    def loss(p):
        logits = xtr @ p["w"] + p["b"]
        return cross_entropy(logits, y_train) + l2 * jnp.sum(p["w"] ** 2)

    def step(carry, _):
        p, o = carry
        g = jax.grad(loss)(p)
        u, o = tx.update(g, o, p)
        return (optax.apply_updates(p, u), o), None

    (w, _), _ = jax.lax.scan(step, (w, tx.init(w)), None, length=steps)
    acc = jnp.mean(jnp.argmax(xte @ w["w"] + w["b"], axis=1) == y_test)
    return jnp.where(ok, acc, 0.0)


def fine_tune(net: Net, params: Params, key: jax.Array, x_lab: jax.Array, y_lab: jax.Array, x_test: jax.Array,
              y_test: jax.Array, *, num_classes: int, image_size: int, mean: jax.Array, std: jax.Array,
              steps: int, batch_size: int, lr: float = 1e-3) -> jax.Array:
    """Test top-1 after fine-tuning encoder + a linear head on the labelled subset ``(x_lab, y_lab)`` (uint8)."""
    head = {"w": jnp.zeros((net.spec.rep_dim, num_classes)), "b": jnp.zeros((num_classes,))}
    p0 = {"enc": params, "head": head}
    tx = optax.adam(lr)
    lab_view = eval_view(x_lab, image_size, mean, std)

    def logits(p, x):
        return net.encode(p["enc"], x) @ p["head"]["w"] + p["head"]["b"]

    def loss(p, x, y):
        return cross_entropy(logits(p, x), y)

    def step(carry, k):
        p, o = carry
        kb, kf = jax.random.split(k)
        j = jax.random.randint(kb, (batch_size,), 0, lab_view.shape[0])
        x = lab_view[j]
        flip = jax.random.uniform(kf, (batch_size, 1, 1, 1)) < 0.5
        x = jnp.where(flip, x[:, :, ::-1], x)
        g = jax.grad(loss)(p, x, y_lab[j])
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(g)]))
        u, o2 = tx.update(g, o, p)
        p2 = optax.apply_updates(p, u)
        p = jax.tree.map(lambda a, b: jnp.where(finite, a, b), p2, p)
        return (p, o2), None

    (p, _), _ = jax.lax.scan(step, (p0, tx.init(p0)), jax.random.split(key, steps))
    test_view_logits = features_logits(net, p, x_test, image_size, mean, std)
    acc = jnp.mean(jnp.argmax(test_view_logits, axis=1) == y_test)
    return jnp.where(jnp.all(jnp.isfinite(test_view_logits)), acc, 0.0)


def features_logits(net: Net, p, images, image_size, mean, std, chunk: int = 500) -> jax.Array:
    f = features(net, p["enc"], images, image_size, mean, std, chunk)
    return f @ p["head"]["w"] + p["head"]["b"]


def centered_gram(f: jax.Array) -> jax.Array:
    """``H F F^T H / ||H F F^T H||_F`` for features ``f [N, D]`` (``H`` centres the rows); zeros if not finite."""
    fc = f - f.mean(axis=0)
    k = fc @ fc.T
    norm = jnp.sqrt(jnp.sum(k * k))
    ok = jnp.isfinite(norm) & (norm > 0)
    return jnp.where(ok, k / jnp.where(ok, norm, 1.0), 0.0)


def pairwise_cka(grams: jax.Array) -> jax.Array:
    """Linear CKA ``[K, K]`` between clients from their normalised centred Gram matrices ``[K, N, N]``."""
    return jnp.einsum("inm,jnm->ij", grams, grams)


def mean_pairwise_cka(grams: jax.Array) -> jax.Array:
    """Mean linear CKA over the distinct client pairs (``grams [..., K, N, N]``, K >= 2) -> ``[...]``."""
    k = grams.shape[-3]
    if k < 2:
        raise ValueError("cross-client CKA needs at least two clients")
    m = jnp.einsum("...inm,...jnm->...ij", grams, grams)
    iu = jnp.triu_indices(k, 1)
    return m[..., iu[0], iu[1]].mean(-1)


def compiled_monitor(spec: NetSpec, image_size: int, num_classes: int, probe_steps: int, cka_samples: int,
                     cache: RunCache | None = None) -> Callable:
    """Jitted ``monitor(params [k], x_tr, y_tr, x_te, y_te, mean, std) -> (probe acc [k], gram [k, n, n])``: the
    linear probe of :func:`compiled_eval` and the normalised centred Gram of the first ``n = min(cka_samples,
    len(x_te))`` evaluation images' representations (for cross-client CKA). Built once per setting and run when
    ``cache`` (the run cache) is given."""

    def build() -> Callable:
        net = make_net(spec)

        def one(p, x_tr, y_tr, x_te, y_te, mean, std):
            ftr = features(net, p, x_tr, image_size, mean, std)
            fte = features(net, p, x_te, image_size, mean, std)
            acc = linear_probe(ftr, y_tr, fte, y_te, num_classes, steps=probe_steps)
            return acc, centered_gram(fte[:cka_samples])

        return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, None, None, None)),
                       compiler_options=COMPILER_OPTIONS)

    if cache is None:
        return build()
    return cache.get("fedfoa.monitor", (spec, image_size, num_classes, probe_steps, cka_samples), build)


def compiled_eval(spec: NetSpec, image_size: int, num_classes: int, probe_steps: int, ft_steps: int,
                  ft_batch: int, cache: RunCache | None = None) -> tuple[Callable, Callable]:
    """Jitted ``(probe, finetune)`` for one architecture, each ``vmap``ped over a leading client axis; built once
    per setting and run when ``cache`` (the run cache) is given.

    ``probe(params [k], x_tr, y_tr, x_te, y_te, mean, std) -> acc [k]``;
    ``finetune(params [k], keys [k], x_lab, y_lab, x_te, y_te, mean, std) -> acc [k]``.
    """

    def build() -> tuple[Callable, Callable]:
        net = make_net(spec)

        def probe_one(p, x_tr, y_tr, x_te, y_te, mean, std):
            ftr = features(net, p, x_tr, image_size, mean, std)
            fte = features(net, p, x_te, image_size, mean, std)
            return linear_probe(ftr, y_tr, fte, y_te, num_classes, steps=probe_steps)

        def ft_one(p, k, x_lab, y_lab, x_te, y_te, mean, std):
            return fine_tune(net, p, k, x_lab, y_lab, x_te, y_te, num_classes=num_classes, image_size=image_size,
                             mean=mean, std=std, steps=ft_steps, batch_size=ft_batch)

        probe = jax.jit(jax.vmap(probe_one, in_axes=(0, None, None, None, None, None, None)),
                        compiler_options=COMPILER_OPTIONS)
        ft = jax.jit(jax.vmap(ft_one, in_axes=(0, 0, None, None, None, None, None, None)),
                     compiler_options=COMPILER_OPTIONS)
        return probe, ft

    if cache is None:
        return build()
    return cache.get("fedfoa.eval", (spec, image_size, num_classes, probe_steps, ft_steps, ft_batch), build)
