"""Rainbow's Q-network as an RLlib (new API stack) torch RLModule.

A drop-in for RLlib's `DefaultDQNTorchRLModule`: same forward-output keys
(`qf_preds`, `qf_next_preds`, `qf_target_next_preds`, and for C51 `atoms`,
`qf_logits`, `qf_probs`, `qf_target_next_probs`), same `QNetAPI` /
`TargetNetworkAPI`, so RLlib's `DQNTorchLearner` loss (double Q, n-step, C51
projection, PER weights) runs on it unchanged. What it adds:

* Dueling (Wang et al. 2016) done per atom: with C51 the value stream outputs one
  logit per atom and `logits[a, z] = V[z] + A[a, z] - mean_a' A[a', z]`. (RLlib
  2.60's module subtracts the mean over *atoms* and adds one scalar V per state.)
* Noisy nets (Fortunato et al. 2018): every layer of both streams is a
  factorised-Gaussian `NoisyLinear` when `noisy=True`. Noise handling follows
  Kaixhin/Rainbow, the code base of the NERS reference:
    - `forward_exploration`: fresh noise on every call, then greedy (argmax of the
      noisy Q); epsilon is not used.
    - `forward_train`: fresh online noise per update, shared by `s_t` and
      `s_{t+n}` (the double-Q argmax); the target net draws its own fresh noise.
    - `forward_inference` (evaluation): mean weights only, deterministic.
* Image encoders: the Nature CNN or the data-efficient CNN (see
  `rainbow_networks.py`); uint8 pixels are scaled by 1/255 inside.

With `noisy=False`, `num_atoms=1` the network and initialisation equal RLlib's
default DQN module (same encoder, same MLP heads), so existing configs keep their
behaviour.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Dict, Optional, Union

import torch
from ray.rllib.algorithms.dqn.default_dqn_rl_module import (
    ATOMS,
    QF_LOGITS,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_PROBS,
    QF_TARGET_NEXT_PREDS,
    QF_TARGET_NEXT_PROBS,
    DefaultDQNRLModule,
)
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import (
    DefaultDQNTorchRLModule,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT, Encoder, Model
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import TensorType
from torch.nn import functional as F

from rllib_ners.algorithms.rainbow.noisy_linear import (
    noisy_weights_reused,
    reset_noise_of,
)
from rllib_ners.algorithms.rainbow.rainbow_catalog import (
    NOISY_KEY,
    RAINBOW_MODEL_DEFAULTS,
    RainbowCatalog,
)
from rllib_ners.algorithms.rainbow.torch.rainbow_networks import QStream
from rllib_ners.seam.rl_module import advance_schedule, raise_catalog_error
from rllib_ners.utils.action_sampling import EpsilonGreedyChoice
from rllib_ners.utils.mlp_layers import (
    call_module,
    is_elementwise_activation,
    mlp_layers_of,
    run_mlp_layers,
)

# Training-forward outputs: the online encoder's output for s_t and s_{t+n},
# detached. A NERS Learner with `encoder="module"` scores with them instead of
# running the encoder a second time (`TorchNERSSampler.score`).
OBS_ENCODER_OUT = "obs_encoder_out"
NEXT_OBS_ENCODER_OUT = "next_obs_encoder_out"


class RainbowTorchRLModule(DefaultDQNTorchRLModule):
    """Dueling / C51 / noisy Q-network: RLlib's DQN module's outputs and APIs,
    dueling per atom with C51, factorised-Gaussian noisy layers with
    `noisy=True`, the Nature or data-efficient CNN for images; with
    `noisy=False` and `num_atoms=1` it equals RLlib's default DQN module.

    ```python
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from rllib_ners import RainbowDQNConfig, RainbowTorchRLModule

    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(noisy=True, sigma0=0.5, num_atoms=51, v_min=0, v_max=500)
    )
    # RainbowTorchRLModule is already the default module of this config;
    # with a stock DQNConfig use
    # config.rl_module(rl_module_spec=RLModuleSpec(
    #     module_class=RainbowTorchRLModule))
    # plus model_config={"noisy": True} (stock DQN does not pass `noisy`).
    ```
    """

    def __init__(self, *args, **kwargs):
        if kwargs.get("catalog_class") is None:
            kwargs["catalog_class"] = RainbowCatalog
        model_config = kwargs.get("model_config") or {}
        if dataclasses.is_dataclass(model_config):
            model_config = dataclasses.asdict(model_config)
        kwargs["model_config"] = {**RAINBOW_MODEL_DEFAULTS, **model_config}
        super().__init__(*args, **kwargs)

    @override(DefaultDQNRLModule)
    def setup(self):
        # RLModule.__init__ only logs catalog errors; ours are config errors.
        raise_catalog_error(self)
        super().setup()
        self.uses_noisy: bool = bool(self.model_config[NOISY_KEY])
        # Layers of plain MLP encoders (online and target), by encoder id.
        self._encoder_layers = {}
        # The acting Q-network as plain layers (None: not a plain MLP; False:
        # not looked at yet).
        self._acting_layers = False
        self._epsilon_greedy_choice = EpsilonGreedyChoice()
        if self.num_atoms > 1:
            self.register_buffer(
                "_atoms",
                torch.linspace(self.v_min, self.v_max, self.num_atoms),
                persistent=False,
            )

    # ------------------------------------------------------------------ noise
    def _online_streams(self):
        return [self.af] + ([self.vf] if self.uses_dueling else [])

    def _target_streams(self):
        return [self._target_of(stream) for stream in self._online_streams()]

    def _target_of(self, online: torch.nn.Module) -> torch.nn.Module:
        """The target copy of an online network, through RLlib's public
        `TargetNetworkAPI.get_target_network_pairs()`."""
        for online_net, target_net in self.get_target_network_pairs():
            if online_net is online:
                return target_net
        raise KeyError(f"{type(online).__name__} has no target network.")

    def reset_noise(self, *, target: bool = False) -> None:
        """Draws fresh noise in the online streams (or, with `target`, the target's)."""
        if self.uses_noisy:
            reset_noise_of(self._noisy_layers(target=target))

    def _noisy_layers(self, *, target: bool = False):
        """The noisy layers of the online streams (or the target's); none
        without noisy nets."""
        streams = self._target_streams() if target else self._online_streams()
        return [layer for stream in streams for layer in stream.noisy_layers()]

    # --------------------------------------------------------------- forwards
    @override(RLModule)
    def _forward_inference(self, batch: Dict[str, TensorType]) -> Dict[str, TensorType]:
        # Evaluation: the mean network, no noise, greedy.
        qf_outs = self._qf_forward_helper(
            batch, self.encoder, self._heads(target=False), noise=False
        )
        return {Columns.ACTIONS: torch.argmax(qf_outs[QF_PREDS], dim=-1)}

    @override(RLModule)
    def _forward_exploration(
        self, batch: Dict[str, TensorType], t: int
    ) -> Dict[str, TensorType]:
        if not self.uses_noisy:
            return self._epsilon_greedy(batch, t)
        # Noisy nets explore through the weights: fresh noise, then greedy.
        self.reset_noise()
        qf_outs = self.compute_q_values(batch)
        return {Columns.ACTIONS: torch.argmax(qf_outs[QF_PREDS], dim=-1)}

    def exploration_graph_key(self, t: Optional[int]) -> Optional[str]:
        """The Python-side decision `_forward_exploration` makes from `t`, for
        a captured acting pass (`rllib_ners.env.acting_graphs`): noisy nets
        make none; epsilon-greedy exploration reads its epsilon on the host
        from `t` at every step (None: not capturable)."""
        return "noisy" if self.uses_noisy else None

    def _epsilon_greedy(
        self, batch: Dict[str, TensorType], t: int
    ) -> Dict[str, TensorType]:
        """RLlib's epsilon-greedy exploration (`DefaultDQNTorchRLModule`), the same
        values and random draws without its distribution objects: RLlib's greedy
        action is the argmax of the raw Q-values (`TorchCategorical.
        to_deterministic()`), its random action a `multinomial` draw over the
        actions with non-zero Q, then one `rand` per row decides
        (`EpsilonGreedyChoice`: the same draws)."""
        q = self._acting_q_values(batch)
        epsilon = self._current_epsilon(t)
        return {Columns.ACTIONS: self._epsilon_greedy_choice(q, epsilon)}

    def _current_epsilon(self, t: int) -> TensorType:
        """`epsilon_schedule.update(t)`, then `get_current_value()`: the float32
        tensor RLlib's scheduler holds, filled in place (RLlib builds a new
        tensor from the Python float at every step; the same float32 value)."""
        advance_schedule(self.epsilon_schedule, t)
        return self.epsilon_schedule.get_current_value()

    def _acting_q_values(self, batch: Dict[str, TensorType]) -> TensorType:
        """`compute_q_values(batch)[QF_PREDS]`; a plain MLP Q-network (no noisy
        layers, no dueling, one atom) runs its layers directly, encoder and Q
        stream as one list (the same ops in the same order)."""
        layers = self._acting_layers
        if layers is False:
            layers = self._acting_layers = self._q_network_layers()
        if layers is None:
            return self.compute_q_values(batch)[QF_PREDS]
        return run_mlp_layers(layers, batch[Columns.OBS])

    def _q_network_layers(self):
        if self.uses_noisy or self.uses_dueling or self.num_atoms > 1:
            return None
        encoder_layers = mlp_layers_of(self.encoder)
        stream = self.af
        if encoder_layers is None or not isinstance(stream, QStream) or stream.noisy:
            return None
        stream_layers = []
        for i, layer in enumerate(stream.layers):
            if i > 0 and stream.activation is not None:
                stream_layers.append(stream.activation)
            stream_layers.append(layer)
        if not all(
            isinstance(layer, torch.nn.Linear) for layer in stream.layers
        ) or not is_elementwise_activation(stream.activation):
            return None
        return encoder_layers + stream_layers

    @override(RLModule)
    def _forward_train(self, batch: Dict[str, TensorType]) -> Dict[str, TensorType]:
        # One fresh draw per update for the online net (used for Q(s_t) and the
        # double-Q argmax at s_{t+n}) and an independent one for the target net.
        self.reset_noise()
        if not self.inference_only:
            self.reset_noise(target=True)
        if Columns.STATE_IN not in batch:
            return self._forward_train_stateless(batch)
        output = super()._forward_train(batch)
        if self.uses_double_q and self.num_atoms > 1:
            # RLlib's module returns the logits of [s_t; s_{t+n}] (2B rows); the
            # loss only uses the first B (those of s_t), so keep just those.
            batch_size = output[QF_PREDS].shape[0]
            for key in (QF_LOGITS, QF_PROBS):
                output[key] = output[key][:batch_size]
        return output

    def _forward_train_stateless(
        self, batch: Dict[str, TensorType]
    ) -> Dict[str, TensorType]:
        """RLlib's DQN training forward pass, with `s_{t+n}` outside autograd.

        RLlib runs the online net on `[s_t; s_{t+n}]` in one pass with gradients,
        although the loss reads the `s_{t+n}` half only through an argmax (double
        Q), and builds the target net's graph although the targets are detached:
        backward then pushes zeros through the encoder for half the rows. Here
        only `s_t` is tracked. Same outputs, same gradients (tested), about a
        tenth less time per data-efficient Rainbow update.
        """
        next_batch = {Columns.OBS: batch[Columns.NEXT_OBS]}
        # Both online passes share this update's noise: one noisy weight each.
        reused = (
            noisy_weights_reused(self._noisy_layers())
            if self.uses_noisy
            else contextlib.nullcontext()
        )
        with reused:
            qf_outs = self.compute_q_values({Columns.OBS: batch[Columns.OBS]})
            output = {
                QF_PREDS: qf_outs[QF_PREDS],
                OBS_ENCODER_OUT: qf_outs[ENCODER_OUT].detach(),
            }
            with torch.no_grad():
                if self.uses_double_q:
                    next_outs = self.compute_q_values(next_batch)
                    output[QF_NEXT_PREDS] = next_outs[QF_PREDS]
                    output[NEXT_OBS_ENCODER_OUT] = next_outs[ENCODER_OUT]
        with torch.no_grad():
            target_outs = self.forward_target(next_batch)
        output[QF_TARGET_NEXT_PREDS] = target_outs[QF_PREDS]
        if self.num_atoms > 1:
            output[ATOMS] = target_outs[ATOMS]
            output[QF_LOGITS] = qf_outs[QF_LOGITS]
            output[QF_PROBS] = qf_outs[QF_PROBS]
            output[QF_TARGET_NEXT_PROBS] = target_outs[QF_PROBS]
        return output

    def _encode(self, encoder: Encoder, batch: Dict[str, TensorType]) -> TensorType:
        """`encoder(batch)[ENCODER_OUT]`; a plain MLP encoder runs its layers
        directly (`run_mlp_layers`: the same ops, without module-call overhead)."""
        layers = self._encoder_layers.get(id(encoder), False)
        if layers is False:
            layers = mlp_layers_of(encoder)
            self._encoder_layers[id(encoder)] = layers
        if layers is None:
            return encoder(batch)[ENCODER_OUT]
        return run_mlp_layers(layers, batch[Columns.OBS])

    def _heads(self, *, target: bool):
        af = self._target_of(self.af) if target else self.af
        if not self.uses_dueling:
            return af
        return {"af": af, "vf": self._target_of(self.vf) if target else self.vf}

    @override(DefaultDQNTorchRLModule)
    def _qf_forward_helper(
        self,
        batch: Dict[str, TensorType],
        encoder: Encoder,
        head: Union[Model, Dict[str, Model]],
        noise: bool = True,
    ) -> Dict[str, TensorType]:
        """Q-values (and C51 logits/probabilities) from `encoder` and `head`.

        Args:
            batch: Holds `obs`.
            encoder: Online or target encoder.
            head: The Q stream, or `{"af": advantage, "vf": value}` when dueling.
            noise: Use the current noise sample of noisy layers (False: means).
        """
        features = self._encode(encoder, batch)
        af = head["af"] if self.uses_dueling else head
        advantages = call_module(af, features, noise)
        num_actions = self.action_space.n
        # The callers copy out only the keys they return (the exploration and
        # inference outputs never carry the features).
        output = {ENCODER_OUT: features}
        if self.num_atoms == 1:
            q = advantages
            if self.uses_dueling:
                value = call_module(head["vf"], features, noise)
                q = value + advantages - advantages.mean(dim=-1, keepdim=True)
            output[QF_PREDS] = q
            return output

        logits = advantages.view(-1, num_actions, self.num_atoms)
        if self.uses_dueling:
            value = call_module(head["vf"], features, noise).view(-1, 1, self.num_atoms)
            logits = value + logits - logits.mean(dim=1, keepdim=True)
        probs = F.softmax(logits, dim=-1)
        output[ATOMS] = self._atoms
        output[QF_LOGITS] = logits
        output[QF_PROBS] = probs
        output[QF_PREDS] = torch.sum(probs * self._atoms, dim=-1)
        return output
