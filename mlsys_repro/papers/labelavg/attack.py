"""L-Attack: an honest-but-curious FD server reconstructs a client's private data from the outputs it uploads.

Threat model (our reconstruction, see README): the server chooses the "public" inputs clients score each round,
so it can hide query images in the public batch (:func:`deliver` / :func:`extract`); it sees only the target's
upload for those rows -- logits (FedMD; FedDF/FedAvg, where the server can compute them from the uploaded
model), softmax outputs (DS-FL) or packed hard labels (LabelAvg) -- and never the target's parameters.

The server trains a conditional generator ``G_theta(z, y)`` (an MLP, pixels in [0, 1]) so that the target
assigns each generated image its intended class ``y``, under an image prior::

    L(x) = loss_y(view(x)) + tv_weight * TV(x) + l2_weight * mean(x**2)      (x in normalised units)

``loss_y`` is the cross-entropy of the view (logits / probabilities) or, for hard labels, the 0-1 loss: the
only loss a label view defines. Its gradient in ``x`` is obtained as below and pushed through the generator with
``jax.vjp``. Every attacker searches the same subspace: with ``direction_res = r > 0`` the black-box attackers draw
their directions ``u = U z`` on an ``r x r`` grid upsampled bilinearly (``U``), so their estimates have expectation
``U U^T grad``; the gradient-based attackers use exactly that projection.

``zo`` (L-Attack)      two-point random-direction estimator (ZOO, Chen et al. 2017; DFME, Truong et al. 2021)
                       ``g = 1/q sum_i (L(x + mu u_i) - L(x)) / mu * u_i``.
``sign`` (adaptive)    label-only attacker for hard labels: the gradient of the Gaussian-smoothed success
                       ``E_u[1{label(x + delta u) = y}]`` by Stein's identity with a mean baseline (the
                       HopSkipJump-style estimator), ``g = -1/(q delta) sum_i (phi_i - mean phi) u_i``.
``whitebox``           ``U U^T grad_x`` of the cross-entropy through the target model: the zo estimator's own
                       expectation (mu -> 0, q -> inf), so the same search space, prior and steps without the
                       estimation noise; a reference that needs the parameters (which FedDF / FedAvg servers do
                       receive).
``surrogate``          the same exact, projected gradient through a **surrogate** the server trained on the
                       (public input, upload) pairs it received during training (:mod:`.surrogate`); it spends no
                       queries. Whatever the attacker, the target-label rate is read from the real target's view.
``init``               the generator at initialisation: the no-information reference.

Every attacker gets the same number of generator steps and, for the two query attackers, the same number of
queries (``q + 1`` per image per step).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mlsys_repro.common.models.small import per_example_cross_entropy
from mlsys_repro.papers.labelavg import methods as M
from mlsys_repro.papers.labelavg.schemas import AttackConfig

# what the server reads from each method's upload (FedDF / FedAvg: logits computed from the received model)
VIEW = {"labelavg": "labelavg", "dsfl": "dsfl", "fedmd": "fedmd", "feddf": "fedmd", "fedavg": "fedmd"}


class Generator(nnx.Module):
    """``G(z, onehot(y))``: MLP ``[latent + C] -> 256 -> 512 -> H*W*C``, sigmoid pixels in [0, 1]."""

    def __init__(self, latent_dim: int, num_classes: int, out_shape: tuple[int, int, int], *, rngs: nnx.Rngs,
                 hidden: tuple[int, int] = (256, 512)):
        self.out_shape = tuple(out_shape)
        self.l1 = nnx.Linear(latent_dim + num_classes, hidden[0], rngs=rngs)
        self.l2 = nnx.Linear(hidden[0], hidden[1], rngs=rngs)
        self.out = nnx.Linear(hidden[1], math.prod(out_shape), rngs=rngs)

    def __call__(self, z: jax.Array, y_onehot: jax.Array) -> jax.Array:
        h = jax.nn.relu(self.l1(jnp.concatenate([z, y_onehot], axis=-1)))
        h = jax.nn.relu(self.l2(h))
        return jax.nn.sigmoid(self.out(h)).reshape(-1, *self.out_shape)


def make_view(method: str, apply_t: Callable, num_classes: int) -> Callable:
    """``view(params_t, x [n, ...]) -> what the server decodes``: labels ``[n]`` or scores ``[n, C]``.

    Runs the target client's own upload code (:func:`methods.client_upload`) and the server's decoder.
    """
    m = VIEW[method]

    def view(params_t, x):
        payload = M.client_upload(m, apply_t(params_t, x)[None], num_classes)
        return M.server_decode(m, payload, x.shape[0], num_classes)[0]

    return view


def view_loss(method: str, out: jax.Array, y: jax.Array) -> jax.Array:
    """Per-query loss the attacker can compute from the view: CE of logits / probabilities, 0-1 for labels."""
    m = VIEW[method]
    if m == "labelavg":
        return (out != y).astype(jnp.float32)
    if m == "dsfl":
        return -jnp.log(jnp.maximum(jnp.take_along_axis(out, y[:, None], -1)[:, 0], 1e-30))
    return per_example_cross_entropy(out, y)


def view_labels(method: str, out: jax.Array) -> jax.Array:
    return out if VIEW[method] == "labelavg" else out.argmax(-1)


def deliver(key: jax.Array, public_x: jax.Array, queries: jax.Array, query_fraction: float
            ) -> tuple[jax.Array, jax.Array]:
    """Hide ``Q`` queries among real public samples: a shuffled batch of ``ceil(Q / fraction)`` rows.

    Returns ``(batch, positions)`` with ``batch[positions] == queries``; needs ``len(public_x) >= P - Q``.
    """
    q = queries.shape[0]
    p = math.ceil(q / query_fraction)
    if public_x.shape[0] < p - q:
        raise ValueError(f"{q} queries at fraction {query_fraction} need {p - q} public rows, have "
                         f"{public_x.shape[0]}")
    k1, k2 = jax.random.split(key)
    stacked = jnp.concatenate([queries, public_x[jax.random.permutation(k1, public_x.shape[0])[: p - q]]])
    perm = jax.random.permutation(k2, p)  # batch[i] = stacked[perm[i]]
    return stacked[perm], jnp.argsort(perm)[:q]


def extract(rows: jax.Array, positions: jax.Array) -> jax.Array:
    """The server reads back the rows of the decoded upload that answer its queries."""
    return rows[positions]


def directions(key: jax.Array, b: int, q: int, shape: tuple[int, ...], res: int = 0) -> jax.Array:
    """``q`` Gaussian search directions per image, ``[b, q, d]``.

    ``res > 0`` draws them on a ``res x res`` grid and resizes bilinearly to the image size (AutoZOOM's
    dimension reduction, Tu et al., AAAI 2019): the estimate then lives in a ``res*res*C``-dimensional
    smooth subspace, so far fewer queries give a useful direction.
    """
    h, w, c = shape
    if res <= 0 or res >= min(h, w):
        return jax.random.normal(key, (b, q, h * w * c))
    low = jax.random.normal(key, (b, q, res, res, c))
    up = jax.image.resize(low, (b, q, h, w, c), method="bilinear")
    return up.reshape(b, q, -1)


def subspace_project(g: jax.Array, res: int = 0) -> jax.Array:
    """``U U^T g`` per image (``g [B, H, W, C]``), ``U`` the bilinear ``res x res -> H x W`` upsampling of
    :func:`directions`: the expectation of ``u u^T g`` over its directions ``u = U z``, ``z ~ N(0, I)``.

    The result lies in the range of ``U`` (the smooth subspace the black-box attackers search). Identity when
    ``res <= 0`` or ``res >= min(H, W)`` (full-resolution directions).
    """
    b, h, w, c = g.shape
    if res <= 0 or res >= min(h, w):
        return g

    def up(low):
        return jax.image.resize(low, (b, h, w, c), method="bilinear")

    _, pull = jax.vjp(up, jnp.zeros((b, res, res, c), g.dtype))
    (low,) = pull(g)
    return up(low)


def _queries(x: jax.Array, key: jax.Array, q: int, step: float, res: int = 0) -> tuple[jax.Array, jax.Array]:
    """``x [B, ...]`` and ``x + step * u_i`` for ``q`` directions each: ``([B * (q+1), ...], u [B, q, d])``."""
    b = x.shape[0]
    d = math.prod(x.shape[1:])
    u = directions(key, b, q, x.shape[1:], res)
    xf = x.reshape(b, 1, d)
    return jnp.concatenate([xf, xf + step * u], axis=1).reshape(-1, *x.shape[1:]), u


def zo_gradient(loss: Callable[[jax.Array], jax.Array], x: jax.Array, key: jax.Array, q: int, mu: float,
                res: int = 0) -> jax.Array:
    """Two-point zeroth-order estimate of ``grad L_b(x_b)`` for every image: ``mean_i (L(x+mu u_i)-L(x))/mu u_i``.

    ``loss`` maps a query batch ``[n, ...]`` to per-query losses ``[n]`` (queries are ordered image by image:
    ``x_b`` then its ``q`` perturbations). Unbiased for the Gaussian-smoothed loss (Nesterov and Spokoiny, 2017).
    """
    qs, u = _queries(x, key, q, mu, res)
    l = loss(qs).reshape(x.shape[0], q + 1)
    return (((l[:, 1:] - l[:, :1]) / mu)[..., None] * u).mean(1).reshape(x.shape)


def sign_gradient(hit: Callable[[jax.Array], jax.Array], x: jax.Array, key: jax.Array, q: int, delta: float,
                  res: int = 0) -> jax.Array:
    """Label-only estimate: minus the gradient of ``E_u[hit(x + delta u)]`` (Stein's identity, mean baseline).

    ``hit`` maps queries to booleans (``label == target``). Uses the same ``q + 1`` queries per image as
    :func:`zo_gradient` (the centre query is spent but only the ``q`` perturbed answers enter the estimate).
    """
    qs, u = _queries(x, key, q, delta, res)
    h = hit(qs).astype(jnp.float32).reshape(x.shape[0], q + 1)[:, 1:]
    return -(((h - h.mean(1, keepdims=True)) / delta)[..., None] * u).mean(1).reshape(x.shape)


def _tv(x: jax.Array) -> jax.Array:
    return jnp.abs(jnp.diff(x, axis=-3)).mean() + jnp.abs(jnp.diff(x, axis=-2)).mean()


@dataclass(frozen=True)
class AttackSetup:
    method: str
    attacker: str
    in_shape: tuple[int, int, int]
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    cfg: AttackConfig

    @property
    def batch(self) -> int:
        return self.num_classes * self.cfg.images_per_class

    @property
    def queries_per_step(self) -> int:
        return self.batch * (self.cfg.directions + 1) if self.attacker in ("zo", "sign") else 0

    def rounds_needed(self, public_batch: int) -> int:
        """Protocol rounds to deliver all queries at ``query_fraction`` of a ``public_batch``-row round."""
        per_round = max(1, int(self.cfg.query_fraction * public_batch))
        return math.ceil(self.queries_per_step * self.cfg.steps / per_round)


def make_attack(setup: AttackSetup, apply_t: Callable, grad_apply: Callable | None = None) -> Callable:
    """``attack(key, params_t, params_g=None) -> (x_pix [B, H, W, C], classes [B], target_label_rate)``; pure,
    vmappable.

    ``params_t`` is used *only* inside the view (what the client uploads) except for the ``whitebox``
    reference. ``surrogate`` differentiates ``grad_apply(params_g, x)`` (the server's surrogate) instead and
    queries the target only to score the result. Slot ``b`` reconstructs class ``b // images_per_class``.
    """
    cfg, C, B = setup.cfg, setup.num_classes, setup.batch
    mean = jnp.asarray(setup.mean, jnp.float32)
    std = jnp.asarray(setup.std, jnp.float32)
    view = make_view(setup.method, apply_t, C)
    ys = jnp.repeat(jnp.arange(C), cfg.images_per_class)
    yoh = jax.nn.one_hot(ys, C)
    gdef = nnx.split(nnx.eval_shape(lambda: Generator(cfg.latent_dim, C, setup.in_shape, rngs=nnx.Rngs(0))),
                     nnx.Param)[0]
    tx = optax.adam(cfg.lr)

    def gen(theta, z):
        return (nnx.merge(gdef, theta)(z, yoh) - mean) / std  # normalised units

    def prior(x):
        return cfg.tv_weight * _tv(x) + cfg.l2_weight * jnp.mean(x**2)

    def blackbox_grad(params_t, x, key):
        """Per-image gradient estimate ``[B, H, W, C]`` of the view loss, from queries only."""
        if setup.attacker == "zo":
            return zo_gradient(lambda q: view_loss(setup.method, view(params_t, q), yq), x, key, cfg.directions,
                               cfg.mu, cfg.direction_res)
        return sign_gradient(lambda q: view_labels(setup.method, view(params_t, q)) == yq, x, key, cfg.directions,
                             cfg.sign_delta, cfg.direction_res)

    yq = jnp.repeat(ys, cfg.directions + 1)

    def exact_grad(apply, params, x):
        """The exact cross-entropy gradient, projected on the black-box attackers' search subspace."""
        g = jax.grad(lambda xx: per_example_cross_entropy(apply(params, xx), ys).sum())(x)
        return subspace_project(g, cfg.direction_res)

    if setup.attacker == "surrogate" and grad_apply is None:
        raise ValueError("the surrogate attacker needs grad_apply (the surrogate model's apply)")

    def attack(key, params_t, params_g=None):
        k_g, k_z, k_s = jax.random.split(key, 3)
        theta = nnx.split(Generator(cfg.latent_dim, C, setup.in_shape, rngs=nnx.Rngs(k_g)), nnx.Param)[1]
        z = jax.random.normal(k_z, (B, cfg.latent_dim))
        opt = tx.init(theta)

        def step(carry, k):
            th, o = carry
            x, pull = jax.vjp(lambda t: gen(t, z), th)
            if setup.attacker == "whitebox":
                g = exact_grad(apply_t, params_t, x)
            elif setup.attacker == "surrogate":
                g = exact_grad(grad_apply, params_g, x)
            else:
                g = blackbox_grad(params_t, x, k)
            g = g / B + jax.grad(prior)(x)
            (gt,) = pull(g)
            upd, o = tx.update(gt, o, th)
            return (optax.apply_updates(th, upd), o), None

        if setup.attacker != "init":
            (theta, _), _ = jax.lax.scan(step, (theta, opt), jax.random.split(k_s, cfg.steps))
        x = gen(theta, z)
        rate = (view_labels(setup.method, view(params_t, x)) == ys).astype(jnp.float32)
        return x * std + mean, ys, rate

    return attack


def make_attacks(setup: AttackSetup, apply_t: Callable, grad_apply: Callable | None = None) -> Callable:
    """``attacks(keys [S, R], params_t [S, ...], params_g [S, ...] = None) -> (x_pix [S, R, B, H, W, C],
    classes [B], rate [S, R, B])``, jitted (``params_g``: the surrogate's parameters, ``surrogate`` only).

    ``R`` independent runs of :func:`make_attack` against each of ``S`` targets (seeds): each run has its own
    generator, latent codes and query directions and the full per-attack budget (``steps`` x
    ``queries_per_step``). Repeats are a measurement device: they sample the same attack ``R`` times to shrink a
    seed's error (a seed's target holds only 5-7 attackable classes), they do not pool queries into a stronger
    attacker. Adding images per class instead would change the attack: one generator then spreads the same
    steps over more images.
    """
    one = make_attack(setup, apply_t, grad_apply)
    per_target = jax.vmap(one, in_axes=(0, None, None))  # over repeats

    @jax.jit
    def attacks(keys, params_t, params_g=None):
        x, ys, rate = jax.vmap(per_target)(keys, params_t, params_g)
        return x, ys[0, 0], rate

    return attacks
