"""The LTX-2 video VAE (19B, 2.3 22B and LTX-2.5's conv VAE) as ltx-core builds it.

ltx-core's ``VideoEncoder`` / ``VideoDecoder`` (``ltx_core/model/video_vae``) are the
LTX-Video causal VAE (:mod:`vidax.models.ltx_video.vae`) under other constructor rules, so
the model is :class:`~vidax.models.ltx_video.vae.LTXVideoVAE` and only the config is LTX-2's
(:class:`~vidax.models.ltx2_5.config.LTX2VideoVAEConfig`, importable from here too), which
reads a release file's ``config["vae"]`` the way ltx-core's ``VideoEncoderConfigurator`` /
``VideoDecoderConfigurator`` do. What differs from the
LTX-Video reading:

* The encoder's first width is ``latent_channels`` (128), not ``encoder_base_channels``.
* The decoder's ``conv_in`` width is always ``decoder_base_channels * 8``.
* ``compress_time`` / ``compress_space`` decoder stages narrow the width by their
  ``multiplier`` (the 2.3 stack uses this); ``residual`` still reaches ``compress_all`` only.
* ``spatial_padding_mode`` defaults to zeros for the encoder and to **reflect** for the
  decoder. The 19B config omits it (encoder zeros, decoder reflect); 2.3 / 2.5 say zeros.
* ``timestep_conditioning`` defaults to True; every LTX-2 release sets it to false, and
  vidax refuses True (ltx-core's conditioned decoder is not ported).

ltx-core's encoder returns latents already normalised by the per-channel statistics and its
decoder un-normalises first: in vidax that is ``normalize(encode(video))`` and
``decode_normalized(latents)``. The 19B file stores five statistics vectors, 2.3 / 2.5 two;
the mapper ignores the three unused ones.
"""

from vidax.models.ltx2_5.config import LTX2VideoVAEConfig

__all__ = ["LTX2VideoVAEConfig"]
