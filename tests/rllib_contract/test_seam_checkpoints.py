"""Contract of `rllib_ners.seam.checkpoints`: RLlib's component selection."""

from __future__ import annotations

import pytest
from ray.rllib.utils.checkpoints import Checkpointable

from rllib_ners.seam.checkpoints import includes_component


class _Component(Checkpointable):
    def get_state(self, components=None, *, not_components=None, **kwargs):
        return {
            name: 1
            for name in ("a", "b")
            if includes_component(self, name, components, not_components)
        }

    def set_state(self, state):
        pass

    def get_ctor_args_and_kwargs(self):
        return (), {}


@pytest.mark.parametrize(
    "components, not_components, expected",
    [
        (None, None, {"a", "b"}),
        ("a", None, {"a"}),
        (["a/sub"], None, {"a"}),
        (None, ["b"], {"a"}),
        (["a", "b"], "a", {"b"}),
    ],
)
def test_components_are_chosen_by_rllibs_rule(components, not_components, expected):
    state = _Component().get_state(components, not_components=not_components)
    assert set(state) == expected, (
        "RLlib changed: Checkpointable._check_component's rule. Adapt "
        "rllib_ners/seam/checkpoints.py."
    )
