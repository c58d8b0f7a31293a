"""HunyuanVideo-1.5 (Tencent-Hunyuan/HunyuanVideo-1.5): the 8.3B diffusion transformer and the
VAE. Its Qwen2.5-VL text encoder is :mod:`vidax.models.reason1`; byT5 and SigLIP are not ported
yet."""

from vidax.models.hunyuan_video1_5.dit import HunyuanVideo15DiT, HunyuanVideo15DiTConfig
from vidax.models.hunyuan_video1_5.vae import HunyuanVideo15VAE, HunyuanVideo15VAEConfig

__all__ = ["HunyuanVideo15DiT", "HunyuanVideo15DiTConfig", "HunyuanVideo15VAE",
           "HunyuanVideo15VAEConfig"]
