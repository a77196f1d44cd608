"""Reinforcement-learning building blocks: functional env API, PPO/A2C/A3C, DQN pieces (import submodules)."""
