"""Small flax NNX models shared by several papers (MNIST/CIFAR classifiers) (import submodules)."""
