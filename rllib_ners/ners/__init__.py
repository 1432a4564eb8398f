"""The Neural Experience Replay Sampler, Ray-free (its glue to RLlib is
`rllib_ners.algorithms.ners`):

* `settings`: `NERSSettings`, the sampler's validated settings;
* `scorer`: `NERSScorer`, the state encoder and the local, global and score nets;
* `reinforce`: the REINFORCE objectives and the score-to-priority maps;
* `encoding_cache`: a cache of the scorer's image-encoder outputs;
* `diagnostics`: the math of the sampler diagnostics under `result["ners"]`.
"""

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
