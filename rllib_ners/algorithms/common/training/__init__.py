"""The Algorithm's side of a training iteration: the replay loop, its sampling
and shipping, weight sharing, the buffer's building and checkpoint state. One
line per module: `rllib_ners.algorithms.common`."""
