"""Resource helpers for our algorithms' configs."""

from __future__ import annotations


def with_learner_threads(config, threads: int):
    """Gives a local Learner `threads` CPU threads, under Tune too.

    Acting and learning alternate in the Algorithm's process when
    `num_env_runners=0`, so its torch ops may use every core. Ray sets a trial
    process's OMP/torch threads to the CPUs it reserves for it, hence
    `num_cpus_for_main_process=threads`; `torch.set_num_threads` covers runs in
    this process (`--no-tune`, benchmarks).
    """
    import torch

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"`threads` must be a positive integer, got {threads!r}.")
    torch.set_num_threads(threads)
    return config.resources(num_cpus_for_main_process=threads)
