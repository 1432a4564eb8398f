"""Small helpers shared across the package, each module named for what it holds.

`checks` (input validation), `spaces` (observation/action space predicates),
`rng` (global RNG snapshots), `torch_ops` (convolution and optimiser helpers),
`malloc` (glibc allocator tuning), `plotting` (learning curves), `log_noise`
(drops the log lines of Ray, Tune and RLlib a user cannot act on). Nothing here
imports Ray.
"""
