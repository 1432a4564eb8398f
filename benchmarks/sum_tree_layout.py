"""What the priority trees' block size costs: a draw plus its priority update.

A `PrioritySampler` lays its sum and min trees out for the batch size of its
first draw (`PrioritySampler.lay_out_for`). This times, side by side in one
process, one stratified draw of `batch` slots followed by the priority update
of those slots (what every replayed update of a PER buffer does), on trees of
one capacity laid out for different batch sizes, at three fills: a buffer just
past its learning start, one a tenth full (a 100k-step run in a 1M buffer) and
a full one. Arms (by the batch the trees are laid out for):

    8      fanout 128 at capacity 1M: the layout every buffer had before the
           trees followed the first draw
    32     the default (fanout 64 at 1M): a DQN batch
    drawn  the batch drawn (fanout 32 at 1M for 256: SAC's and TD3's)

The arms take turns, round by round (the order rotating); printed: the median
over `--rounds` of the µs per draw + update, and each arm's ratio to the first.

    python benchmarks/sum_tree_layout.py
    python benchmarks/sum_tree_layout.py --capacity 100000 --batch 32
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from harness import header, ratio, take_turns

from rllib_ners.replay_buffers.priority_sampler import PrioritySampler


def sampler_for(capacity: int, num_filled: int, layout_batch: int) -> PrioritySampler:
    """A PER sampler (alpha 0.6) with `num_filled` random priorities, its trees
    laid out for `layout_batch`."""
    sampler = PrioritySampler(capacity, alpha=0.6, beta=0.4)
    sampler.lay_out_for(layout_batch)
    priorities = np.random.default_rng(0).random(num_filled) + 0.1
    sampler.set_leaves(np.arange(num_filled), priorities)
    return sampler


def time_draws_and_updates(sampler, rng, batch: int, repeats: int) -> float:
    """µs per draw of `batch` slots and the priority update of those slots."""
    live = np.ones(batch, dtype=bool)
    start = time.perf_counter()
    for _ in range(repeats):
        slots, _ = sampler.draw(batch, 0.4, rng)
        sampler.update(slots, rng.random(batch) * 3.0, live)
    return 1e6 * (time.perf_counter() - start) / repeats


def per_layout(samplers, rngs, batch: int, repeats: int):
    """One round's turn of a layout: its µs per draw + update."""

    def chunk(name: str):
        return {
            "µs": time_draws_and_updates(samplers[name], rngs[name], batch, repeats)
        }

    return chunk


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=150, help="per arm and round")
    args = parser.parse_args(argv)
    layouts = {"8": 8, "32": 32, "drawn": args.batch}
    fills = sorted({3000, args.capacity // 10, args.capacity})
    print(header())
    load_before = os.getloadavg()
    rows = []
    for fill in fills:
        samplers = {
            name: sampler_for(args.capacity, fill, batch)
            for name, batch in layouts.items()
        }
        rngs = {name: np.random.default_rng(1) for name in layouts}

        chunk = per_layout(samplers, rngs, args.batch, args.repeats)
        medians = take_turns(list(layouts), args.rounds, chunk)
        rows.append(
            (
                fill,
                {name: medians[name]["µs"] for name in layouts},
                {name: samplers[name].sum_tree.fanout for name in layouts},
            )
        )
        print(f"{fill} stored: done", flush=True)
    print(
        f"\ncapacity {args.capacity}, draws of {args.batch} + their priority "
        f"update: median of {args.rounds} rounds x {args.repeats} per arm; "
        f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    print("| stored | " + " | ".join(f"laid out for {n}" for n in layouts) + " |")
    print("|---|" + "---|" * len(layouts))
    for fill, medians, fanouts in rows:
        first = medians[next(iter(layouts))]
        cells = [
            f"{medians[n]:,.0f} µs (fanout {fanouts[n]}, {ratio(first, medians[n])})"
            for n in layouts
        ]
        print(f"| {fill:,} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
