"""The buffer's only contact with RLlib's episodes.

Reads `SingleAgentEpisode` fragments (or `PackedFragments`) into plain chunk
dicts for the `writer` (`read_chunk`, kept Ray-free in `packed_fragments`,
which joins the same fields for shipping), sizes the `RingStorage` from the
first one, and turns sampled numpy batches back into lists of
`SingleAgentEpisode`, as RLlib's `PrioritizedEpisodeReplayBuffer.sample()`
returns them (`sample_episodes` serves the buffer's `sample()`).
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners.replay_buffers.buffer_names import (
    ACTIONS,
    INDICES,
    N_STEP,
    NEXT_INDICES,
    NEXT_OBS,
    OBS,
    REWARDS,
    SAMPLE_FIX,
    SETTING_FIX,
    TERMINATEDS,
    TIMESTEPS,
    TRUNCATEDS,
    WEIGHTS,
)
from rllib_ners.replay_buffers.frame_stack import check_stackable
from rllib_ners.replay_buffers.n_step import check_gamma, normalize_n_step
from rllib_ners.replay_buffers.packed_fragments import (  # noqa: F401 (re-exported)
    PackedFragments,
    read_chunk,
)
from rllib_ners.replay_buffers.priority_sampler import check_beta
from rllib_ners.replay_buffers.ring_storage import RingStorage
from rllib_ners.seam.episodes import OneStepEpisodeBuilder
from rllib_ners.utils.checks import check_positive_int

# ------------------------------------------------------------ episodes -> chunks
# What a buffer of one kind names when handed the other kind's episodes.
_OTHER_KIND = {
    SingleAgentEpisode: (
        "multi-agent",
        "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer",
    ),
    MultiAgentEpisode: (
        "single-agent",
        "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
    ),
}


def episodes_to_add(episodes, episode_class: type, buffer_class: type) -> list:
    """`add()`'s argument as a list of `episode_class` instances
    (`SingleAgentEpisode` or `MultiAgentEpisode`); any other episode raises a
    ValueError naming the buffer type for the other kind of config (a
    multi-agent config given the single-agent buffer type, or the reverse)."""
    if not isinstance(episodes, (list, tuple)):
        episodes = [episodes]
    for episode in episodes:
        if not isinstance(episode, episode_class):
            config_kind, buffer_type = _OTHER_KIND[episode_class]
            packed = episode_class is SingleAgentEpisode
            raise ValueError(
                f"{buffer_class.__name__}.add() takes {episode_class.__name__}s"
                f"{' (or PackedFragments)' if packed else ''}, "
                f"got a {type(episode).__name__}. For a {config_kind} config set "
                f"replay_buffer_config['type'] to '{buffer_type}'."
            )
    return list(episodes)


def single_agent_chunks(episodes, buffer_class: type) -> List[dict]:
    """The chunks `add()` of a single-agent buffer stores from `episodes`: a
    `SingleAgentEpisode`, a `PackedFragments` (what our training loop's remote
    EnvRunners ship) or a list of them, in order; fragments without steps
    store nothing."""
    if not isinstance(episodes, (list, tuple)):
        episodes = [episodes]
    chunks = []
    for item in episodes:
        if isinstance(item, PackedFragments):
            chunks += item.chunks()
            continue
        (episode,) = episodes_to_add(item, SingleAgentEpisode, buffer_class)
        if len(episode) > 0:
            chunks.append(read_chunk(episode))
    return chunks


def allocate_storage(storage: RingStorage, chunk: dict, frame_stack: int) -> None:
    """Sizes the storage's fields and spaces after `chunk`'s."""
    storage.observation_space = chunk["observation_space"]
    storage.action_space = chunk["action_space"]
    check_stackable(chunk["obs"], frame_stack)
    extra = {
        key: np.asarray(values)[:1] for key, values in chunk["extra_outputs"].items()
    }
    storage.allocate(chunk["obs"], chunk["actions"], extra)


def check_chunks_fit_storage(storage: RingStorage, chunks: List[dict]) -> None:
    """Raises ValueError for a chunk whose observations or actions per step
    differ in shape from the stored ones (numpy would refuse the write only
    after older episodes were evicted for it)."""
    for chunk in chunks:
        for field, values, stored in (
            ("observations", chunk["obs"], storage.obs),
            ("actions", chunk["actions"], storage.actions),
        ):
            if np.shape(values)[1:] != stored.shape[1:]:
                raise ValueError(
                    f"An episode's {field} of shape {np.shape(values)[1:]} per step "
                    f"do not fit the {stored.shape[1:]} this buffer stores: one "
                    f"buffer holds the episodes of one observation and action "
                    f"space (one buffer per env)."
                )


def read_extra_columns(chunk: dict, columns: Dict[str, np.ndarray]) -> None:
    """Sets `chunk["extra"]`: its steps' values of every stored extra output."""
    outputs, n = chunk["extra_outputs"], chunk["len"]
    chunk["extra"] = {}
    for key, column in columns.items():
        if key in outputs:
            values = np.asarray(outputs[key]).reshape((n,) + column.shape[1:])
        else:
            # EnvRunners always send the same keys; random-action warm-up chunks
            # may carry none, and those steps get zeros (see `sample()`).
            values = np.zeros((n,) + column.shape[1:], dtype=column.dtype)
        chunk["extra"][key] = values


# ------------------------------------------------------------ storage -> episodes
def stored_fragments(storage: RingStorage) -> List[Tuple[int, np.ndarray]]:
    """`(uid, obs slots in time order)` of every stored episode, oldest first.

    Each episode's slots are its stored transitions followed by its tail (the
    last observation). Grouped with one sort over the occupied slots.
    """
    uids = np.fromiter(storage.steps_per_episode, dtype=np.int64)
    if uids.size == 0:
        return []
    slots = np.flatnonzero(storage.occupied & np.isin(storage.episode_uid, uids))
    # Grouped by episode, each in write order (the stamp grows with every write).
    slots = slots[np.lexsort((storage.stamp[slots], storage.episode_uid[slots]))]
    slot_uids = storage.episode_uid[slots]
    starts = np.flatnonzero(np.r_[True, slot_uids[1:] != slot_uids[:-1]])
    ends = np.r_[starts[1:], slots.size]
    oldest_first = np.argsort(storage.stamp[slots[starts]], kind="stable")
    return [
        (int(slot_uids[starts[k]]), slots[starts[k] : ends[k]]) for k in oldest_first
    ]


def stored_episodes(storage: RingStorage, **identity) -> List[SingleAgentEpisode]:
    """Every stored episode as a `SingleAgentEpisode` (its stored steps only),
    oldest first; `identity` (e.g. `agent_id`) goes to every episode."""
    return [e for e, _ in stored_episodes_with_slots(storage, **identity)]


def stored_episodes_with_slots(
    storage: RingStorage, **identity
) -> List[Tuple[SingleAgentEpisode, np.ndarray]]:
    """`stored_episodes()`, each with the slots of its steps."""
    episodes = []
    for uid, slots in stored_fragments(storage):
        steps = slots[:-1]
        last = steps[-1]
        episode = SingleAgentEpisode(
            id_=storage.episode_ids[uid],
            observations=list(storage.obs[slots]),
            observation_space=storage.observation_space,
            infos=list(storage.infos[slots]),
            actions=list(storage.actions[steps]),
            action_space=storage.action_space,
            rewards=storage.rewards[steps].tolist(),
            terminated=bool(storage.terminated[last]),
            truncated=bool(storage.truncated[last]),
            extra_model_outputs={
                key: list(column[steps]) for key, column in storage.extra.items()
            },
            len_lookback_buffer=0,
            t_started=int(storage.ts[slots[0]]),
            **identity,
        )
        episodes.append((episode, steps))
    return episodes


# ------------------------------------------------------------ batches -> episodes
def check_sample_kwargs(kwargs: dict) -> None:
    """Accepts the `sample()` arguments RLlib passes to other buffers
    (`sample_episodes`, `lookback`, `min_batch_length_T`) as long as they ask
    for nothing unsupported; raises otherwise."""
    known = {"sample_episodes", "lookback", "min_batch_length_T"}
    unknown = set(kwargs) - known
    if unknown:
        raise ValueError(
            f"Unknown `sample()` arguments: {sorted(unknown)}. It takes RLlib's: "
            f"num_items or batch_size_B, batch_length_T, n_step, beta, gamma, "
            f"include_infos, include_extra_model_outputs, to_numpy (and "
            f"sample_episodes=True, lookback=0, min_batch_length_T=0)."
        )
    if not kwargs.get("sample_episodes", True):
        # RLlib's uniform EpisodeReplayBuffer returns a batch dict for it;
        # ours, as RLlib's prioritized one, returns episodes only.
        raise ValueError(
            f"sample_episodes={kwargs['sample_episodes']!r}: this buffer returns "
            f"episodes only; leave sample_episodes at True (for numpy columns, "
            f"use sample_batch())."
        )
    if kwargs.get("lookback") or kwargs.get("min_batch_length_T"):
        raise ValueError(
            "`lookback` and `min_batch_length_T` (stateful modules, burn-in) are "
            "not supported by this buffer; use a stateless RLModule."
        )


def check_batch_size_arguments(
    num_items: Optional[int], batch_size_B: Optional[int]
) -> None:
    """`sample()`'s batch size: `num_items` or `batch_size_B`, not both (as
    RLlib's buffers refuse), and not 0, which would fall through to the
    buffer's default batch size unnoticed."""
    if num_items is not None and batch_size_B is not None:
        raise ValueError(
            f"sample() got num_items={num_items} and batch_size_B={batch_size_B}; "
            f"give either one (RLlib's buffers refuse both too)."
        )
    for name, value in (("num_items", num_items), ("batch_size_B", batch_size_B)):
        if value is not None:
            check_positive_int(name, value, fix=SAMPLE_FIX)


def sample_episodes(
    buffer,
    *,
    num_items: Optional[int],
    batch_size_B: Optional[int],
    batch_length_T: Optional[int],
    n_step,
    beta: Optional[float],
    gamma: float,
    include_infos: bool,
    include_extra_model_outputs: bool,
    to_numpy: bool,
    **kwargs,
) -> List[SingleAgentEpisode]:
    """What the buffer's `sample()` returns for RLlib's `sample()` arguments:
    with `batch_length_T > 1` sequences (`buffer.sample_sequences()`), else
    1-step transitions (`buffer.sample_batch()`), as `SingleAgentEpisode`s.

    Raises a ValueError for arguments the buffer cannot serve (see
    `check_sample_kwargs`; sequences need `n_step=1`).
    """
    check_sample_kwargs(kwargs)
    check_batch_size_arguments(num_items, batch_size_B)
    T = batch_length_T if batch_length_T is not None else buffer.batch_length_T
    if beta is not None:
        check_beta(beta)
    check_gamma(gamma)
    if T and T > 1:
        if normalize_n_step(n_step) != (1, 1):
            raise ValueError(
                f"Sequence sampling (batch_length_T={T}) needs n_step=1, got "
                f"n_step={n_step!r}."
            )
        if num_items is not None and num_items < T:
            raise ValueError(
                f"sample(num_items={num_items}) with batch_length_T={T} draws "
                f"num_items // batch_length_T sequences, none here: ask for at "
                f"least {T} items, or give batch_size_B (sequences) instead."
            )
        B = batch_size_B or (num_items // T if num_items else buffer.batch_size_B)
        B = check_positive_int("batch_size_B", B, fix=SETTING_FIX)
        batch = buffer.sample_sequences(B, T, beta=beta, include_infos=include_infos)
        return sequences_to_episodes(
            batch,
            buffer.storage,
            include_infos=include_infos,
            include_extra=include_extra_model_outputs,
            observation_space=buffer.sampled_observation_space,
            to_numpy=to_numpy,
            identities=buffer.episode_identities(batch[INDICES]),
        )
    batch = buffer.sample_batch(
        num_items or batch_size_B or buffer.batch_size_B,
        n_step=n_step,
        gamma=gamma,
        beta=beta,
        include_extra_model_outputs=include_extra_model_outputs,
    )
    return transitions_to_episodes(
        batch,
        buffer.storage,
        item_columns=buffer.item_columns(batch),
        include_infos=include_infos,
        include_extra=include_extra_model_outputs,
        observation_space=buffer.sampled_observation_space,
        to_numpy=to_numpy,
        identities=buffer.episode_identities(batch[INDICES]),
    )


def transitions_to_episodes(
    batch: Dict[str, np.ndarray],
    storage: RingStorage,
    *,
    item_columns: Dict[str, np.ndarray],
    include_infos: bool,
    include_extra: bool,
    observation_space,
    to_numpy: bool,
    identities: Optional[Dict[str, list]] = None,
) -> List[SingleAgentEpisode]:
    """One single-step episode `(o_t, a_t, R_t^n, o_{t+n})` per sampled item.

    `weights`, `n_step`, the `item_columns` and (with `include_extra`) the
    stored extra model outputs go to each episode's extra model outputs; with
    `include_infos` its infos are `(info_t, info_{t+n})` from the storage.
    `identities` maps `SingleAgentEpisode` arguments (`id_`, `agent_id`,
    `module_id`, `multi_agent_episode_id`) to one value per item.
    """
    num_items = len(batch[INDICES])
    if include_infos:
        infos = [
            list(pair)
            for pair in zip(
                storage.infos[batch[INDICES]], storage.infos[batch[NEXT_INDICES]]
            )
        ]
    else:
        infos = [[{}, {}] for _ in range(num_items)]
    # Extra model outputs per item: columns split into per-item values once
    # (numpy scalars and row views, as indexing item by item would give).
    extra_columns = {"weights": batch[WEIGHTS], "n_step": batch[N_STEP]}
    extra_columns.update(item_columns)
    if include_extra:
        extra_columns.update({key: batch[key] for key in storage.extra})
    extra_values = {key: list(column) for key, column in extra_columns.items()}
    identities = identities or {}
    no_identity = [None] * num_items
    episodes = OneStepEpisodeBuilder(observation_space, storage.action_space).build(
        ids=identities.get("id_") or new_episode_ids(num_items),
        observations=list(batch[OBS]),
        next_observations=list(batch[NEXT_OBS]),
        infos=infos,
        actions=list(batch[ACTIONS]),
        rewards=batch[REWARDS].tolist(),
        terminateds=batch[TERMINATEDS].tolist(),
        truncateds=batch[TRUNCATEDS].tolist(),
        t_starteds=batch[TIMESTEPS].tolist(),
        extra_model_outputs=extra_values,
        agent_ids=identities.get("agent_id") or no_identity,
        module_ids=identities.get("module_id") or no_identity,
        multi_agent_episode_ids=(
            identities.get("multi_agent_episode_id") or no_identity
        ),
    )
    if to_numpy:
        for episode in episodes:
            episode.to_numpy()
    return episodes


def new_episode_ids(num: int) -> List[str]:
    """`num` ids of the form `uuid.uuid4().hex` (RLlib's episode ids), from one
    `os.urandom` call: 16 random bytes each with the version 4 and RFC 4122
    variant bits set, as `uuid.uuid4()` sets them (it costs ~1.6 us an id)."""
    raw = np.frombuffer(os.urandom(16 * num), dtype=np.uint8).reshape(num, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    text = raw.tobytes().hex()
    return [text[start : start + 32] for start in range(0, 32 * num, 32)]


def sequences_to_episodes(
    batch: Dict[str, np.ndarray],
    storage: RingStorage,
    *,
    include_infos: bool,
    observation_space,
    include_extra: bool = True,
    to_numpy: bool = False,
    identities: Optional[Dict[str, list]] = None,
) -> List[SingleAgentEpisode]:
    """One episode of `lengths[b]` steps per row of `sequence_columns()`, with
    per-step `weights` and (with `include_extra`) the stored extra model
    outputs; `to_numpy` converts each episode as RLlib's `sample()` does;
    `identities` as in `transitions_to_episodes`."""
    identities = identities or {}
    extra_keys = list(storage.extra) if include_extra else []
    episodes = []
    for b in range(len(batch[INDICES])):
        L = int(batch["lengths"][b])
        extra = {key: batch[key][b, :L] for key in extra_keys}
        extra["weights"] = np.full(L, batch[WEIGHTS][b], dtype=np.float32)
        episodes.append(
            SingleAgentEpisode(
                observations=list(batch[OBS][b, : L + 1]),
                observation_space=observation_space,
                infos=list(batch["infos"][b, : L + 1]) if include_infos else None,
                actions=list(batch[ACTIONS][b, :L]),
                action_space=storage.action_space,
                rewards=list(batch[REWARDS][b, :L]),
                terminated=bool(batch[TERMINATEDS][b, L - 1]),
                truncated=bool(batch[TRUNCATEDS][b, L - 1]),
                extra_model_outputs={k: list(v) for k, v in extra.items()},
                len_lookback_buffer=0,
                t_started=int(batch[TIMESTEPS][b, 0]),
                **{name: values[b] for name, values in identities.items()},
            )
        )
    if to_numpy:
        for episode in episodes:
            episode.to_numpy()
    return episodes
