"""The algorithms' config pieces: buffer types, checks run in `validate()`, the
fast paths' switches. One line per module: `rllib_ners.algorithms.common`."""
