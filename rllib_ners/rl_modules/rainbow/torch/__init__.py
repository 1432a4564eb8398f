"""Torch parts of the Rainbow RLModule."""
