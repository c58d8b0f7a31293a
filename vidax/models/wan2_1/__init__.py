"""Wan2.1 (Wan-Video/Wan2.1): the DiT and the VAE here; the UMT5 / CLIP encoders it
shares with other families, in their own modules."""

from vidax.models.wan2_1.dit import WanDiT, WanDiTConfig
from vidax.models.wan2_1.vae import WanVAE, WanVAEConfig

__all__ = ["WanDiT", "WanDiTConfig", "WanVAE", "WanVAEConfig"]
