"""Gradient compression kernels: the 8-bit sketch and its pieces (import submodules)."""
