"""Graph neural network building blocks: the jraph wrapper and dense GNN layers (import submodules)."""
