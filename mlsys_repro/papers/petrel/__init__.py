"""Petrel (CASP + A3C) on simulated heterogeneous parameter-server clusters with real MNIST training."""
