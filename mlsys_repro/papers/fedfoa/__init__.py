"""FedFoA: federated self-supervised learning with feature-correlation (relation-matrix) aggregation.

Reconstruction of Liu et al., "Feature Correlation-guided Knowledge Transfer for Federated Self-supervised
Learning" (arXiv 2211.07364), with its baselines (FedBYOL/FedSimSiam, FedU, FedEMA, local-only SSL and a
public-set feature-distillation baseline). See README.md for what is the paper's and what is ours.
"""
