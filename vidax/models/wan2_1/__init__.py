"""Wan2.1 (Wan-Video/Wan2.1): the DiT here; its VAE, and the UMT5 / CLIP encoders it
shares with other families, in their own modules."""

from vidax.models.wan2_1.dit import WanDiT, WanDiTConfig

__all__ = ["WanDiT", "WanDiTConfig"]
