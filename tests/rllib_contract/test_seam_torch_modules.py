"""Contract of `rllib_ners.seam.torch_modules`: an nn.Module's persistent buffers."""

from __future__ import annotations

import torch

from rllib_ners.seam.torch_modules import persistent_buffers


def _fail(what_changed: str) -> str:
    return f"torch changed: {what_changed}. Adapt rllib_ners/seam/torch_modules.py."


class _Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2))
        self.register_buffer("cache", torch.zeros(2), persistent=False)
        self.register_buffer("unset", None)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = _Head()
        self.register_buffer("step", torch.tensor(0))
        self.register_buffer("atoms", torch.linspace(0, 1, 5), persistent=False)


def test_persistent_buffers_are_the_buffers_of_the_state_dict():
    net = _Net()
    found = dict(persistent_buffers(net))
    state = net.state_dict(keep_vars=True)
    parameters = dict(net.named_parameters())
    expected = {name: value for name, value in state.items() if name not in parameters}
    assert list(found) == ["step", "head.scale"], _fail(
        "nn.Module keeps buffers or their persistence elsewhere than _buffers / "
        "_non_persistent_buffers_set"
    )
    assert set(found) == set(expected)
    for name, buffer in found.items():
        assert buffer is expected[name], _fail(f"{name} is not the module's tensor")
    all_buffers = {name for name, _ in net.named_buffers()}
    assert all_buffers - set(found) == {"atoms", "head.cache"}
