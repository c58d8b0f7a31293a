"""Wan2.1 (Wan-Video/Wan2.1): the DiT and the VAE here; the UMT5 / CLIP encoders it
shares with other families, in their own modules."""
