"""LTX-Video 0.9.x (Lightricks/LTX-Video): the DiT, the causal video VAE and the latent
upsampler. The T5-v1.1-XXL text encoder is :mod:`vidax.models.t5`."""

from vidax.models.ltx_video.dit import LTXVideoDiT, LTXVideoDiTConfig
from vidax.models.ltx_video.upsampler import LTXVideoLatentUpsampler, LTXVideoUpsamplerConfig
from vidax.models.ltx_video.vae import LTXVideoVAE, LTXVideoVAEConfig

__all__ = ["LTXVideoDiT", "LTXVideoDiTConfig", "LTXVideoLatentUpsampler",
           "LTXVideoUpsamplerConfig", "LTXVideoVAE", "LTXVideoVAEConfig"]
