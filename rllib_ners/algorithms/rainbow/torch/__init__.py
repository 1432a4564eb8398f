"""Torch learner of Rainbow DQN."""
