"""Federated-learning core: partitioners, stacked vmapped clients, byte-exact communication accounting."""
