"""Shared building blocks: layers, attention, positional embeddings, causal convolutions."""

from vidax.nn.attention import attention
from vidax.nn.layers import (Conv, ConvTranspose, Embedding, KeyGen, LayerNorm, Linear, RMSNorm,
                             init_param)

__all__ = ["Conv", "ConvTranspose", "Embedding", "KeyGen", "LayerNorm", "Linear", "RMSNorm",
           "attention", "init_param"]
