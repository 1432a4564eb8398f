"""`UpdateGraphs` with real CUDA graphs (the `gpu` marker): a capture that
fails leaves the process able to draw random numbers and to capture again.

torch registers its CUDA generator with a graph when the capture begins and
releases it when the capture ends well; a capture that fails left it
registered, and every later random draw of the process failed ("Offset
increment outside graph capture encountered unexpectedly"). That is what the
first GPU run of the `gpu` suite showed: one SAC capture failed, and every
random draw after it, in that test and the tests after it, raised. No Ray here.

Skipped without CUDA, also in the suite's CPU dry run (no real graphs there).
"""

from __future__ import annotations

import logging

import pytest
import torch

from rllib_ners.utils.deferred_metrics import DeferredMetrics
from rllib_ners.utils.update_graphs import UpdateGraphs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class NoisyOwner:
    """A small regression net on the GPU whose update draws noise (as SAC's
    reparameterised actions do); `read_on_host` makes the update read a value
    on the host, which no capture allows."""

    def __init__(self, *, read_on_host: bool):
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 1).cuda()
        self.optimizer = torch.optim.Adam(
            self.net.parameters(), lr=1e-2, capturable=True
        )
        self.metrics = DeferredMetrics()
        self.read_on_host = read_on_host

    def update(self, inputs):
        batch = inputs["m"]
        noise = torch.randn_like(batch["x"])
        errors = self.net(batch["x"] + 0.1 * noise).squeeze(-1) - batch["y"]
        loss = (errors**2).mean()
        if self.read_on_host:
            float(loss)  # a host read: ends any capture
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        self.optimizer.step()
        self.metrics.log_value(("m", "loss"), loss, window=1)
        return {"m": {"errors": errors}}, {"m": loss}

    def fingerprint(self):
        return tuple(group["lr"] for group in self.optimizer.param_groups)


def batches(num: int):
    generator = torch.Generator().manual_seed(1)
    return [
        {
            "m": {
                "x": torch.randn(16, 4, generator=generator).cuda(),
                "y": torch.randn(16, generator=generator).cuda(),
            }
        }
        for _ in range(num)
    ]


def weights_after(owner, batch_list, graphs=None):
    torch.manual_seed(7)
    for batch in batch_list:
        if graphs is None:
            owner.update(batch)
        else:
            graphs.run((), batch, owner.update, owner)
    torch.cuda.synchronize()
    return [param.detach().cpu().clone() for param in owner.net.parameters()]


def test_a_failed_capture_leaves_random_draws_and_later_captures_working(caplog):
    failing = NoisyOwner(read_on_host=True)
    graphs = UpdateGraphs(fingerprint=failing.fingerprint, warmup_updates=2)
    with caplog.at_level(logging.WARNING, logger="rllib_ners.utils.update_graphs"):
        got = weights_after(failing, batches(6), graphs)
    assert graphs.num_captures == 0
    assert "capturing the update failed" in graphs.disabled_because
    assert any("capturing the update failed" in r.getMessage() for r in caplog.records)
    # The eager updates after the failure drew what eager updates draw.
    expected = weights_after(NoisyOwner(read_on_host=True), batches(6))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    torch.randn(8, device="cuda")  # raised before the fix

    # A capture in the same process still works, random draws included, and
    # replays what eager updates compute.
    owner = NoisyOwner(read_on_host=False)
    graphs = UpdateGraphs(fingerprint=owner.fingerprint, warmup_updates=2)
    got = weights_after(owner, batches(8), graphs)
    assert graphs.disabled_because is None
    assert graphs.num_captures == 1 and graphs.num_replays == 6
    expected = weights_after(NoisyOwner(read_on_host=False), batches(8))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
