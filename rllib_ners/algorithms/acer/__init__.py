"""ACER (actor-critic with experience replay) with uniform, prioritised or NERS
replay. See `acer.py`."""

from rllib_ners.algorithms.acer.acer import ACER, ACERConfig

__all__ = ["ACER", "ACERConfig"]
