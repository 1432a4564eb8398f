"""The greedy action of an RLModule for one observation, as RLlib's EnvRunner
takes it to the env: `rllib-ners evaluate --render` plays its episodes with it
and the study (`rllib_ners.study.runs.greedy_returns`) its evaluations."""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.utils.spaces.space_utils import clip_action, unsquash_action
from ray.rllib.utils.torch_utils import convert_to_torch_tensor


def greedy_action(module, observation, action_space=None, config=None):
    """The module's deterministic action for one observation. With a Box
    `action_space`, the action is mapped to the env's bounds as RLlib's
    EnvRunner does: unsquashed from [-1, 1] when `config.normalize_actions`
    (RLlib's default; SAC's squashed Gaussian acts in [-1, 1]), else clipped
    when `config.clip_actions`."""
    # As RLlib's EnvRunner feeds the module: float64 becomes float32, and
    # integer pixels stay integers (the image encoders scale uint8 themselves).
    batch = {"obs": convert_to_torch_tensor(np.asarray(observation)[None])}
    with torch.no_grad():
        out = module.forward_inference(batch)
    if "actions" in out:
        action = out["actions"]
    else:
        dist_cls = module.get_inference_action_dist_cls()
        action = dist_cls.from_logits(out["action_dist_inputs"]).to_deterministic()
        action = action.sample()
    action = action[0].cpu().numpy()
    if action_space is not None and config is not None:
        if config.normalize_actions:
            action = unsquash_action(action, action_space)
        elif config.clip_actions:
            action = clip_action(action, action_space)
    return action.item() if action.ndim == 0 else action
