"""NERS sampler settings: one validated dataclass shared by configs and learners."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Tuple

from rllib_ners.ners.diagnostics import DIAGNOSTICS_SAMPLE_SIZE

REPLAY_REWARD_MODES = ("train_return", "eval_return")
ENCODERS = ("separate", "module")
ACTION_ENCODINGS = ("one_hot", "scaled_index")


@dataclasses.dataclass(frozen=True)
class NERSSettings:
    """Settings of the Neural Experience Replay Sampler.

    Attributes:
        hidden_size: Width `h` of the local, global and score networks (reference:
            128). f_l and f_g map features to `h // 2`; f_s maps `[h//2 + h//2]` to a
            score through hidden layers `h` and `h // 2`.
        encoder: "separate" trains the paper's own state encoder (MLP for vector
            observations, two 5x5 stride-5 convolutions for images) inside the
            sampler; "module" reuses the RLModule's encoder output, detached, so
            the sampler adds no encoder of its own.
        encoder_hiddens: Hidden layers of the separate MLP encoder (vectors) or of
            the MLP after the convolutions (images: reference 256, 64).
        encoder_out_dim: Size of the separate encoder's output (reference: 32).
        lr: Adam learning rate of the sampler networks (reference: 1e-4).
        train_size: Size of I_train, the transitions drawn uniformly from I_all
            for one REINFORCE step (reference: the batch size, 32).
        replay_reward_mode: "train_return" computes the replay reward from the
            training episodes RLlib already collects; "eval_return" runs RLlib
            evaluation episodes at each sampler update (extra env steps, counted).
        min_episodes_per_update: Training episodes that must finish before the
            sampler is updated (the paper updates at every episode end: 1).
        timestep_scale: The in-episode timestep is divided by this before tanh
            squashing, so that `t` stays informative (the reference feeds the raw
            timestep, which saturates tanh at 1 for every t >= 3).
        action_encoding: How discrete actions enter the features: "one_hot" or
            "scaled_index" (`a / (num_actions - 1)`).
        log_eps: Added to scores inside the log of the REINFORCE loss.
        diagnostics_sample_size: The per-iteration sampler diagnostics of
            `result["ners"]` look at a uniform random subset of this many stored
            transitions when the buffer holds more (all of them otherwise).
    """

    hidden_size: int = 128
    encoder: str = "separate"
    encoder_hiddens: Tuple[int, ...] = (256, 64)
    encoder_out_dim: int = 32
    lr: float = 1e-4
    train_size: int = 32
    replay_reward_mode: str = "train_return"
    min_episodes_per_update: int = 1
    timestep_scale: float = 1000.0
    action_encoding: str = "one_hot"
    log_eps: float = 1e-6
    diagnostics_sample_size: int = DIAGNOSTICS_SAMPLE_SIZE

    def __post_init__(self):
        object.__setattr__(self, "encoder_hiddens", tuple(self.encoder_hiddens))
        self.validate()

    def validate(self) -> None:
        """Raises `ValueError` naming the bad setting and the `.ners(...)` fix."""

        def fail(name: str, value: Any, rule: str) -> None:
            raise ValueError(
                f"NERS setting `{name}={value!r}` is invalid: {rule}. Fix it with "
                f"`config.ners({name}=...)`."
            )

        def positive_int(name: str, value: Any) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                fail(name, value, "it must be a positive integer")

        positive_int("hidden_size", self.hidden_size)
        if self.hidden_size < 2:
            fail("hidden_size", self.hidden_size, "it must be at least 2")
        positive_int("encoder_out_dim", self.encoder_out_dim)
        positive_int("train_size", self.train_size)
        positive_int("min_episodes_per_update", self.min_episodes_per_update)
        positive_int("diagnostics_sample_size", self.diagnostics_sample_size)
        for width in self.encoder_hiddens:
            positive_int("encoder_hiddens", width)
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            fail("lr", self.lr, "the sampler learning rate must be > 0")
        if not (
            isinstance(self.timestep_scale, (int, float)) and self.timestep_scale > 0
        ):
            fail("timestep_scale", self.timestep_scale, "it must be > 0")
        if not (isinstance(self.log_eps, (int, float)) and self.log_eps > 0):
            fail("log_eps", self.log_eps, "it must be > 0")
        if self.replay_reward_mode not in REPLAY_REWARD_MODES:
            fail(
                "replay_reward_mode",
                self.replay_reward_mode,
                f"use one of {REPLAY_REWARD_MODES}",
            )
        if self.encoder not in ENCODERS:
            fail("encoder", self.encoder, f"use one of {ENCODERS}")
        if self.action_encoding not in ACTION_ENCODINGS:
            fail(
                "action_encoding",
                self.action_encoding,
                f"use one of {ACTION_ENCODINGS}",
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> NERSSettings:
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(
                f"Unknown NERS settings {sorted(unknown)}; known ones are "
                f"{sorted(f.name for f in dataclasses.fields(cls))}."
            )
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)
