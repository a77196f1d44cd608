"""Which model a policy ``kind`` builds, which graph inputs it needs, and EvoGWP's shapelet/evolution inputs.

* ``builder(kind, hp, ...)`` -> ``build(rngs) -> nnx.Module`` for the neural kinds;
* ``needs_static_graph`` / ``needs_context``: the extra arrays a kind reads (correlation graph; shapelet
  distances and evolution graph of the history segments);
* ``fixed_entities``: whether the trained model is tied to the entity set it was trained on (a fixed graph or
  per-node embeddings). Models that are not (EvoGWP with its evolution graph, LSTM/GRU, DLinear, PatchTST) can
  forecast a file with entities they never saw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_repro.common.graph.dense import correlation_adjacency
from mlsys_repro.papers.evogwp import models
from mlsys_repro.papers.evogwp.arrays import Context
from mlsys_repro.papers.evogwp.evolution import EvolutionConfig, evolution_graph, graph_stats, link_threshold
from mlsys_repro.papers.evogwp.schemas import NEURAL, EvoGWPHP
from mlsys_repro.papers.evogwp.shapelets import ShapeletConfig, Shapelets, fit_shapelets, segment_distances


def needs_static_graph(kind: str, hp) -> bool:
    return kind in ("dcrnn", "gwnet") or (kind == "evogwp" and hp.graph in ("static", "union"))


def needs_context(kind: str, hp) -> bool:
    return kind == "evogwp"


def fixed_entities(kind: str, hp) -> bool:
    return kind in ("dcrnn", "gwnet") or (
        kind == "evogwp" and (hp.graph in ("static", "union") or hp.learned == "embedding")
    )


def patch_sizes(input_len: int, num_patches: int) -> tuple[int, int]:
    patch = max(2, min(input_len, int(round(2 * input_len / (num_patches + 1)))))
    return patch, max(1, patch // 2)


def doubling_dilations(input_len: int) -> tuple[int, ...]:
    """1, 2, 4, ... until the receptive field ``1 + sum`` covers ``input_len`` (WaveNet's doubling)."""
    out = [1]
    while 1 + sum(out) < input_len:
        out.append(2 * out[-1])
    return tuple(out)


def builder(kind: str, hp, *, num_nodes: int, input_len: int, horizon: int, num_shapelets: int = 0):
    """``build(rngs)`` for a neural ``kind`` with typed hyper-parameters ``hp``."""
    if kind not in NEURAL:
        raise ValueError(f"{kind!r} is not a neural forecaster")
    if kind in ("lstm", "gru"):
        return lambda rngs: models.Seq2SeqRNN(kind, horizon, hp.hidden, hp.num_layers, rngs=rngs)
    if kind == "dlinear":
        return lambda rngs: models.DLinear(input_len, horizon, hp.kernel, rngs=rngs)
    if kind == "patchtst":
        patch, stride = patch_sizes(input_len, hp.num_patches)
        return lambda rngs: models.PatchTST(
            input_len, horizon, patch, stride, hp.d_model, hp.heads, hp.layers, hp.ff, rngs=rngs
        )
    if kind == "dcrnn":
        return lambda rngs: models.DCRNNForecaster(horizon, hp.hidden, hp.num_layers, hp.max_step, rngs=rngs)
    if kind == "gwnet":
        dil = tuple(hp.dilations) or doubling_dilations(input_len)
        return lambda rngs: models.GraphWaveNet(
            num_nodes,
            horizon,
            input_len,
            dil,
            hp.residual,
            hp.skip,
            hp.end,
            hp.emb_dim,
            hp.max_step,
            rngs=rngs,
        )
    return lambda rngs: models.EvoGWP(
        horizon,
        num_shapelets,
        hp.hidden,
        hp.num_layers,
        hp.max_step,
        hp.evo_hidden,
        hp.emb_dim,
        hp.graph,
        hp.learned,
        num_nodes,
        rngs=rngs,
    )


def static_graph(train_values: np.ndarray, threshold: float) -> np.ndarray:
    """Correlation graph of the training part (DCRNN's thresholded Gaussian kernel)."""
    return correlation_adjacency(train_values, threshold)


# ------------------------------------------------------------------------------------------- EvoGWP inputs


@dataclass(frozen=True)
class EvoInputs:
    """What EvoGWP needs besides its weights: the shapelets, the link threshold and the standardisation of
    the shapelet distances (all from training data), plus the context geometry."""

    shapelets: Shapelets
    theta: float
    sd_mean: float
    sd_std: float
    context: Context
    evolution: EvolutionConfig

    def arrays(self, values_std: np.ndarray, phase0: int = 0) -> dict[str, np.ndarray]:
        """``sdist`` (standardised) and evolution ``adj`` of every grid segment of ``values_std [T, N]``,
        whose step 0 has time-of-day slot ``phase0`` (a multiple of the segment length)."""
        seg_len = self.shapelets.seg_len
        if phase0 % seg_len:
            raise ValueError(f"series must start on a segment boundary (phase {phase0}, segment {seg_len})")
        sd = segment_distances(self.shapelets, values_std, phase0 // seg_len)
        adj = evolution_graph(sd, self.theta, self.evolution)
        return {"sdist": ((sd - self.sd_mean) / self.sd_std).astype(np.float32), "adj": adj}

    def diagnostics(self, adj: np.ndarray, sdist: np.ndarray) -> dict[str, float]:
        """What the graph and the shapelets look like: :func:`~mlsys_repro.papers.evogwp.evolution.graph_stats` of
        ``adj``, how many distinct shapelets are some workload's nearest (``shapelet_distinct_nearest``, of K), the
        smallest pseudo-label class and the separation scores of the kept shapelets."""
        out = graph_stats(adj)
        sizes = np.bincount(self.shapelets.labels)
        out.update(
            {
                "shapelet_distinct_nearest": float(np.unique(np.asarray(sdist).argmin(-1)).size),
                "shapelet_classes": float(sizes.size),
                "shapelet_min_class_size": float(sizes.min()),
                "shapelet_score_max": float(np.max(self.shapelets.score)),
                "shapelet_score_mean": float(np.mean(self.shapelets.score)),
            }
        )
        return out


def shapelet_config(hp: EvoGWPHP, period: int) -> ShapeletConfig:
    if period % hp.segments_per_day:
        raise ValueError(f"segments_per_day {hp.segments_per_day} must divide the daily period {period}")
    return ShapeletConfig(
        num_shapelets=hp.num_shapelets,
        seg_len=period // hp.segments_per_day,
        candidates_per_shapelet=hp.candidates_per_shapelet,
        num_classes=hp.num_classes,
        min_class_size=hp.min_class_size,
        score=hp.shapelet_score,
        max_samples=hp.shapelet_samples,
        steps=hp.shapelet_steps if hp.learn_importance else 0,
    )


def fit_evo_inputs(
    values_std: np.ndarray, period: int, train_end: int, hp: EvoGWPHP, seed: int = 0
) -> EvoInputs:
    """Learn shapelets on the training part and fix the distance statistics (deterministic given ``seed``)."""
    cfg = shapelet_config(hp, period)
    shp = fit_shapelets(values_std, period, train_end, cfg, seed)
    sd_train = segment_distances(shp, values_std[:train_end])
    evo = EvolutionConfig(hp.link_percentile, 0.01, hp.top_shapelets, hp.top_transitions, hp.edge_fraction)
    sd_std = float(sd_train.std())
    return EvoInputs(
        shp,
        link_threshold(sd_train, hp.link_percentile),
        float(sd_train.mean()),
        sd_std if sd_std > 1e-9 else 1.0,
        Context(cfg.seg_len, hp.context_segments),
        evo,
    )
