"""Test oracles: SPMD (``jax.shard_map``) ring all-reduce and parameter-server push/pull, fp32 and 8-bit sketched,
against which canary's vectorised exchange numerics (``mlsys_repro.papers.canary.train``) are checked. No paper runs
them."""
