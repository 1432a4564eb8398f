"""The env-to-module connector factory of Atari's frame stacking.

`FrameStackingConnector(k)` builds RLlib's `FrameStackingEnvToModule`
(num_frames=k) for `config.env_runners(env_to_module_connector=...)`; unlike a
lambda it pickles and says what it builds, so `FastSingleAgentEnvRunner`
recognises it and stacks the frames itself (`sampling_steps.push_frames`).
"""

from __future__ import annotations


class FrameStackingConnector:
    """A picklable `env_to_module_connector` factory for RLlib's frame stacking
    of `num_frames` frames."""

    def __init__(self, num_frames: int):
        self.num_frames = int(num_frames)

    def __call__(self, env=None, spaces=None, device=None):
        from ray.rllib.connectors.env_to_module.frame_stacking import (
            FrameStackingEnvToModule,
        )

        return FrameStackingEnvToModule(num_frames=self.num_frames)
