"""Diffusion convolution, the DCGRU cell and a DCRNN-style sequence-to-sequence model (flax NNX).

DCRNN (Li, Yu, Shahabi, Liu, ICLR 2018): a GRU whose matrix products are K-step diffusion convolutions over a
graph, stacked into an encoder-decoder. The decoder starts from a zero GO symbol and, during training, feeds
back either the ground truth or its own previous output (scheduled sampling with the inverse-sigmoid decay ``k
/ (k + exp(step / k))``, ``k = cl_decay_steps``).

Shapes: inputs ``[B, T, N, F]``; supports ``[S, N, N]`` (shared) or ``[B, S, N, N]`` (per sample, e.g. a graph
that changes from window to window); hidden states ``[B, N, H]``. The recurrences are ``lax.scan`` loops, so a
whole forward pass is one traced computation that jit, vmap and grad handle; modules are only read inside the
scans (no state mutation), which is what makes closing over them legal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mlsys_repro.common.graph.dense import diffusion_features


def inverse_sigmoid_decay(step: jax.Array, decay_steps: float) -> jax.Array:
    """Teacher-forcing probability of scheduled sampling: ``k / (k + exp(step / k))`` (1 at step 0, -> 0)."""
    k = jnp.asarray(decay_steps, jnp.float32)
    return k / (k + jnp.exp(jnp.minimum(jnp.asarray(step, jnp.float32) / k, 60.0)))


class DiffusionConv(nnx.Module):
    """``y = [X, P_s^k X ...] W + b`` over ``num_supports`` supports and ``max_step`` steps (DCRNN Eq. 2, one
    weight block per term), Xavier-normal weights as in the reference code."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_supports: int,
        max_step: int,
        *,
        bias_init: float = 0.0,
        rngs: nnx.Rngs,
    ):
        if in_dim < 1 or out_dim < 1 or num_supports < 0 or max_step < 0:
            raise ValueError(
                f"bad DiffusionConv sizes in={in_dim} out={out_dim} S={num_supports} K={max_step}"
            )
        self.in_dim, self.out_dim = in_dim, out_dim
        self.num_supports, self.max_step = num_supports, max_step
        terms = 1 + num_supports * max_step
        self.w = nnx.Param(nnx.initializers.xavier_normal()(rngs.params(), (terms * in_dim, out_dim)))
        self.b = nnx.Param(jnp.full((out_dim,), bias_init, jnp.float32))

    def __call__(self, x: jax.Array, supports: jax.Array | None) -> jax.Array:
        if self.num_supports * self.max_step == 0:
            return x @ self.w[...] + self.b[...]
        if supports is None or supports.shape[-3] != self.num_supports:
            got = None if supports is None else supports.shape
            raise ValueError(f"DiffusionConv expects {self.num_supports} supports, got {got}")
        return diffusion_features(x, supports, self.max_step) @ self.w[...] + self.b[...]


class DCGRUCell(nnx.Module):
    """GRU cell with diffusion convolutions: ``r, u = sigmoid(DC([x, h]))``, ``c = tanh(DC([x, r h]))``,
    ``h' = u h + (1 - u) c`` (DCRNN Eq. 3; gate bias initialised to 1 as in the reference code)."""

    def __init__(self, in_dim: int, hidden: int, num_supports: int, max_step: int, *, rngs: nnx.Rngs):
        self.hidden = hidden
        self.gates = DiffusionConv(
            in_dim + hidden, 2 * hidden, num_supports, max_step, bias_init=1.0, rngs=rngs
        )
        self.cand = DiffusionConv(in_dim + hidden, hidden, num_supports, max_step, rngs=rngs)

    def __call__(self, x: jax.Array, h: jax.Array, supports: jax.Array | None) -> jax.Array:
        ru = jax.nn.sigmoid(self.gates(jnp.concatenate([x, h], -1), supports))
        r, u = jnp.split(ru, 2, axis=-1)
        c = jnp.tanh(self.cand(jnp.concatenate([x, r * h], -1), supports))
        return u * h + (1.0 - u) * c


class DCRNN(nnx.Module):
    """Encoder-decoder of stacked DCGRU cells with a linear output projection and scheduled sampling.

    Args:
      in_dim: encoder input features per node and step.
      out_dim: predicted features per node and step (also the decoder's fed-back input).
      hidden, num_layers: cell width and depth (DCRNN: 64 units, 2 layers; GTS/EvoGWP: 128, 2).
      num_supports, max_step: support-stack size and diffusion steps (dual random walk: S = 2; K = 2).
      horizon: decoder steps.
      dec_aux_dim: extra known-in-advance decoder inputs per step (e.g. time of day); 0 = DCRNN's decoder.
      zero_output: start the output projection at zero (the model first predicts 0, e.g. "no change").
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: int,
        num_layers: int,
        num_supports: int,
        max_step: int,
        horizon: int,
        dec_aux_dim: int = 0,
        zero_output: bool = False,
        *,
        rngs: nnx.Rngs,
    ):
        if num_layers < 1 or horizon < 1:
            raise ValueError(f"num_layers and horizon must be >= 1, got {num_layers}, {horizon}")
        self.out_dim, self.hidden, self.horizon, self.dec_aux_dim = out_dim, hidden, horizon, dec_aux_dim
        self.encoder = nnx.List(
            [
                DCGRUCell(in_dim if i == 0 else hidden, hidden, num_supports, max_step, rngs=rngs)
                for i in range(num_layers)
            ]
        )
        self.decoder = nnx.List(
            [
                DCGRUCell(
                    out_dim + dec_aux_dim if i == 0 else hidden, hidden, num_supports, max_step, rngs=rngs
                )
                for i in range(num_layers)
            ]
        )
        init = nnx.initializers.zeros if zero_output else nnx.initializers.lecun_normal()
        self.proj = nnx.Linear(hidden, out_dim, kernel_init=init, rngs=rngs)

    def encode(self, x: jax.Array, supports: jax.Array | None) -> jax.Array:
        """Final hidden state of every layer, ``[L, B, N, H]``, after reading ``x: [B, T, N, F]``."""
        b, _, n, _ = x.shape
        h0 = jnp.zeros((len(self.encoder), b, n, self.hidden), x.dtype)

        def step(h, xt):
            inp, new = xt, []
            for i, cell in enumerate(self.encoder):
                inp = cell(inp, h[i], supports)
                new.append(inp)
            return jnp.stack(new), None

        h, _ = jax.lax.scan(step, h0, jnp.swapaxes(x, 0, 1))
        return h

    def decode(
        self,
        h: jax.Array,
        supports: jax.Array | None,
        *,
        go: jax.Array | None = None,
        targets: jax.Array | None = None,
        teacher_prob: jax.Array | float = 0.0,
        key: jax.Array | None = None,
        aux: jax.Array | None = None,
    ) -> jax.Array:
        """Roll the decoder ``horizon`` steps from encoder state ``h``; returns ``[B, Q, N, out_dim]``.

        ``go`` is the first fed input (zeros, DCRNN's GO symbol, by default). With ``targets``
        ``[B, Q, N, out]`` and a ``key``, each sample feeds back the true previous value with probability
        ``teacher_prob`` (scheduled sampling); without them the decoder always feeds back its own output
        (inference).
        """
        _, b, n, _ = h.shape
        q = self.horizon
        go = jnp.zeros((b, n, self.out_dim), h.dtype) if go is None else go
        use_tf = targets is not None and key is not None
        tgt = jnp.swapaxes(targets, 0, 1) if use_tf else jnp.zeros((q, b, n, self.out_dim), h.dtype)
        coins = (jax.random.uniform(key, (q, b)) < teacher_prob) if use_tf else jnp.zeros((q, b), bool)
        if self.dec_aux_dim:
            if aux is None or aux.shape[-1] != self.dec_aux_dim:
                raise ValueError(f"decoder expects aux inputs with {self.dec_aux_dim} features")
            auxs = jnp.swapaxes(aux, 0, 1)
        else:
            auxs = jnp.zeros((q, b, n, 0), h.dtype)

        def step(carry, xs):
            hs, prev = carry
            tgt_t, coin_t, aux_t = xs
            inp, new = jnp.concatenate([prev, aux_t], -1), []
            for i, cell in enumerate(self.decoder):
                inp = cell(inp, hs[i], supports)
                new.append(inp)
            out = self.proj(inp)
            fed = jnp.where(coin_t[:, None, None], tgt_t, out)
            return (jnp.stack(new), fed), out

        _, outs = jax.lax.scan(step, (h, go), (tgt, coins, auxs))
        return jnp.swapaxes(outs, 0, 1)

    def __call__(
        self, x: jax.Array, supports: jax.Array | None, *, dec_supports: jax.Array | None = None, **decode_kw
    ) -> jax.Array:
        """Encode ``x`` on ``supports`` and decode on ``dec_supports`` (default: the same)."""
        h = self.encode(x, supports)
        return self.decode(h, supports if dec_supports is None else dec_supports, **decode_kw)
