"""Collectives over emulated or real JAX devices: BCube and its BML all-reduce, meshes, the
multi-process launcher (import submodules; the ring and PS oracles of the tests live in ``tests/common/oracles``)."""
