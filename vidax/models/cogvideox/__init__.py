"""CogVideoX and CogVideoX1.5 (zai-org/CogVideo, diffusers layout): the DiT and the VAE. The
T5-v1.1-XXL text encoder is :mod:`vidax.models.t5`."""
