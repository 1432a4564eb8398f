"""The Neural Experience Replay Sampler, Ray-free: settings, scorer, REINFORCE loss."""

from rllib_ners.ners.reinforce import log_prob_loss, log_score_loss
from rllib_ners.ners.scorer import NERSScorer, build_state_encoder
from rllib_ners.ners.settings import NERSSettings

__all__ = [
    "NERSScorer",
    "NERSSettings",
    "build_state_encoder",
    "log_prob_loss",
    "log_score_loss",
]
