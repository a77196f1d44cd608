"""MAIFS (Li et al., IEEE TPDS 2025): integrated, fungible GPU-cluster scheduling with multi-agent RL, rebuilt
on a JAX round-based cluster simulator with real traces (Philly, Helios-Saturn) and Synergy's profiles."""
