"""LTX-Video 0.9.x (Lightricks/LTX-Video): the DiT, the causal video VAE and the latent
upsampler. The T5-v1.1-XXL text encoder is :mod:`vidax.models.t5`."""
