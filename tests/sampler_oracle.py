"""Does the learned sampler learn? A replay-reward oracle, no RL and no Ray.

The buffer holds N transitions; a share of them (10%) carries a marker in its
observation. Each step replays `batches` batches of 32 by priority (each batch
is scored with its own global context and its priorities updated, as the
Learner does), then the oracle replay reward is the share of marked transitions
among everything replayed in the step: the sampler is rewarded exactly for
replaying marked transitions more. The replay reward goes through the settings'
baseline, I_train is drawn from I_all, and the sampler takes one REINFORCE step
with the same loss code the Learners run (`rllib_ners.ners.reinforce`). We
track the sampling mass on the marked transitions: 0.10 at the start.

`tests/unit/test_sampler_oracle.py` runs it at CI size;
`tests/sampler_variants.py` runs the same variants in a real NERS-DQN run.

    python tests/sampler_oracle.py            # every objective x parameterization
    python tests/sampler_oracle.py --steps 500 --seeds 10 11 12
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from rllib_ners.algorithms.ners.presets import SAMPLER_VARIANTS as VARIANTS
from rllib_ners.replay_buffers.feedback import ReplayFeedback

OBS_DIM = 8


def _filled_buffer(
    num_transitions: int, marked_share: float, alpha: float, marker: str, rng
):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rllib_ners import NERSEpisodeReplayBuffer

    space = gym.spaces.Box(-10.0, 10.0, (OBS_DIM,), np.float32)
    length = 100
    buffer = NERSEpisodeReplayBuffer(
        num_transitions + 10 * length, alpha=alpha, seed=int(rng.integers(1 << 30))
    )
    episodes = []
    for e in range(num_transitions // length):
        obs = rng.normal(size=(length + 1, OBS_DIM)).astype(np.float32)
        marked = (rng.random(length + 1) < marked_share).astype(np.float32)
        if marker == "observation":  # a bit of the state, seen through enc(s)
            obs[:, 0] = marked
            rewards = rng.normal(size=length).astype(np.float32)
        else:  # the transition's reward feature r: 1 if marked, else 0
            rewards = marked[:length]
        episodes.append(
            SingleAgentEpisode(
                id_=f"oracle{e}",
                observations=list(obs),
                actions=list(rng.integers(0, 2, length)),
                rewards=list(rewards),
                terminated=True,
                len_lookback_buffer=0,
                observation_space=space,
                action_space=gym.spaces.Discrete(2),
            )
        )
    buffer.add(episodes)
    return buffer, space


def _is_marked(obs: np.ndarray, rewards: np.ndarray, marker: str) -> np.ndarray:
    return (obs[:, 0] if marker == "observation" else rewards) > 0.5


def marked_mass(buffer, marker: str = "reward") -> float:
    """Sampling mass on the stored transitions that carry the marker."""
    storage = buffer.storage
    slots = np.flatnonzero(storage.is_transition)
    leaves = np.asarray(buffer.sampler.sum_tree.leaves)[slots]
    marked = _is_marked(storage.obs[slots], storage.rewards[slots], marker)
    return float(leaves[marked].sum() / leaves.sum())


def run_oracle(
    *,
    steps: int = 500,
    seed: int = 0,
    num_transitions: int = 2000,
    marked_share: float = 0.1,
    alpha: float = 0.6,
    batches: int = 10,
    batch_size: int = 32,
    marker: str = "reward",
    record: Optional[Dict[str, Any]] = None,
    **settings,
) -> List[float]:
    """Marked-transition sampling mass after each step (index 0: the start).
    `record`, where given, gets the REINFORCE steps made (`"sampler_steps"`:
    the baseline holds the first back) and the scorer's parameters before and
    after (`"parameters"`), so a run that left the mass alone can be told from
    one that never trained."""
    from rllib_ners.algorithms.ners.sampler_update import NERSSamplerUpdate
    from rllib_ners.ners.reinforce import priority_base, sampler_loss
    from rllib_ners.ners.scorer import NERSScorer
    from rllib_ners.ners.settings import NERSSettings
    from rllib_ners.utils.optimizer_steps import make_adam

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    settings = NERSSettings(**settings)
    buffer, space = _filled_buffer(num_transitions, marked_share, alpha, marker, rng)
    scorer = NERSScorer(space, gym.spaces.Discrete(2), settings)
    optimizer = make_adam(scorer.parameter_groups())
    # The algorithms' sampler update: its baseline and its I_train draws.
    update = NERSSamplerUpdate(settings, n_step=1, gamma=0.99)
    baseline = update.baseline
    columns = ("obs", "new_obs", "actions", "rewards", "delta", "q", "ts")

    def logits_of(batch: Dict[str, np.ndarray]) -> torch.Tensor:
        tensors = {key: torch.as_tensor(np.asarray(batch[key])) for key in columns}
        return scorer.logits(scorer.featurize_batch(tensors))

    history = [marked_mass(buffer, marker)]
    start_parameters = [p.detach().clone() for p in scorer.parameters()]
    sampler_steps = 0
    for _ in range(steps):
        replayed_marked = []
        for _ in range(batches):
            batch = buffer.sample_batch(batch_size)
            slots = batch["indices"]
            batch["delta"] = buffer.slot_memory.delta[slots]
            batch["q"] = buffer.slot_memory.q[slots]
            with torch.no_grad():
                # As the Learner scores: merge the batch into the running
                # feature statistics first, then score it.
                scorer.update_scalar_statistics(
                    {key: torch.as_tensor(np.asarray(batch[key])) for key in columns}
                )
                base = priority_base(
                    logits_of(batch),
                    torch.as_tensor(batch["delta"]),
                    parameterization=settings.parameterization,
                    per_epsilon=settings.per_epsilon,
                    max_log_correction=settings.max_log_correction,
                ).numpy()
            buffer.update_feedback(
                ReplayFeedback(
                    scores=base, td_errors=batch["delta"], target_q=batch["q"]
                )
            )
            replayed_marked.append(_is_marked(batch["obs"], batch["rewards"], marker))
        replay_reward = baseline.reward(float(np.mean(replayed_marked)))
        if replay_reward is not None:
            train = update.sampler_training_batch(buffer)
            loss, _ = sampler_loss(logits_of, train, replay_reward, settings)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            sampler_steps += 1
        buffer.reset_sampled_set()
        history.append(marked_mass(buffer, marker))
    if record is not None:
        record["sampler_steps"] = sampler_steps
        record["parameters"] = (
            start_parameters,
            [p.detach().clone() for p in scorer.parameters()],
        )
    return history


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--lr", type=float, default=None, help="default: NERS's")
    parser.add_argument("--train-size", type=int, default=None)
    parser.add_argument("--normalizer-size", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    extra = {
        key: value
        for key, value in (
            ("lr", args.lr),
            ("train_size", args.train_size),
            ("normalizer_size", args.normalizer_size),
        )
        if value is not None
    }
    checkpoints = sorted({0, 100, 200, 300, args.steps} & set(range(args.steps + 1)))
    print("marked-transition sampling mass (start 0.10) after k REINFORCE steps")
    print(f"{'variant':40s} " + " ".join(f"{k:>6d}" for k in checkpoints))
    for name, variant in VARIANTS.items():
        started = time.perf_counter()
        runs = [
            run_oracle(steps=args.steps, seed=seed, **variant, **extra)
            for seed in args.seeds
        ]
        means = np.mean([[run[k] for k in checkpoints] for run in runs], axis=0)
        seconds = time.perf_counter() - started
        print(
            f"{name:40s} "
            + " ".join(f"{m:6.3f}" for m in means)
            + f"   ({len(runs)} seed(s), {seconds:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
