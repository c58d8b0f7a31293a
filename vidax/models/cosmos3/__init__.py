"""Cosmos3 (Nano, Edge): the video path of the omni DiT (``dit``). Its VAE is the Wan2.2
VAE (:mod:`vidax.models.wan2_2.vae`)."""
