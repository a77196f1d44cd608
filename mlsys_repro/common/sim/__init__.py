"""Simulation helpers shared by papers: cluster models, network/discrete-event models (import submodules)."""
