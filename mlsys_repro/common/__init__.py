"""Paper-agnostic core shared by every reproduction in `mlsys_repro/papers/`."""
