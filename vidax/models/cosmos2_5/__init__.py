"""Cosmos-Predict2.5 (nvidia-cosmos/cosmos-predict2.5): the DiT (``dit``). Its VAE is the
Wan2.1 VAE (:mod:`vidax.models.wan2_1.vae`), its text encoder Reason1
(:mod:`vidax.models.reason1`)."""
