"""The NERS sampler's glue to RLlib, shared by every algorithm that replays with it.

An algorithm plugs NERS in with four pieces (NERS-DQN and ACER do; SAC is next):
- `ners_config.NERSConfigMixin`: `config.ners(...)` and its validation;
- `torch.ners_torch_learner.NERSTorchLearnerMixin`: the scorer networks on the
  Learner, batch scoring and the REINFORCE step;
- `sampler_update.NERSSamplerUpdate`: replay reward and the REINFORCE step at
  episode ends, run by the Algorithm;
- `ners_learner`: the metric keys under `result["ners"]`.
The Ray-free parts (scorer networks, settings) live in `rllib_ners.ners`.
"""
