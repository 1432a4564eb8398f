"""Remote EnvRunners' fragments shipped to the buffer as packed columns.

RLlib's DQN training step gets every remote EnvRunner's `sample()` output as
pickled `SingleAgentEpisode`s (`synchronous_parallel_sample`): each carries
its spaces and the lookback the EnvRunner keeps for itself, which on Atari
more than triples the bytes per env step and the driver's unpickling. Our
training loop asks each remote EnvRunner for its fragments packed instead
(`pack_fragments` runs on the EnvRunner, after its `sample()`: one numpy
column per field, frames once as the env gave them, no spaces) and hands them
to the buffer with the Algorithm's env spaces; the buffer stores the same
chunks in the same order (tested against the episodes, for lockstep and
overlapped sampling).

Configs the packed form cannot serve ship episodes, as RLlib does, and say
why in one log line: multi-agent configs, a buffer class that overrides
`add()`, an Algorithm without env spaces.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from ray.rllib.env import INPUT_ENV_SINGLE_SPACES

from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
    FastPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.packed_fragments import PackedFragments, pack_fragments

__all__ = [
    "fragment_packing_blocker",
    "packed_fragment_spaces",
    "receive_fragments",
    "sample_packed",
    "sample_packed_and_metrics",
    "sample_remote_fragments",
]

logger = logging.getLogger(__name__)


def sample_packed(env_runner) -> Any:
    """Runs on a remote EnvRunner: one rollout fragment per sub-env, packed
    (`pack_fragments`; episodes where packing cannot keep them alike)."""
    return pack_fragments(env_runner.sample())


def sample_packed_and_metrics(env_runner) -> Tuple[Any, Dict[str, Any]]:
    """`sample_packed()` and the EnvRunner's metrics of it (an overlapped
    request's result)."""
    return sample_packed(env_runner), env_runner.get_metrics()


def fragment_packing_blocker(algo) -> Optional[str]:
    """Why `algo`'s remote EnvRunners ship episodes rather than packed
    fragments, or None. (For an Algorithm in our training loop, whose buffer
    is one of ours.)"""
    if algo.config.is_multi_agent:
        return "multi-agent episodes travel as RLlib's MultiAgentEpisodes"
    buffer_class = type(algo.local_replay_buffer)
    if buffer_class.add is not FastPrioritizedEpisodeReplayBuffer.add:
        return f"the replay buffer class {buffer_class.__name__} overrides add()"
    if packed_fragment_spaces(algo) is None:
        return "the Algorithm knows no env spaces to store them with"
    return None


def packed_fragment_spaces(algo) -> Optional[Tuple[Any, Any]]:
    """The EnvRunners' single-agent env spaces (observation, action): those
    their episodes carry. RLlib's `Algorithm.setup()` takes them from an
    EnvRunner (`EnvRunnerGroup.get_spaces()`)."""
    return (getattr(algo, "spaces", None) or {}).get(INPUT_ENV_SINGLE_SPACES)


def receive_fragments(sampled: Any, spaces: Tuple[Any, Any]) -> List[Any]:
    """One EnvRunner's sampled output as a list for the buffer's `add()`:
    packed fragments, given their spaces, or the episodes as they came."""
    if isinstance(sampled, PackedFragments):
        return [sampled.with_spaces(*spaces)]
    return list(sampled)


def sample_remote_fragments(
    env_runner_group, *, spaces: Tuple[Any, Any], sample_timeout_s: Optional[float]
) -> List[Any]:
    """One packed rollout fragment from every healthy remote EnvRunner, in
    EnvRunner order: RLlib's `synchronous_parallel_sample()` for a training
    step (asked again while no env step came back; nothing on a timeout or
    with no healthy EnvRunner left, with its warning), with `sample_packed`
    as the remote call."""
    received: List[Any] = []
    while not any(len(item) for item in received):
        results = env_runner_group.foreach_env_runner(
            sample_packed, local_env_runner=False, timeout_seconds=sample_timeout_s
        )
        if not results:
            logger.warning(
                "No samples returned from remote EnvRunners. If your env or model "
                "is slow, increase `sample_timeout_s` or decrease "
                "`rollout_fragment_length` in `AlgorithmConfig.env_runners()`."
            )
            break
        if env_runner_group.num_healthy_remote_workers() <= 0:
            logger.warning("No healthy remote EnvRunners left; restoring them ...")
            break
        for sampled in results:
            received += receive_fragments(sampled, spaces)
    return received
