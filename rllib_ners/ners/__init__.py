"""The Neural Experience Replay Sampler, Ray-free: settings, scorer, REINFORCE loss."""

from rllib_ners.ners.scorer import NERSScorer, build_state_encoder, reinforce_loss
from rllib_ners.ners.settings import NERSSettings

__all__ = ["NERSScorer", "NERSSettings", "build_state_encoder", "reinforce_loss"]
