"""EvoGWP (Li et al., IEEE TPDS 2024): long-term cloud workload prediction with shapelets, an evolution graph
and a spatio-temporal GNN encoder-decoder, reproduced in JAX with its baselines.

``predict(model, history) -> forecast`` forecasts the next horizon from a history (see
:func:`mlsys_repro.papers.evogwp.inference.predict`); the package import stays light (no JAX) because configs import it.
"""

from __future__ import annotations


def predict(model, history):
    """Forecast the ``horizon`` steps after ``history`` with a checkpointed model (path or loaded)."""
    from mlsys_repro.papers.evogwp.inference import predict as _predict

    return _predict(model, history)
