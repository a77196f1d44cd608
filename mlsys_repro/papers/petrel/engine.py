"""Real numerics for the simulator: a model, its data, and a lazy batched gradient/evaluation service.

:class:`Task` holds a flax NNX classifier from :mod:`mlsys_repro.common.models.small` as a flat float32 parameter
vector, the training images on the device (uint8, normalised inside the jitted functions) and a test subset.

:class:`GradEngine` is shared by many simulations running side by side. ``request(w, idx)`` registers "the
gradient of the loss at parameters ``w`` on training examples ``idx``" and returns a :class:`Ticket` at once; the
simulator only needs the value when the gradient is applied at the PS, so requests pile up and ``flush()``
computes all of them in a few jitted calls, batched over requests (``vmap`` over stacked parameters and index sets;
``mode="map"`` computes them one after the other inside one jit, which makes each gradient independent of its
batch and bit-identical to a single-request call). Chunks are padded to powers of two so that only a handful of
shapes are ever compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from mlsys_repro.common.models.data import STATS
from mlsys_repro.common.models.small import accuracy, cross_entropy, make_model, pure


@dataclass(frozen=True)
class Ticket:
    """A gradient request; ``value`` (float32 [P]) and ``loss`` (minibatch loss at ``w``) exist once ready."""

    w: np.ndarray
    idx: np.ndarray
    box: list  # [grad, loss] once computed

    @property
    def ready(self) -> bool:
        return bool(self.box)

    @property
    def value(self) -> np.ndarray:
        if not self.box:
            raise RuntimeError("gradient requested before GradEngine.flush() computed it")
        return self.box[0]

    @property
    def loss(self) -> float:
        if not self.box:
            raise RuntimeError("loss requested before GradEngine.flush() computed it")
        return float(self.box[1])


@dataclass(frozen=True)
class EvalTicket:
    w: np.ndarray
    box: list  # [test accuracy, test loss]

    @property
    def ready(self) -> bool:
        return bool(self.box)


class Task:
    """A classifier on a dataset, with pure jitted gradient, evaluation and probe-loss functions."""

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, *,
                 dataset: str = "mnist", model: str = "mlp", init_seed: int = 0, probe_size: int = 512,
                 **model_kw):
        if x_train.dtype != np.uint8 or x_test.dtype != np.uint8:
            raise TypeError("Task expects uint8 images (normalised on the device)")
        self.dataset, self.model_name = dataset, model
        in_shape = tuple(int(d) for d in x_train.shape[1:])
        self.apply, params = pure(make_model(model, in_shape, 10, seed=init_seed, **model_kw))
        w0, self.unravel = ravel_pytree(params)
        self.w0 = np.asarray(w0, dtype=np.float32)
        self.num_params = int(self.w0.size)
        mean, std = (np.asarray(s, np.float32) for s in STATS[dataset])
        self._mean, self._std = jnp.asarray(mean), jnp.asarray(std)
        self.x_train = jnp.asarray(x_train)
        self.y_train = jnp.asarray(y_train.astype(np.int32))
        self.x_test = jnp.asarray(x_test)
        self.y_test = jnp.asarray(y_test.astype(np.int32))
        self.n_train = int(x_train.shape[0])
        rng = np.random.default_rng(0x9B0BE)
        self.probe_idx = jnp.asarray(rng.choice(self.n_train, min(probe_size, self.n_train), replace=False))

    @property
    def train_data(self) -> tuple[jax.Array, ...]:
        return self.x_train, self.y_train, self._mean, self._std

    @property
    def test_data(self) -> tuple[jax.Array, ...]:
        return self.x_test, self.y_test, self._mean, self._std

    def loss(self, data: tuple[jax.Array, ...], w: jax.Array, idx: jax.Array) -> jax.Array:
        """Mean cross-entropy at flat parameters ``w`` on training examples ``idx`` (``data``: train_data)."""
        x, y, mean, std = data
        xb = (x[idx].astype(jnp.float32) / 255.0 - mean) / std
        return cross_entropy(self.apply(self.unravel(w), xb), y[idx])

    def evaluate(self, data: tuple[jax.Array, ...], w: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(accuracy, mean cross-entropy) on ``data`` (test_data)."""
        x, y, mean, std = data
        logits = self.apply(self.unravel(w), (x.astype(jnp.float32) / 255.0 - mean) / std)
        return accuracy(logits, y), cross_entropy(logits, y)


# The data travel as arguments (not closed-over constants) so XLA does not embed them in the program. Requests that
# share a parameter version (a BSP round, a community round) share one row of ``W``; ``wi`` picks each request's row.
@partial(jax.jit, static_argnames=("task", "mode"))
def _grads(task: Task, mode: str, data, W: jax.Array, wi: jax.Array, I: jax.Array) -> tuple[jax.Array, jax.Array]:
    vg = jax.value_and_grad(partial(task.loss, data))
    if mode == "vmap":
        loss, g = jax.vmap(lambda j, idx: vg(W[j], idx))(wi, I)
    else:
        loss, g = jax.lax.map(lambda a: vg(W[a[0]], a[1]), (wi, I))
    return g, loss


@partial(jax.jit, static_argnames=("task",))
def _evals(task: Task, data, W: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.lax.map(partial(task.evaluate, data), W)


@partial(jax.jit, static_argnames=("task",))
def _probe(task: Task, data, w: jax.Array, idx: jax.Array) -> jax.Array:
    return task.loss(data, w, idx)


def single_gradient(task: Task, w: np.ndarray, idx: np.ndarray, mode: str = "map") -> tuple[np.ndarray, float]:
    """One gradient through the same compiled path as the engine's smallest chunk (padded to its size: a
    one-trip ``lax.map`` compiles to straight-line code whose loss can differ in the last bit)."""
    n = _bucket(1, 1 << 30)
    g, loss = _grads(task, mode, task.train_data, jnp.asarray(w[None]), jnp.zeros(n, jnp.int32),
                     jnp.asarray(np.repeat(idx[None].astype(np.int32), n, axis=0)))
    return np.asarray(g[0]), float(loss[0])


def _bucket(k: int, cap: int, floor: int = 4) -> int:
    """Padded batch size: the next power of two >= k, at least ``floor`` and at most ``cap``."""
    return min(cap, max(floor, 1 << max(0, (k - 1).bit_length())))


class GradEngine:
    """Lazy gradient and test-evaluation requests, computed in batches by :meth:`flush`."""

    def __init__(self, task: Task, mode: str = "vmap", max_chunk: int = 64):
        if mode not in ("vmap", "map"):
            raise ValueError(f"engine mode must be 'vmap' or 'map', got {mode!r}")
        self.task, self.mode, self.max_chunk = task, mode, max_chunk
        self._grad_q: list[Ticket] = []
        self._eval_q: list[EvalTicket] = []
        self.gradients_computed = 0
        self.evals_computed = 0
        self.flushes = 0

    @property
    def grad_bytes(self) -> int:
        return 4 * self.task.num_params

    def request(self, w: np.ndarray, idx: np.ndarray) -> Ticket:
        t = Ticket(w, np.asarray(idx, dtype=np.int32), [])
        self._grad_q.append(t)
        return t

    def request_eval(self, w: np.ndarray) -> EvalTicket:
        t = EvalTicket(w, [])
        self._eval_q.append(t)
        return t

    def pending(self) -> int:
        return len(self._grad_q) + len(self._eval_q)

    def probe_loss(self, w: np.ndarray) -> float:
        return float(_probe(self.task, self.task.train_data, jnp.asarray(w), self.task.probe_idx))

    def flush(self) -> None:
        """Compute every pending gradient and evaluation."""
        q, self._grad_q = self._grad_q, []
        if q:
            self.flushes += 1
        for s in range(0, len(q), self.max_chunk):
            chunk = q[s:s + self.max_chunk]
            k = len(chunk)
            kb = _bucket(k, self.max_chunk)
            rows: dict[int, int] = {}
            ws, wi = [], np.zeros(kb, dtype=np.int32)
            for j, t in enumerate(chunk):
                r = rows.get(id(t.w))
                if r is None:
                    r = rows[id(t.w)] = len(ws)
                    ws.append(t.w)
                wi[j] = r
            ub = 1 if len(ws) == 1 else kb  # two parameter-stack shapes per bucket keep compilations few
            W = np.stack(ws + [ws[0]] * (ub - len(ws)))
            I = np.stack([t.idx for t in chunk] + [chunk[0].idx] * (kb - k))
            g, loss = _grads(self.task, self.mode, self.task.train_data, jnp.asarray(W), jnp.asarray(wi),
                             jnp.asarray(I))
            g, loss = np.asarray(g), np.asarray(loss).tolist()
            for j, t in enumerate(chunk):
                t.box.append(g[j])
                t.box.append(loss[j])
            self.gradients_computed += k
        eq, self._eval_q = self._eval_q, []
        for s in range(0, len(eq), 16):
            chunk = eq[s:s + 16]
            kb = _bucket(len(chunk), 16)
            W = np.stack([t.w for t in chunk] + [chunk[0].w] * (kb - len(chunk)))
            acc, loss = _evals(self.task, self.task.test_data, jnp.asarray(W))
            acc, loss = np.asarray(acc).tolist(), np.asarray(loss).tolist()
            for j, t in enumerate(chunk):
                t.box.append(acc[j])
                t.box.append(loss[j])
            self.evals_computed += len(chunk)
