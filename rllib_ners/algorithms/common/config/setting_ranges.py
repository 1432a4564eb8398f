"""The ranges of the configs' numeric settings and switches: one table, checked
in `validate()`.

RLlib's configs take any number for most settings and train with it:
`gamma=1.5`, `tau=-0.1` or a train batch larger than the replay buffer build
and run an iteration without a word. `SETTING_RANGES` gives every numeric
setting of this package's configs (`RainbowDQNConfig`, `NERSDQNConfig`,
`NERSSACConfig`, `TD3Config`, `DDPGConfig`, `ACERConfig`), and of RLlib's
settings they pass on, its range; `SettingRangesMixin`
(`setting_range_checks`) checks them first in `validate()`, and a value out
of range raises a config error (`raise_config_error`) that names the setting
and a valid value:

    gamma=1.5 is not a discount factor: use a number in [0, 1] (the weight of
    the next state's value in the return), e.g. config.training(gamma=0.99).

A rule covers a config when the config has the setting and, where the rule
names configs, one of them is among the config's classes (`DQNConfig` covers
`RainbowDQNConfig` and `NERSDQNConfig`, `TD3Config` covers `DDPGConfig`).
A `None` or "auto" RLlib allows stays allowed (`allowed`); a setting RLlib
lets be a schedule `[[timestep, value], ...]` has every value checked.

A setting that acts only while another switches it on is named in a warning
(`switched_settings`), also from `SettingRangesMixin.validate()`.

Numeric settings with checks of their own, each with an error naming the
setting:

* `n_step` (in the table too): Rainbow's and NERS-DQN's `validate()` check it
  first, with our buffers' n-step error (`rllib_validation`);
* `max_weights_staleness`, `weights_sync_interval`: `FastPathsConfigMixin`
  (ints >= 1, checked against each other);
* the `.ners(...)` settings: `rllib_ners.NERSSettings`;
* our buffers' other `replay_buffer_config` keys (`min_priority`,
  `beta_final`, `beta_annealing_timesteps`, `frame_stack`, ...): the buffer
  class itself, probed by `buffer_config_checks.check_replay_buffer_config`,
  which checks the replay sampler's choices (`sampler`, `relo_transform`,
  `laber_weights`) first;
* ACER's train batch against `sequence_length` and the buffer's capacity:
  `ACERConfig` (stricter than the batch rule of the other configs).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple, Union

from rllib_ners.replay_buffers.buffer_settings import MIN_CAPACITY

# A bound: a number, or the name of another setting whose value bounds this
# one (skipped while that setting is unset).
Bound = Union[None, float, str]


@dataclasses.dataclass(frozen=True)
class SettingRange:
    """One rule of `SETTING_RANGES`.

    Attributes:
        setting: The config attribute, e.g. "gamma".
        what: What a valid value is, for the error: "gamma=1.5 is not {what}".
        why: What the setting does, which the bounds follow from.
        example: A valid value, shown in the error's fix.
        low, high: The bounds (None: unbounded), numbers or the name of
            another setting (`name`, e.g. "replay_buffer_config['capacity']").
        low_open, high_open: Whether the bound itself is excluded.
        integer: Whether the value must be an int (a bool is not).
        boolean: Whether the value must be True or False (a switch: the
            string "False" would read as True).
        integral_floats: With `integer`: an integral float (5000.0, as Tune's
            quantised search spaces hand out) passes too.
        allowed: Values allowed besides the range (RLlib's None or "auto").
        schedule: Whether RLlib takes a schedule `[[timestep, value], ...]`
            for it (every value must then lie in the range).
        n_step_range: Whether an inclusive range `(lo, hi)` of values is
            allowed (our buffers draw n from it).
        key: A `replay_buffer_config` key: the rule checks
            `config.replay_buffer_config[key]` (`setting` is then
            "replay_buffer_config").
        configs: Names of the config classes the rule covers (a config
            whose class or a base class has one of these names); empty:
            every config with the setting.
        method: The config method that sets it ("training", "env_runners").
    """

    setting: str
    what: str
    why: str
    example: Any
    low: Bound = None
    high: Bound = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    boolean: bool = False
    integral_floats: bool = False
    allowed: Tuple[Any, ...] = ()
    schedule: bool = False
    n_step_range: bool = False
    key: Optional[str] = None
    configs: Tuple[str, ...] = ()
    method: str = "training"

    @property
    def name(self) -> str:
        """The setting as a user writes it in an error's fix."""
        if self.key is None:
            return self.setting
        return f"{self.setting}['{self.key}']"


REPLAY_BUFFER_CONFIG = "replay_buffer_config"
_CAPACITY = f"{REPLAY_BUFFER_CONFIG}['capacity']"
_DQN, _SAC, _TD3, _ACER = "DQNConfig", "SACConfig", "TD3Config", "ACERConfig"

SETTING_RANGES: Tuple[SettingRange, ...] = (
    # --- RLlib's settings, as every config of ours passes them on.
    # First: RLlib derives the per-Learner batch from num_learners.
    SettingRange(
        "num_learners",
        "a number of remote Learners",
        "0 trains in the algorithm's process, N > 0 on N Learner actors",
        0,
        low=0,
        integer=True,
        method="learners",
    ),
    SettingRange(
        "num_env_runners",
        "a number of remote EnvRunners",
        "0 samples in the algorithm's process, N > 0 on N EnvRunner actors",
        0,
        low=0,
        integer=True,
        method="env_runners",
    ),
    SettingRange(
        "gamma",
        "a discount factor",
        "the weight of the next state's value in the return",
        0.99,
        low=0.0,
        high=1.0,
    ),
    *(
        SettingRange(
            name,
            "a learning rate",
            "a rate <= 0 would train by gradient ascent, or not at all",
            3e-4,
            low=0.0,
            low_open=True,
            schedule=True,
            configs=configs,
        )
        for name, configs in (
            # SAC's and TD3's learning rates are their own three; RLlib's SAC
            # refuses any `lr` itself.
            ("lr", (_DQN, _ACER)),
            ("actor_lr", (_SAC, _TD3)),
            ("critic_lr", (_SAC, _TD3)),
            ("alpha_lr", (_SAC,)),
        )
    ),
    SettingRange(
        "tau",
        "a Polyak rate",
        "each Polyak update moves the targets, or ACER's average policy network, "
        "this share of the way to the online weights; 1 copies them",
        0.005,
        low=0.0,
        high=1.0,
        low_open=True,
    ),
    SettingRange(
        "grad_clip",
        "a gradient clipping threshold",
        "None does not clip",
        40.0,
        low=0.0,
        low_open=True,
        allowed=(None,),
    ),
    SettingRange(
        "num_steps_sampled_before_learning_starts",
        "a number of env steps",
        "env steps sampled before the first update",
        1000,
        low=0,
        integer=True,
    ),
    SettingRange(
        "training_intensity",
        "a replay ratio",
        "env steps replayed per env step sampled; None: one batch per rollout fragment",
        1.0,
        low=0.0,
        low_open=True,
        allowed=(None,),
    ),
    SettingRange(
        "target_network_update_freq",
        "a target network update period",
        "env steps between target network updates; 0: after every update",
        500,
        low=0,
        integer=True,
        # TD3 updates its targets every `policy_delay` updates instead.
        configs=(_DQN, _SAC),
    ),
    SettingRange(
        "n_step",
        "an n-step setting",
        "the steps of each n-step return; a range draws n per sample",
        3,
        low=1,
        integer=True,
        integral_floats=True,
        allowed=(None,),
        n_step_range=True,
    ),
    SettingRange(
        "rollout_fragment_length",
        "a rollout fragment length",
        "env steps per EnvRunner sample; 'auto' derives it from the config",
        "auto",
        low=1,
        integer=True,
        integral_floats=True,
        allowed=("auto",),
        method="env_runners",
    ),
    # --- replay_buffer_config, whichever buffer (ours check the rest).
    SettingRange(
        REPLAY_BUFFER_CONFIG,
        "a replay buffer capacity",
        "one step and its next observation need two slots",
        50000,
        low=MIN_CAPACITY,
        integer=True,
        integral_floats=True,
        key="capacity",
    ),
    SettingRange(
        REPLAY_BUFFER_CONFIG,
        "a priority exponent",
        "0 samples uniformly, 1 fully by priority",
        0.6,
        low=0.0,
        key="alpha",
    ),
    SettingRange(
        REPLAY_BUFFER_CONFIG,
        "an importance-sampling exponent",
        "0 corrects nothing, 1 fully; None: 0",
        0.4,
        low=0.0,
        high=1.0,
        allowed=(None,),
        key="beta",
    ),
    # ReLo's and LaBER's samplers (`sampler_presets`; their choices are
    # checked by `buffer_config_checks`).
    SettingRange(
        REPLAY_BUFFER_CONFIG,
        "a LaBER large-batch factor",
        "LaBER draws m times the train batch uniformly and sub-samples the batch "
        "from it; 1 sub-samples the batch from itself",
        4,
        low=1,
        integer=True,
        key="laber_m",
    ),
    SettingRange(
        REPLAY_BUFFER_CONFIG,
        "a ReLo priority epsilon",
        "relo_transform='clip' adds it to max(ReLo, 0) so that every item keeps "
        "a chance to be drawn",
        1e-5,
        low=0.0,
        low_open=True,
        key="relo_epsilon",
    ),
    # After the capacity's own rule, which bounds it.
    SettingRange(
        "train_batch_size_per_learner",
        "a train batch size for this replay buffer",
        "a batch larger than the buffer repeats stored transitions in every "
        "batch; raise the capacity or lower the batch",
        256,
        low=1,
        high=_CAPACITY,
        integer=True,
        configs=(_DQN, _SAC, _TD3),
    ),
    SettingRange(
        "train_batch_size_per_learner",
        "a train batch size",
        "env steps per update, a multiple of sequence_length; ACER checks it "
        "against the buffer's capacity itself",
        320,
        low=1,
        integer=True,
        configs=(_ACER,),
    ),
    # --- DQN's (RainbowDQNConfig, NERSDQNConfig).
    SettingRange(
        "epsilon",
        "an exploration rate",
        "the probability of a random action",
        0.05,
        low=0.0,
        high=1.0,
        schedule=True,
        configs=(_DQN,),
    ),
    SettingRange(
        "adam_epsilon",
        "an Adam epsilon",
        "Adam divides by sqrt(v) + adam_epsilon",
        1.5e-4,
        low=0.0,
        low_open=True,
        configs=(_DQN,),
    ),
    SettingRange(
        "sigma0",
        "a noise scale",
        "the noisy layers' initial noise; 0 starts noiseless",
        0.5,
        low=0.0,
        configs=(_DQN,),
    ),
    SettingRange(
        "num_atoms",
        "a number of atoms",
        "C51's atoms per action; 1 is a scalar Q-value",
        51,
        low=1,
        integer=True,
        configs=(_DQN,),
    ),
    SettingRange(
        "v_min",
        "a return bound",
        "the lowest return of C51's support",
        -10.0,
        configs=(_DQN,),
    ),
    SettingRange(
        "v_max",
        "a return bound above v_min",
        "the highest return of C51's support",
        10.0,
        low="v_min",
        low_open=True,
        configs=(_DQN,),
    ),
    # --- SAC's (NERSSACConfig).
    SettingRange(
        "initial_alpha",
        "an entropy temperature",
        "the entropy bonus's starting weight, learned in log space",
        1.0,
        low=0.0,
        low_open=True,
        configs=(_SAC,),
    ),
    SettingRange(
        "target_entropy",
        "a target entropy",
        "'auto' is -(action dimensions)",
        "auto",
        allowed=("auto",),
        configs=(_SAC,),
    ),
    SettingRange(
        "pal_alpha",
        "a PAL exponent",
        "LAP's priority exponent that PAL's loss reweights by",
        0.4,
        low=0.0,
        configs=(_SAC, _TD3),
    ),
    # --- TD3's (TD3Config, DDPGConfig).
    SettingRange(
        "policy_delay",
        "a policy delay",
        "critic updates per actor and target update",
        2,
        low=1,
        integer=True,
        configs=(_TD3,),
    ),
    *(
        SettingRange(
            name,
            "a noise scale",
            f"{why}, in units of the [-1, 1] action range",
            example,
            low=0.0,
            configs=(_TD3,),
        )
        for name, why, example in (
            ("target_noise", "the std of the target policy smoothing noise", 0.2),
            ("target_noise_clip", "the bound of the smoothing noise", 0.5),
            ("exploration_noise", "the std of the acting noise", 0.1),
        )
    ),
    SettingRange(
        "random_timesteps",
        "a number of env steps",
        "env steps of uniform random actions before the actor acts",
        10000,
        low=0,
        integer=True,
        configs=(_TD3,),
    ),
    # --- ACER's.
    SettingRange(
        "sequence_length",
        "a sequence length",
        "steps per replayed sequence",
        20,
        low=1,
        integer=True,
        configs=(_ACER,),
    ),
    SettingRange(
        "replay_ratio",
        "a replay ratio",
        "off-policy updates per on-policy update; 0 is on-policy ACER",
        4.0,
        low=0.0,
        configs=(_ACER,),
    ),
    *(
        SettingRange(name, what, why, example, low=0.0, low_open=True, configs=(_ACER,))
        for name, what, why, example in (
            (
                "truncation_c",
                "a truncation bound",
                "c of the truncated importance weight min(c, rho)",
                10.0,
            ),
            (
                "retrace_c",
                "a trace truncation bound",
                "the Retrace traces are min(retrace_c, rho)",
                1.0,
            ),
            ("q_loss_coeff", "a loss weight", "the weight of the critic loss", 0.5),
            (
                "trust_region_delta",
                "a trust region size",
                "the most the linearised KL to the average policy may grow",
                1.0,
            ),
        )
    ),
    SettingRange(
        "entropy_coeff",
        "an entropy weight",
        "the weight of the policy's entropy bonus; 0 drops it",
        0.01,
        low=0.0,
        configs=(_ACER,),
    ),
    # --- Switches: a string such as "False" is truthy and would switch on.
    *(
        SettingRange(name, "a switch", why, example, boolean=True, configs=configs)
        for name, why, example, configs in (
            (
                "twin_q",
                "whether two critics learn and the smaller one's value is the target",
                True,
                (_SAC, _TD3),
            ),
            (
                "double_q",
                "whether the online network picks the next action the target "
                "network values",
                True,
                (_DQN,),
            ),
            (
                "dueling",
                "whether the Q head splits into value and advantage streams",
                True,
                (_DQN,),
            ),
            (
                "noisy",
                "whether the Q head's layers are noisy nets, which explore",
                False,
                (_DQN,),
            ),
            (
                "store_buffer_in_checkpoints",
                "whether checkpoints hold the replay memory",
                True,
                (),
            ),
            (
                "clip_actions",
                "whether actions are clipped to the action space's bounds before "
                "the env steps",
                False,
                (_SAC,),
            ),
            (
                "add_default_connectors_to_learner_pipeline",
                "whether RLlib's default connectors build the Learner's batches",
                True,
                (),
            ),
            (
                "use_trust_region",
                "whether the policy gradient is projected into ACER's trust region",
                True,
                (_ACER,),
            ),
        )
    ),
)
