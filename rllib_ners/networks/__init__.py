"""Torch networks shared by the RLModules and the NERS scorer (no Ray)."""

from rllib_ners.networks.conv_stack import CNN_LAYERS, ConvStack, cnn_output_hw

__all__ = ["CNN_LAYERS", "ConvStack", "cnn_output_hw"]
