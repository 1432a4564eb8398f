"""The torch Learners' shared base and the update pieces it composes, each an
exact speed-up of one part of RLlib's update. One line per module:
`rllib_ners.algorithms.common`."""
