"""LTX-2.x (Lightricks/LTX-2: 2.0 19B, 2.3 and 2.5 22B): the audio-video DiT (``dit``), the
video VAE (``vae``) and the text projection and connectors (``text``). Its Gemma 3 text
encoder is :mod:`vidax.models.gemma`."""
