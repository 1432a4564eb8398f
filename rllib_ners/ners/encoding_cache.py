"""A cache of the NERS scorer's image-encoder outputs (torch, no Ray).

Scoring a sampled batch runs the sampler's own encoder on its `obs` and
`new_obs`; with images (the paper's CNN) that is most of what scoring costs.
The encoder changes only at a sampler update, one REINFORCE step per episode
end, and in between replay draws the same stored observations again and again
(one frame stack is one item's `obs` and another's `new_obs`). So the outputs
are kept per stored observation and reused until the encoder changes or the
buffer rewrites the observation: what scoring returns is what encoding again
would return (the same encoder on the same pixels).

An entry sits at `slot % size` and carries the observation's key from the
buffer (`rllib_ners.replay_buffers.frame_stack.observation_keys`, which changes
whenever the observation stored at that slot could) and the encoder version it
was computed with. Keys are unique across slots, so two slots sharing an entry
only cost misses. Only scoring, without gradients, reads the cache; REINFORCE
encodes its batches with gradients.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Union

import numpy as np
import torch


class EncodingCache:
    """Encoder outputs of stored observations, valid until `invalidate()`.

    Args:
        size: Entries (the replay capacity fits every stored observation).
        dim: Size of one encoder output.
        device: Where the entries live (the Learner's device).
    """

    def __init__(self, size: int, dim: int, device: Union[str, torch.device]):
        self.size = int(size)
        self.keys = torch.full((self.size,), -1, dtype=torch.int64, device=device)
        self.versions = torch.full((self.size,), -1, dtype=torch.int64, device=device)
        self.values = torch.zeros((self.size, dim), dtype=torch.float32, device=device)
        self.version = 0
        self.num_lookups = 0
        self.num_hits = 0

    def invalidate(self) -> None:
        """Forgets every entry (the encoder changed): O(1), by version."""
        self.version += 1

    def encode(
        self,
        encode: Callable[[torch.Tensor], torch.Tensor],
        obs: Sequence[torch.Tensor],
        slots: torch.Tensor,
        keys: torch.Tensor,
    ) -> torch.Tensor:
        """`encode(obs)` (`[n, dim]`, float32, no gradients), running `encode`
        only on the observations without a valid entry, and storing those.

        `obs`: the observations, as one or more tensors taken one after the
        other (e.g. `(obs, new_obs)`; never concatenated: only the missed rows
        are copied).
        `slots` and `keys` (int64, `[n]`) are the observations' buffer slots
        and keys."""
        rows = slots.to(self.keys.device).long() % self.size
        keys = keys.to(self.keys.device).long()
        with torch.no_grad():
            hit = (self.keys[rows] == keys) & (self.versions[rows] == self.version)
            out = self.values[rows]
            missed = (~hit).nonzero().squeeze(-1)
            num_missed = int(missed.numel())
            if num_missed:
                fresh = encode(_take_rows(obs, missed)).float()
                out[missed] = fresh
                self.values[rows[missed]] = fresh
                self.keys[rows[missed]] = keys[missed]
                self.versions[rows[missed]] = self.version
        self.num_lookups += int(rows.numel())
        self.num_hits += int(rows.numel()) - num_missed
        return out

    def get_state(self) -> Dict[str, Any]:
        """The valid entries (numpy), for checkpoints: a restored Learner then
        scores exactly as the saved one would have (a fresh encoding can differ
        from a cached one in the last float bit, as conv results depend a little
        on the batch they were computed in)."""
        rows = (self.versions == self.version).nonzero().squeeze(-1)
        return {
            "rows": rows.cpu().numpy(),
            "keys": self.keys[rows].cpu().numpy(),
            "values": self.values[rows].cpu().numpy(),
            "num_lookups": self.num_lookups,
            "num_hits": self.num_hits,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        """Forgets every entry, then takes those of `get_state()`."""
        self.invalidate()
        device = self.keys.device
        rows = torch.as_tensor(np.asarray(state["rows"]), device=device).long()
        if rows.numel() and int(rows.max()) >= self.size:
            raise ValueError(
                f"The checkpoint's NERS encoding cache has entries up to row "
                f"{int(rows.max())}, but this Learner's holds {self.size}: restore "
                f"with the same replay_buffer_config['capacity']."
            )
        self.keys[rows] = torch.as_tensor(np.asarray(state["keys"]), device=device)
        self.values[rows] = torch.as_tensor(np.asarray(state["values"]), device=device)
        self.versions[rows] = self.version
        self.num_lookups = int(state["num_lookups"])
        self.num_hits = int(state["num_hits"])


def _take_rows(parts: Sequence[torch.Tensor], index: torch.Tensor) -> torch.Tensor:
    """Rows `index` (ascending) of `torch.cat(parts)`, without building the
    concatenation."""
    taken, start = [], 0
    for part in parts:
        end = start + part.shape[0]
        inside = index[(index >= start) & (index < end)] - start
        taken.append(part[inside.to(part.device)])
        start = end
    return torch.cat(taken)
