"""Seeded two-agent CartPole episodes for the multi-agent buffer tests.

A module of its own, not in `conftest.py`: `tests/learning/conftest.py` is also
imported as `conftest`, so `from conftest import ...` depends on collection order.
"""

from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole


def to_module(agent_id, episode=None):
    """Agent i of MultiAgentCartPole -> module \"p{i}\"."""
    return f"p{agent_id}"


def collect_multi_agent_cartpole(num_env_steps, *, seed=0, cut_every=None):
    """Random-action MultiAgentCartPole episodes; with `cut_every`, cut into
    chunks as EnvRunners send them."""
    env = MultiAgentCartPole({"num_agents": 2})
    for i, agent_id in enumerate(env.possible_agents):
        env.get_action_space(agent_id).seed(seed + i)
    chunks = []
    episode = MultiAgentEpisode(agent_to_module_mapping_fn=to_module)
    obs, infos = env.reset(seed=seed)
    episode.add_env_reset(observations=obs, infos=infos)
    for step in range(1, num_env_steps + 1):
        if episode.is_done:
            chunks.append(episode.to_numpy())
            episode = MultiAgentEpisode(agent_to_module_mapping_fn=to_module)
            obs, infos = env.reset()
            episode.add_env_reset(observations=obs, infos=infos)
        actions = {
            agent_id: env.get_action_space(agent_id).sample()
            for agent_id in episode.get_agents_to_act()
        }
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        episode.add_env_step(
            obs, actions, rewards, infos, terminateds=terminateds, truncateds=truncateds
        )
        if cut_every and step % cut_every == 0 and not episode.is_done:
            successor = episode.cut()
            chunks.append(episode.to_numpy())
            episode = successor
    chunks.append(episode.to_numpy())
    return chunks
