"""Canary (Zhou et al., IEEE TPDS 2021): piece-level asynchronous gradient exchange with an 8-bit gradient
sketch over multi-interface (BCube) networks, reproduced with real JAX gradients and a discrete-event network
model. See README.md for what is the paper's and what is our reconstruction."""
