"""Collectives over emulated or real JAX devices: ring all-reduce, PS push/pull, BCube (import submodules)."""
