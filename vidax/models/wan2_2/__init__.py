"""Wan2.2 (Wan-Video/Wan2.2): the 48-channel VAE of TI2V-5B here. The A14B experts are the
Wan2.1 DiT architecture (:mod:`vidax.models.wan2_1`), and so is TI2V-5B's DiT up to its
per-token timesteps; A14B uses the Wan2.1 VAE."""
