"""The NERS sampler's glue to RLlib, shared by every algorithm that replays with it
(NERS-DQN, NERS-SAC, TD3 / DDPG, ACER, and a stock DQN through `enable_ners`).

- `ners_config.NERSConfigMixin`: `config.ners(...)`, its defaults and its checks
  in `validate()`;
- `torch.torch_ners_sampler.TorchNERSSampler`: the part a Learner holds as
  `learner.ners`: the scorer networks and their optimiser, batch scoring and
  the REINFORCE step;
- `sampler_update.NERSSamplerUpdate`: the sampler's step at episode ends (replay
  reward, I_train, the REINFORCE step on every Learner) and its per-iteration
  report under `result["ners"]`, held by the Algorithm as
  `ners_sampler_update`; `sampler_rounds.NERSSamplerRoundsMixin` runs it after
  every round of the replay loop, ACER after its training step, `NERSCallback`
  once per iteration of a stock DQN;
- `sampler_diagnostics`: what that report measures (sampler spread, probe drift);
- `ners_learner`: the metric keys under `result["ners"]`;
- `presets`: the NERS settings the tuned examples and the study share.
The Ray-free parts (scorer networks, settings) live in `rllib_ners.ners`.
"""
