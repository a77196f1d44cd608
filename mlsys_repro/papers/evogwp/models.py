"""Every learned forecaster of the paper reproduction, as flax NNX modules with one calling convention.

``model(batch, teacher_prob=p, key=k) -> [B, Q, N]`` forecasts in *standardised* units. ``batch`` holds

* ``x [B, P, N]`` standardised, gap-filled inputs; ``tod_in [B, P]`` / ``tod_out [B, Q]`` time-of-day phase in
  [0, 1) of the input and target steps (known in advance);
* ``y_std [B, Q, N]`` the standardised targets, used only for scheduled sampling while training;
* graph inputs where a model needs them: ``static_adj [N, N]`` (correlation graph), ``ctx_sdist [B, C, N, K]``
  and ``ctx_adj [B, C, N, N]`` (shapelet distances and evolution adjacency of the C history segments).

Recurrent and graph models (EvoGWP, DCRNN, Graph WaveNet, LSTM/GRU) share one input/output convention (our
design, applied to all of them alike): input features per step are ``[x, x - x_last, sin, cos(2 pi tod)]`` and
the output is a change added to the last observed value ``x_last``, and the output layer starts at zero, so an
untrained model forecasts the last value. DLinear and PatchTST keep their own papers' conventions (raw input;
RevIN).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from mlsys_repro.common.graph.dcrnn import DCRNN
from mlsys_repro.common.graph.dense import adaptive_adjacency, diffusion_terms, dual_random_walk, random_walk
from mlsys_repro.papers.evogwp.evolution import union_adjacency

IN_DIM = 4  # [x, x - x_last, sin tod, cos tod]
GRAPHS = ("evolution", "static", "union", "none")  # EvoGWP's graph switch
ZERO = (
    nnx.initializers.zeros
)  # output layers of the residual models: an untrained model forecasts the last value
AUX_DIM = 2  # decoder: [sin tod, cos tod] of the step being predicted


def _tod(phase: jax.Array) -> jax.Array:
    a = 2.0 * jnp.pi * phase
    return jnp.stack([jnp.sin(a), jnp.cos(a)], -1)


def features(batch: dict) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Encoder features ``[B, P, N, 4]``, decoder aux ``[B, Q, N, 2]`` and ``x_last [B, N]``."""
    x = batch["x"]
    b, p, n = x.shape
    last = x[:, -1]
    tin = jnp.broadcast_to(_tod(batch["tod_in"])[:, :, None, :], (b, p, n, 2))
    q = batch["tod_out"].shape[1]
    tout = jnp.broadcast_to(_tod(batch["tod_out"])[:, :, None, :], (b, q, n, 2))
    f = jnp.concatenate([x[..., None], (x - last[:, None])[..., None], tin], -1)
    return f, tout, last


def _teacher(batch: dict, last: jax.Array, key) -> dict:
    """Scheduled-sampling arguments: targets as changes from ``x_last`` (``[B, Q, N, 1]``)."""
    if key is None or "y_std" not in batch:
        return {}
    return {"targets": (batch["y_std"] - last[:, None])[..., None], "key": key}


# ============================================================================================ seq2seq RNN


class LSTMCell(nnx.Module):
    def __init__(self, in_dim: int, hidden: int, *, rngs: nnx.Rngs):
        self.hidden = hidden
        self.lin = nnx.Linear(in_dim + hidden, 4 * hidden, rngs=rngs)

    def __call__(self, x, state):
        h, c = state[0], state[1]
        i, f, g, o = jnp.split(self.lin(jnp.concatenate([x, h], -1)), 4, -1)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return jnp.stack([h, c]), h


class GRUCell(nnx.Module):
    """The GRU of DCRNN's FC-GRU baseline: ``c = tanh(W [x, r h])``, ``h' = u h + (1 - u) c``."""

    def __init__(self, in_dim: int, hidden: int, *, rngs: nnx.Rngs):
        self.hidden = hidden
        self.gates = nnx.Linear(in_dim + hidden, 2 * hidden, bias_init=nnx.initializers.ones, rngs=rngs)
        self.cand = nnx.Linear(in_dim + hidden, hidden, rngs=rngs)

    def __call__(self, x, state):
        h = state[0]
        r, u = jnp.split(jax.nn.sigmoid(self.gates(jnp.concatenate([x, h], -1))), 2, -1)
        c = jnp.tanh(self.cand(jnp.concatenate([x, r * h], -1)))
        h = u * h + (1.0 - u) * c
        return h[None], h


class Seq2SeqRNN(nnx.Module):
    """FC-LSTM / FC-GRU encoder-decoder (Sutskever et al. 2014; DCRNN's baselines), one series per node with
    weights shared across nodes, no graph; scheduled sampling as in DCRNN."""

    def __init__(self, cell: str, horizon: int, hidden: int = 64, num_layers: int = 1, *, rngs: nnx.Rngs):
        if cell not in ("lstm", "gru"):
            raise ValueError(f"cell must be lstm or gru, got {cell!r}")
        cls = LSTMCell if cell == "lstm" else GRUCell
        self.state_parts = 2 if cell == "lstm" else 1
        self.hidden, self.horizon = hidden, horizon
        self.enc = nnx.List([cls(IN_DIM if i == 0 else hidden, hidden, rngs=rngs) for i in range(num_layers)])
        self.dec = nnx.List(
            [cls(1 + AUX_DIM if i == 0 else hidden, hidden, rngs=rngs) for i in range(num_layers)]
        )
        self.proj = nnx.Linear(hidden, 1, kernel_init=ZERO, rngs=rngs)

    def __call__(self, batch: dict, *, teacher_prob=0.0, key=None) -> jax.Array:
        f, aux, last = features(batch)
        b, p, n, fd = f.shape
        q = self.horizon
        bn = b * n
        xs = jnp.transpose(f, (1, 0, 2, 3)).reshape(p, bn, fd)
        s0 = jnp.zeros((len(self.enc), self.state_parts, bn, self.hidden), f.dtype)

        def run(cells, states, inp):
            new = []
            for i, cell in enumerate(cells):
                st, inp = cell(inp, states[i])
                new.append(st)
            return jnp.stack(new), inp

        def enc_step(st, xt):
            return run(self.enc, st, xt)[0], None

        st, _ = jax.lax.scan(enc_step, s0, xs)
        auxs = jnp.transpose(aux, (1, 0, 2, 3)).reshape(q, bn, AUX_DIM)
        tf = _teacher(batch, last, key)
        if tf:
            tgt = jnp.transpose(tf["targets"], (1, 0, 2, 3)).reshape(q, bn, 1)
            coins = jnp.repeat(jax.random.uniform(key, (q, b)) < teacher_prob, n, axis=1)
        else:
            tgt, coins = jnp.zeros((q, bn, 1), f.dtype), jnp.zeros((q, bn), bool)

        def dec_step(carry, xs_t):
            st, prev = carry
            aux_t, tgt_t, coin_t = xs_t
            st, h = run(self.dec, st, jnp.concatenate([prev, aux_t], -1))
            out = self.proj(h)
            return (st, jnp.where(coin_t[:, None], tgt_t, out)), out

        _, outs = jax.lax.scan(dec_step, (st, jnp.zeros((bn, 1), f.dtype)), (auxs, tgt, coins))
        delta = outs.reshape(q, b, n).transpose(1, 0, 2)
        return last[:, None] + delta


# ============================================================================================ DLinear


class DLinear(nnx.Module):
    """DLinear (Zeng et al., AAAI 2023): moving-average trend + remainder, one linear map over time each
    (shared across series, ``individual=False``), outputs summed."""

    def __init__(self, input_len: int, horizon: int, kernel: int = 25, *, rngs: nnx.Rngs):
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"moving-average kernel must be odd and >= 1, got {kernel}")
        self.kernel = kernel
        # DLinear initialises both maps to the mean (weights 1/P)
        init = nnx.initializers.constant(1.0 / input_len)
        self.seasonal = nnx.Linear(input_len, horizon, kernel_init=init, rngs=rngs)
        self.trend = nnx.Linear(input_len, horizon, kernel_init=init, rngs=rngs)

    def __call__(self, batch: dict, *, teacher_prob=0.0, key=None) -> jax.Array:
        x = jnp.swapaxes(batch["x"], 1, 2)  # [B, N, P]
        pad = (self.kernel - 1) // 2
        xp = jnp.concatenate([jnp.repeat(x[..., :1], pad, -1), x, jnp.repeat(x[..., -1:], pad, -1)], -1)
        c = jnp.cumsum(jnp.pad(xp, ((0, 0), (0, 0), (1, 0))), -1)
        trend = (c[..., self.kernel :] - c[..., : -self.kernel]) / self.kernel
        y = self.seasonal(x - trend) + self.trend(trend)
        return jnp.swapaxes(y, 1, 2)


# ============================================================================================ PatchTST


class _EncoderLayer(nnx.Module):
    def __init__(self, d: int, heads: int, ff: int, *, rngs: nnx.Rngs):
        self.heads = heads
        self.qkv = nnx.Linear(d, 3 * d, rngs=rngs)
        self.out = nnx.Linear(d, d, rngs=rngs)
        self.n1, self.n2 = nnx.LayerNorm(d, rngs=rngs), nnx.LayerNorm(d, rngs=rngs)
        self.f1, self.f2 = nnx.Linear(d, ff, rngs=rngs), nnx.Linear(ff, d, rngs=rngs)

    def __call__(self, z):
        m, t, d = z.shape
        q, k, v = jnp.split(self.qkv(z), 3, -1)
        hd = d // self.heads
        q, k, v = (a.reshape(m, t, self.heads, hd) for a in (q, k, v))
        att = jax.nn.softmax(jnp.einsum("mthd,mshd->mhts", q, k) / math.sqrt(hd), -1)
        a = jnp.einsum("mhts,mshd->mthd", att, v).reshape(m, t, d)
        z = self.n1(z + self.out(a))
        return self.n2(z + self.f2(jax.nn.gelu(self.f1(z))))


class PatchTST(nnx.Module):
    """PatchTST (Nie et al., ICLR 2023), channel-independent: RevIN, patches (end-padded by repeating the last
    value ``stride`` times), a Transformer encoder with learned positions, and a flatten-linear head."""

    def __init__(
        self,
        input_len: int,
        horizon: int,
        patch_len: int,
        stride: int,
        d_model: int = 32,
        heads: int = 4,
        layers: int = 2,
        ff: int = 64,
        *,
        rngs: nnx.Rngs,
    ):
        if patch_len > input_len or stride < 1 or d_model % heads:
            raise ValueError(
                f"bad PatchTST sizes: P={input_len} patch={patch_len} stride={stride} d={d_model}"
            )
        self.patch_len, self.stride = patch_len, stride
        self.num_patches = (input_len - patch_len) // stride + 2
        self.embed = nnx.Linear(patch_len, d_model, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (self.num_patches, d_model)))
        self.layers = nnx.List([_EncoderLayer(d_model, heads, ff, rngs=rngs) for _ in range(layers)])
        self.head = nnx.Linear(self.num_patches * d_model, horizon, rngs=rngs)
        self.rev_w, self.rev_b = nnx.Param(jnp.ones(())), nnx.Param(jnp.zeros(()))

    def __call__(self, batch: dict, *, teacher_prob=0.0, key=None) -> jax.Array:
        x = jnp.swapaxes(batch["x"], 1, 2)  # [B, N, P]
        b, n, p = x.shape
        mu = x.mean(-1, keepdims=True)
        sd = jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
        z = (x - mu) / sd * self.rev_w[...] + self.rev_b[...]
        z = jnp.concatenate([z, jnp.repeat(z[..., -1:], self.stride, -1)], -1)
        idx = jnp.arange(self.num_patches)[:, None] * self.stride + jnp.arange(self.patch_len)[None]
        patches = z[..., idx].reshape(b * n, self.num_patches, self.patch_len)
        h = self.embed(patches) + self.pos[...]
        for layer in self.layers:
            h = layer(h)
        y = self.head(h.reshape(b * n, -1)).reshape(b, n, -1)
        y = (y - self.rev_b[...]) / (self.rev_w[...] + 1e-10) * sd + mu
        return jnp.swapaxes(y, 1, 2)


# ============================================================================================ DCRNN


class DCRNNForecaster(nnx.Module):
    """DCRNN (Li et al., ICLR 2018) on a fixed graph: dual random walk of ``batch['static_adj']``."""

    def __init__(
        self, horizon: int, hidden: int = 32, num_layers: int = 1, max_step: int = 2, *, rngs: nnx.Rngs
    ):
        self.net = DCRNN(
            IN_DIM,
            1,
            hidden,
            num_layers,
            2,
            max_step,
            horizon,
            dec_aux_dim=AUX_DIM,
            zero_output=True,
            rngs=rngs,
        )

    def __call__(self, batch: dict, *, teacher_prob=0.0, key=None) -> jax.Array:
        f, aux, last = features(batch)
        sup = dual_random_walk(batch["static_adj"])
        delta = self.net(f, sup, aux=aux, teacher_prob=teacher_prob, **_teacher(batch, last, key))
        return last[:, None] + delta[..., 0]


# ============================================================================================ Graph WaveNet


class GraphWaveNet(nnx.Module):
    """Graph WaveNet (Wu et al., IJCAI 2019): dilated causal gated TCN layers ("valid" convolutions after left
    zero-padding the input to the receptive field), each followed by a diffusion graph convolution on the
    forward/backward supports of a given graph plus the self-adaptive adjacency ``softmax(ReLU(E1 E2^T))``,
    with residual and skip connections and an output head on the skip sum at the last step. BatchNorm and
    dropout of the reference are left out (stateless; our short runs underfit rather than overfit).
    """

    def __init__(
        self,
        num_nodes: int,
        horizon: int,
        input_len: int,
        dilations: tuple[int, ...] = (1, 2, 4, 8),
        residual: int = 32,
        skip: int = 64,
        end: int = 128,
        emb_dim: int = 10,
        max_step: int = 2,
        *,
        rngs: nnx.Rngs,
    ):
        self.dilations = tuple(int(d) for d in dilations)
        self.receptive = 1 + sum(self.dilations)
        self.max_step = max_step
        self.start = nnx.Linear(IN_DIM, residual, rngs=rngs)
        self.fg = nnx.List([nnx.Linear(2 * residual, 2 * residual, rngs=rngs) for _ in self.dilations])
        self.skip = nnx.List([nnx.Linear(residual, skip, rngs=rngs) for _ in self.dilations])
        self.gconv = nnx.List(
            [nnx.Linear((1 + 3 * max_step) * residual, residual, rngs=rngs) for _ in self.dilations]
        )
        self.e1 = nnx.Param(jax.random.normal(rngs.params(), (num_nodes, emb_dim)))
        self.e2 = nnx.Param(jax.random.normal(rngs.params(), (num_nodes, emb_dim)))
        self.end1 = nnx.Linear(skip, end, rngs=rngs)
        self.end2 = nnx.Linear(end, horizon, kernel_init=ZERO, rngs=rngs)

    def __call__(self, batch: dict, *, teacher_prob=0.0, key=None) -> jax.Array:
        f, _, last = features(batch)
        b, p, n, _ = f.shape
        if p < self.receptive:
            f = jnp.pad(f, ((0, 0), (self.receptive - p, 0), (0, 0), (0, 0)))
        h = self.start(jnp.transpose(f, (0, 2, 1, 3)))  # [B, N, T, R]
        sup = jnp.concatenate(
            [dual_random_walk(batch["static_adj"]), adaptive_adjacency(self.e1[...], self.e2[...])[None]]
        )
        skip = 0.0
        for i, d in enumerate(self.dilations):
            res = h
            filt, gate = jnp.split(self.fg[i](jnp.concatenate([h[:, :, :-d], h[:, :, d:]], -1)), 2, -1)
            h = jnp.tanh(filt) * jax.nn.sigmoid(gate)  # [B, N, T - d, R]
            skip = self.skip[i](h[:, :, -1]) + skip
            terms = diffusion_terms(h.reshape(b, n, -1), sup, self.max_step)
            h = self.gconv[i](jnp.concatenate([z.reshape(h.shape) for z in terms], -1)) + res[:, :, d:]
        out = self.end2(jax.nn.relu(self.end1(jax.nn.relu(skip))))  # [B, N, Q]
        return last[:, None] + jnp.swapaxes(out, 1, 2)


# ============================================================================================ EvoGWP


class EvoLSTM(nnx.Module):
    """EvoNet-style (Hu et al., WSDM 2021) graph LSTM over the history segments: at segment c each workload
    reads its shapelet-distance state, the states of its evolution-graph neighbours and their hidden
    states."""

    def __init__(self, num_shapelets: int, hidden: int, *, rngs: nnx.Rngs):
        self.hidden = hidden
        self.lin = nnx.Linear(2 * num_shapelets + 2 * hidden, 4 * hidden, rngs=rngs)

    def __call__(self, sdist: jax.Array, adj: jax.Array) -> jax.Array:
        """``sdist [B, C, N, K]``, ``adj [B, C, N, N]`` -> node embeddings ``[B, N, H]`` after the last
        segment."""
        b, _, n, _ = sdist.shape
        h0 = jnp.zeros((2, b, n, self.hidden), sdist.dtype)

        def step(state, xs):
            x, a = xs
            h, c = state[0], state[1]
            p = random_walk(a)
            z = jnp.concatenate([x, p @ x, h, p @ h], -1)
            i, f, g, o = jnp.split(self.lin(z), 4, -1)
            c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return jnp.stack([h, c]), None

        state, _ = jax.lax.scan(step, h0, (jnp.swapaxes(sdist, 0, 1), jnp.swapaxes(adj, 0, 1)))
        return state[0]


class EvoGWP(nnx.Module):
    """EvoGWP's forecaster: an EvoLSTM over the evolution graph of the history segments gives node embeddings;
    an FC-LayerNorm-FC head turns them into two embedding channels whose ``softmax(ReLU(E1 E2^T))`` is a
    learned, window-specific adjacency; a DCGRU encoder-decoder diffuses over the dual random walk of the
    latest evolution adjacency plus that learned adjacency, with scheduled sampling.

    Ablation switches: ``graph`` = ``evolution`` | ``static`` (correlation graph instead of the evolution
    graph, also inside the EvoLSTM) | ``union`` (the union of both, :func:`~mlsys_repro.papers.evogwp.evolution.
    union_adjacency`, wherever the evolution graph is read) | ``none``; ``learned`` = ``evolstm`` | ``embedding``
    (free node embeddings as in Graph WaveNet; needs ``num_nodes``) | ``none``.
    """

    def __init__(
        self,
        horizon: int,
        num_shapelets: int,
        hidden: int = 32,
        num_layers: int = 1,
        max_step: int = 2,
        evo_hidden: int = 32,
        emb_dim: int = 8,
        graph: str = "evolution",
        learned: str = "evolstm",
        num_nodes: int = 0,
        *,
        rngs: nnx.Rngs,
    ):
        if graph not in GRAPHS or learned not in ("evolstm", "embedding", "none"):
            raise ValueError(f"bad EvoGWP switches graph={graph!r} learned={learned!r}")
        if graph == "none" and learned == "none":
            raise ValueError("EvoGWP needs a graph or a learned adjacency")
        if learned == "embedding" and num_nodes < 1:
            raise ValueError("learned='embedding' needs num_nodes")
        self.graph, self.learned = graph, learned
        nsup = (2 if graph != "none" else 0) + (1 if learned != "none" else 0)
        if learned == "evolstm":
            self.evolstm = EvoLSTM(num_shapelets, evo_hidden, rngs=rngs)
            self.h1 = nnx.Linear(evo_hidden, evo_hidden, rngs=rngs)
            self.norm = nnx.LayerNorm(evo_hidden, rngs=rngs)
            self.h2 = nnx.Linear(evo_hidden, 2 * emb_dim, rngs=rngs)
        elif learned == "embedding":
            self.e1 = nnx.Param(jax.random.normal(rngs.params(), (num_nodes, emb_dim)))
            self.e2 = nnx.Param(jax.random.normal(rngs.params(), (num_nodes, emb_dim)))
        self.net = DCRNN(
            IN_DIM,
            1,
            hidden,
            num_layers,
            nsup,
            max_step,
            horizon,
            dec_aux_dim=AUX_DIM,
            zero_output=True,
            rngs=rngs,
        )

    def context_adjacency(self, batch: dict) -> jax.Array:
        """``[B, C, N, N]``: the graph of each context segment as this variant reads it."""
        if self.graph == "static":
            b, _, n = batch["x"].shape
            return jnp.broadcast_to(batch["static_adj"], (b, batch["ctx_sdist"].shape[1], n, n))
        if self.graph == "union":
            return union_adjacency(batch["static_adj"], batch["ctx_adj"])
        return batch["ctx_adj"]

    def supports(self, batch: dict) -> jax.Array:
        """The ``[B, S, N, N]`` support stack of each window."""
        b, _, n = batch["x"].shape
        sup = []
        if self.graph == "evolution":
            sup.append(dual_random_walk(batch["ctx_adj"][:, -1]))
        elif self.graph == "union":
            sup.append(dual_random_walk(union_adjacency(batch["static_adj"], batch["ctx_adj"][:, -1])))
        elif self.graph == "static":
            sup.append(jnp.broadcast_to(dual_random_walk(batch["static_adj"]), (b, 2, n, n)))
        if self.learned == "evolstm":
            adj = batch["ctx_adj"] if self.graph in ("evolution", "none") else self.context_adjacency(batch)
            h = self.evolstm(batch["ctx_sdist"], adj)
            e = self.h2(jax.nn.relu(self.norm(self.h1(h))))
            e1, e2 = jnp.split(e, 2, -1)
            sup.append(adaptive_adjacency(e1, e2)[:, None])
        elif self.learned == "embedding":
            a = adaptive_adjacency(self.e1[...], self.e2[...])
            sup.append(jnp.broadcast_to(a, (b, 1, n, n)))
        return jnp.concatenate(sup, 1)

    def __call__(
        self,
        batch: dict,
        *,
        teacher_prob=0.0,
        key=None,
        shared_context: bool = False,
        product_dtype=None,
    ) -> jax.Array:
        """Forecasts ``[B, Q, N]``. ``shared_context=True`` promises that every window of the batch has the
        same context segments (origins in one grid segment, as when scoring every origin): the supports are
        then computed once, from the first window, and shared by the batch, so the diffusion products are
        one ``[S N, N] x [N, B F]`` product instead of ``B`` separate ones. Same forecasts, fewer FLOPs.

        ``product_dtype`` (inference only; ``None`` = float32): the supports are cast to it once, so every
        diffusion product takes its inputs in that dtype and accumulates in float32
        (:func:`~mlsys_repro.common.graph.dense.diffusion_terms`). ``jnp.bfloat16`` runs the products ~3.5x
        faster on CPUs with AMX/AVX512-BF16, at bfloat16 rounding of their inputs."""
        f, aux, last = features(batch)
        if shared_context:
            first = {k: v[:1] for k, v in batch.items() if k in ("x", "ctx_sdist", "ctx_adj")}
            if "static_adj" in batch:
                first["static_adj"] = batch["static_adj"]
            sup = self.supports(first)[0]
        else:
            sup = self.supports(batch)
        if product_dtype is not None:
            sup = sup.astype(product_dtype)
        delta = self.net(f, sup, aux=aux, teacher_prob=teacher_prob, **_teacher(batch, last, key))
        return last[:, None] + delta[..., 0]
