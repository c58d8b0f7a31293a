"""HunyuanVideo 1.0 (Tencent-Hunyuan/HunyuanVideo): the DiT and the causal 3D VAE. Its text
encoders (LLaVA-Llama-3-8B, CLIP-L's text tower) are not ported yet."""

from vidax.models.hunyuan_video.dit import HunyuanVideoDiT, HunyuanVideoDiTConfig
from vidax.models.hunyuan_video.vae import HunyuanVideoVAE, HunyuanVideoVAEConfig

__all__ = ["HunyuanVideoDiT", "HunyuanVideoDiTConfig", "HunyuanVideoVAE", "HunyuanVideoVAEConfig"]
