"""Target-network updates of the DQN, SAC and TD3 Learners, as multi-tensor ops.

RLlib's `DQNLearner.after_gradient_based_update` (SAC's too) updates each
(main, target) network pair through `update_target_network`: a `state_dict()`
of both, new tensors `tau * main + (1 - tau) * target`, a `load_state_dict()`.
`DQNTargetUpdates` makes the same update at the same env steps with the
same metrics, as two multi-tensor ops over all of a module's pairs
(`polyak_update`: the same values element by element); the Learner runs it in
its `after_gradient_based_update` in place of DQNLearner's step.

On a CPU a multi-tensor op runs tensor by tensor (one op, and for
`_foreach_mul` one new tensor, per tensor), so `PolyakTargets` there keeps a
module's target tensors as views into one flat tensor and makes the same
update in four whole-array passes (`FlatPolyak`: the main tensors gathered,
scaled by `tau`, the targets scaled by `1 - tau`, the sum): the
same values, element by element, with 4 ops instead of 3 per tensor (54 for
TD3's three networks).

RLlib keeps the env step of each module's last target update in a plain
attribute that no checkpoint holds, so a restored Learner would update its
targets at its first update; `DQNTargetUpdates` saves it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from ray.rllib.algorithms.dqn.dqn_learner import (
    LAST_TARGET_UPDATE_TS,
    NUM_TARGET_UPDATES,
)
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.torch_utils import update_target_network

from rllib_ners.seam.checkpoints import includes_component
from rllib_ners.seam.torch_internals import foreach_add_, foreach_mul, foreach_mul_

TARGET_UPDATE_TS_STATE = "last_target_update_ts"

TensorLists = Tuple[List[torch.Tensor], List[torch.Tensor]]


def polyak_pairs(main_net: torch.nn.Module, target_net: torch.nn.Module):
    """The `(main, target)` state-dict tensors RLlib's `update_target_network`
    averages, as two lists; None if any entry is not a floating-point tensor of
    the same dtype in both (then RLlib's own update runs)."""
    main_state = main_net.state_dict(keep_vars=True)
    mains, targets = [], []
    for name, target in target_net.state_dict(keep_vars=True).items():
        main = main_state[name]
        if not (target.is_floating_point() and main.dtype == target.dtype):
            return None
        mains.append(main)
        targets.append(target)
    return mains, targets


def flatten_into_one(tensors: List[torch.Tensor]) -> Optional[torch.Tensor]:
    """Moves `tensors` into one new flat tensor, in order, each becoming a view
    of its part (same shape, same values; the tensor objects stay, so modules
    and state dicts holding them see no change), and returns it. None, with
    nothing moved, unless they are distinct CPU tensors of one dtype: on a GPU
    the multi-tensor kernels are fused already (and CUDA graphs keep tensor
    addresses)."""
    first = tensors[0]
    if not all(
        tensor.device.type == "cpu" and tensor.dtype == first.dtype
        for tensor in tensors
    ) or len({tensor.data_ptr() for tensor in tensors}) != len(tensors):
        return None
    flat = torch.empty(sum(tensor.numel() for tensor in tensors), dtype=first.dtype)
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            part = flat[offset : offset + tensor.numel()].view(tensor.shape)
            part.copy_(tensor)
            tensor.data = part
            offset += tensor.numel()
    return flat


def views_of(flat: torch.Tensor, tensors: List[torch.Tensor]) -> bool:
    """Whether `tensors` are still the consecutive views into `flat` that
    `flatten_into_one` made (nothing has replaced their memory since)."""
    address, item_size = flat.data_ptr(), flat.element_size()
    for tensor in tensors:
        if tensor.data_ptr() != address:
            return False
        address += tensor.numel() * item_size
    return True


class FlatPolyak:
    """`polyak_update` for CPU targets kept as views into one flat tensor:
    RLlib's `tau * main + (1 - tau) * target`, each product rounded on its own,
    then the sum, in four whole-array passes (the main tensors gathered into
    one scratch tensor, scaled by `tau`; the targets scaled by `1 - tau`; the
    sum): the same values."""

    def __init__(self, mains, targets, flat_targets: torch.Tensor):
        self.mains, self.targets, self.flat_targets = mains, targets, flat_targets
        # Flat views of the main tensors (checked against them every update).
        self.main_views = [main.detach().view(-1) for main in mains]
        self.scratch = torch.empty_like(flat_targets)

    @classmethod
    def build(cls, mains, targets) -> Optional[FlatPolyak]:
        """Flattens `targets` (`flatten_into_one`); None where that or the main
        tensors do not allow it (not contiguous CPU tensors). Each main has its
        target's dtype (`polyak_pairs`), so one dtype for the targets is one
        for all."""
        if not all(
            main.device.type == "cpu" and main.is_contiguous() for main in mains
        ):
            return None
        flat_targets = flatten_into_one(targets)
        return None if flat_targets is None else cls(mains, targets, flat_targets)

    def is_current(self) -> bool:
        """Whether every tensor is still where this was built to find it."""
        return views_of(self.flat_targets, self.targets) and all(
            main.data_ptr() == view.data_ptr()
            for main, view in zip(self.mains, self.main_views)
        )

    def update(self, tau: float) -> None:
        with torch.no_grad():
            torch.cat(self.main_views, out=self.scratch)
            self.scratch.mul_(tau)
            self.flat_targets.mul_(1 - tau)
            self.flat_targets.add_(self.scratch)


def polyak_update(mains, targets, tau: float) -> None:
    """`target = tau * main + (1 - tau) * target` for every pair, in place:
    RLlib's `update_target_network`, element by element (each product rounded
    on its own, then one sum: the same values)."""
    if not targets:
        return
    with torch.no_grad():
        mains = [tensor.detach() for tensor in mains]
        targets = [tensor.detach() for tensor in targets]
        foreach_mul_(targets, 1 - tau)
        foreach_add_(targets, foreach_mul(mains, tau))


class PolyakTargets:
    """One module's (main, target) pairs, updated together.

    The tensor lists are built once (parameters are updated in place, so the
    same tensors stay current); a pair with anything unusual in its state
    (not floating point, dtypes differ) makes the module's pairs take RLlib's
    own update. On a CPU the target tensors become views into one flat tensor
    (`flatten_into_one`), updated in whole-array passes; should anything
    replace their memory (a module moved, say), they are flattened again.
    """

    # False: every module's update takes the multi-tensor ops even on a CPU
    # (what `benchmarks/study_costs.py --suite updates` compares the flat
    # update with).
    flat_on_cpu: bool = True

    def __init__(self, pairs):
        self.pairs = list(pairs)
        listed = [polyak_pairs(main, target) for main, target in self.pairs]
        self.tensors: Optional[TensorLists] = None
        self.flat: Optional[FlatPolyak] = None
        if all(listed):
            self.tensors = (
                [tensor for mains, _ in listed for tensor in mains],
                [tensor for _, targets in listed for tensor in targets],
            )
            self.flat = FlatPolyak.build(*self.tensors)

    def update(self, tau: float) -> None:
        if self.tensors is not None:
            if self.flat is not None and not self.flat.is_current():
                self.flat = FlatPolyak.build(*self.tensors)
            if self.flat is not None and self.flat_on_cpu:
                self.flat.update(tau)
            else:
                polyak_update(*self.tensors, tau)
            return
        for main_net, target_net in self.pairs:
            update_target_network(main_net=main_net, target_net=target_net, tau=tau)


class DQNTargetUpdates:
    """The target-network updates of a DQN or SAC Learner (`DQNLearner`
    subclasses): DQNLearner's update at the same env steps with the same
    metrics, the Polyak step as multi-tensor ops (`PolyakTargets`), and the env
    step of each module's last update in checkpoints (see the module
    docstring).

    The Learner holds one as `target_updates` (built in `build()`), calls
    `after_update(timesteps)` from its `after_gradient_based_update` in place
    of DQNLearner's step, and `add_state` / `set_state` from its own state
    methods.
    """

    def __init__(self, learner):
        self.learner = learner
        self.polyak_targets: Dict[Any, PolyakTargets] = {}

    def after_update(self, timesteps: Dict[str, Any]) -> None:
        """Updates each module's targets whose `target_network_update_freq`
        env steps have passed since their last update."""
        learner = self.learner
        timestep = timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
        for module_id, module in learner.module.items():
            config = learner.config.get_config_for_module(module_id)
            since_last = timestep - learner.last_update_ts_by_mid[module_id]
            if since_last < config.target_network_update_freq or not isinstance(
                module.unwrapped(), TargetNetworkAPI
            ):
                continue
            self.polyak_targets_of(module_id, module).update(config.tau)
            learner.metrics.log_value(
                (module_id, NUM_TARGET_UPDATES), 1, reduce="lifetime_sum"
            )
            learner.last_update_ts_by_mid[module_id] = timestep
            learner.metrics.log_value(
                (module_id, LAST_TARGET_UPDATE_TS), timestep, reduce="max"
            )

    def polyak_targets_of(self, module_id, module) -> PolyakTargets:
        """The module's (main, target) pairs, gathered once per module."""
        key = (module_id, id(module.unwrapped()))
        targets = self.polyak_targets.get(key)
        if targets is None:
            pairs = module.unwrapped().get_target_network_pairs()
            targets = self.polyak_targets[key] = PolyakTargets(pairs)
        return targets

    def add_state(self, state: Dict[str, Any], components, not_components) -> None:
        """Adds the env step of each module's last target update to the
        Learner's `state` (RLlib keeps it in an attribute no checkpoint holds,
        so a restored Learner would update its targets at its first update)."""
        learner = self.learner
        if includes_component(
            learner, TARGET_UPDATE_TS_STATE, components, not_components
        ):
            state[TARGET_UPDATE_TS_STATE] = dict(learner.last_update_ts_by_mid)

    def set_state(self, state: Dict[str, Any]) -> None:
        if TARGET_UPDATE_TS_STATE in state:
            self.learner.last_update_ts_by_mid.update(state[TARGET_UPDATE_TS_STATE])
