"""Gradient compression kernels: the 8-bit sketch, QSGD, TernGrad (import submodules)."""
