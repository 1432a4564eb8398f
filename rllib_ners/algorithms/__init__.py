"""RLlib algorithms with NERS replay, one package per algorithm (its config,
algorithm, learner, RLModule and catalog, as RLlib lays out its own):

* `rainbow`: Rainbow DQN (RLlib's DQN with a Rainbow RLModule);
* `ners_dqn`: NERS-DQN (Rainbow DQN replaying with NERS; `enable_ners` for a
  stock DQN);
* `ners_sac`: NERS-SAC (RLlib's SAC with our buffers and NERS);
* `td3`: TD3 and DDPG;
* `acer`: ACER (actor-critic with experience replay);
* `ners`: the NERS sampler's glue to RLlib, shared by the algorithms above;
* `enable_replay`: ReLo or LaBER replay for a stock DQN or SAC config;
* `common`: the pieces every algorithm shares (configs, training loop, Learner
  update pieces).
"""
