"""Short seed-matched study runs for "results did not change" checks of a
refactor: CartPole (the DQN family) and Pendulum with SAC and with TD3, a few
thousand env steps each. Run the same command on the commit before and after;
the CSVs must be equal but for their timing columns:

    rllib-ners study run --declarations tools/seed_matched_tasks.py \
        --tasks check_cartpole check_pendulum_sac check_pendulum_td3 \
        --arms uniform per ners lap --seeds 100 --results-dir /tmp/before

`tools/fingerprint.py` hashes seeded NERS-DQN and ACER runs the same way.
"""

from rllib_ners.study import Task, agents

_PENDULUM = {
    "env": "Pendulum-v1",
    "budget": 5_000,
    "eval_every": 2_500,
    "eval_episodes": 3,
    "eval_max_steps": 200,
    "log_every": 500,
    "random_return": -1255.5,
    "max_return": -150.0,
    "anchor_note": "as the pendulum task",
    "capacity": 100_000,
}

TASKS = [
    Task(
        name="check_cartpole",
        env="CartPole-v1",
        budget=6_000,
        eval_every=3_000,
        eval_episodes=3,
        eval_max_steps=500,
        log_every=500,
        random_return=22.2,
        max_return=500.0,
        anchor_note="as the cartpole task",
        agent=agents.classic_control_agent,
        capacity=50_000,
    ),
    Task(
        name="check_pendulum_sac",
        agent=agents.sac_agent(
            hiddens=(64, 64), lr=1e-3, learning_starts=1000, rollout=4
        ),
        algo="sac",
        **_PENDULUM,
    ),
    Task(
        name="check_pendulum_td3",
        agent=agents.td3_agent(
            hiddens=(64, 64), lr=1e-3, learning_starts=1000, rollout=4
        ),
        algo="td3",
        **_PENDULUM,
    ),
]
