"""Keys of env `info` dicts that the package reads (no Ray, no gym imports).

Envs that split one game into several RLlib episodes (Atari with episodic
life, `rllib_ners.env.atari`) write these keys; the NERS replay buffer reads
them to compute replay rewards from whole games rather than lives.
"""

# The whole game's unclipped return, on the last step of the game.
GAME_RETURN_KEY = "game_return"
# True on an episode end that is a lost life, not the end of the game.
LIFE_LOST_KEY = "life_lost"
