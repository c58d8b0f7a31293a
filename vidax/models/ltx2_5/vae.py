"""The LTX-2 video VAE (19B, 2.3 22B and LTX-2.5's conv VAE) as ltx-core builds it.

ltx-core's ``VideoEncoder`` / ``VideoDecoder`` (``ltx_core/model/video_vae``) are the
LTX-Video causal VAE (:mod:`vidax.models.ltx_video.vae`) under other constructor rules, so
the model is :class:`~vidax.models.ltx_video.vae.LTXVideoVAE` and this module holds only the
config: :class:`LTX2VideoVAEConfig` reads a release file's ``config["vae"]`` the way ltx-core's
``VideoEncoderConfigurator`` / ``VideoDecoderConfigurator`` do. What differs from the
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

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.models.ltx_video.vae import Block, LTXVideoVAEConfig

#: Keys ltx-core's configurators read, and the ones a release config carries that they ignore.
_READ = {"dims", "in_channels", "out_channels", "latent_channels", "encoder_blocks",
         "decoder_blocks", "patch_size", "norm_layer", "latent_log_var", "causal_decoder",
         "timestep_conditioning", "decoder_base_channels", "spatial_padding_mode"}
_IGNORED = {"_class_name", "scaling_factor", "use_quant_conv", "normalize_latent_channels"}


@dataclass(frozen=True)
class LTX2VideoVAEConfig(LTXVideoVAEConfig):
    """ltx-core's video VAE config. Defaults: the 19B (LTX-2.0) VAE, the 0.9.8 block stack
    without timestep conditioning and with a reflect-padded decoder."""

    timestep_conditioning: bool = False
    decoder_spatial_padding_mode: str | None = "reflect"
    decoder_multiplier_on_every_stage: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.encoder_base_channels != self.latent_channels:
            raise VidaxError(f"LTX-2 video VAE: ltx-core's encoder starts at latent_channels "
                             f"({self.latent_channels}) wide, not {self.encoder_base_channels}")
        if self.timestep_conditioning:
            raise VidaxError("LTX-2 video VAE config timestep_conditioning=True: no LTX-2 release "
                             "conditions its decoder on a timestep, and vidax does not port "
                             "ltx-core's conditioned decoder")

    @property
    def decoder_channels(self) -> int:
        """ltx-core's ``VideoDecoder``: ``conv_in`` is ``base_channels * 8`` wide whatever
        the block list says."""
        return self.decoder_base_channels * 8

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_19b(cls) -> LTX2VideoVAEConfig:
        """``ltx-2-19b-{dev,distilled}``: encoder 128 -> 2048 wide, three residual
        ``compress_all`` decoder stages."""
        return cls()

    @classmethod
    def ltx2_3_22b(cls) -> LTX2VideoVAEConfig:
        """``ltx-2.3-22b-*`` and LTX-2.5's ``ltx-2.5-video-vae-conv``: encoder res_x 4/6/4/2/2
        up to 1024 wide (the last ``compress_all_res`` keeps the width), a non-residual
        decoder of ``compress_space`` / ``compress_time`` / ``compress_all`` stages, zero
        padding."""
        return cls(
            encoder_blocks=(Block("res_x", 4), Block("compress_space_res", multiplier=2),
                            Block("res_x", 6), Block("compress_time_res", multiplier=2),
                            Block("res_x", 4), Block("compress_all_res", multiplier=2),
                            Block("res_x", 2), Block("compress_all_res", multiplier=1),
                            Block("res_x", 2)),
            decoder_blocks=(Block("res_x", 4), Block("compress_space", multiplier=2),
                            Block("res_x", 6), Block("compress_time", multiplier=2),
                            Block("res_x", 4), Block("compress_all", multiplier=1),
                            Block("res_x", 2), Block("compress_all", multiplier=2),
                            Block("res_x", 2)),
            decoder_spatial_padding_mode="zeros")

    @classmethod
    def tiny(cls) -> LTX2VideoVAEConfig:
        """For tests: the 19B kinds of stage at 4x temporal and 16x spatial compression."""
        return cls(
            encoder_blocks=(Block("res_x", 1), Block("compress_space_res", multiplier=2),
                            Block("res_x", 1), Block("compress_time_res", multiplier=2),
                            Block("res_x", 1), Block("compress_all_res", multiplier=2),
                            Block("res_x", 1)),
            decoder_blocks=(Block("res_x", 1), Block("compress_all", multiplier=2, residual=True),
                            Block("res_x", 1), Block("compress_all", multiplier=2, residual=True),
                            Block("res_x", 2)),
            latent_channels=8, encoder_base_channels=8, decoder_base_channels=4)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2VideoVAEConfig:
        """From a release file's ``config["vae"]``, with ltx-core's configurator defaults."""
        unknown = sorted(set(d) - _READ - _IGNORED)
        if unknown:
            raise VidaxError(f"unknown LTX-2 video VAE config keys {unknown}")
        if d.get("_class_name", "CausalVideoAutoencoder") != "CausalVideoAutoencoder":
            raise VidaxError(f"LTX-2 video VAE config _class_name {d['_class_name']!r}: vidax "
                             "reads the conv VAE (CausalVideoAutoencoder); LTX-2.5's diffusion "
                             "decoder is another model")
        for key, default, supported in (("dims", 3, 3), ("norm_layer", "pixel_norm",
                                                         "pixel_norm")):
            if d.get(key, default) != supported:
                raise VidaxError(f"LTX-2 video VAE config {key}={d[key]!r}: vidax implements "
                                 f"{key}={supported!r}")
        padding = d.get("spatial_padding_mode")
        latent_channels = d.get("latent_channels", 128)
        return cls(
            encoder_blocks=d.get("encoder_blocks", ()),
            decoder_blocks=d.get("decoder_blocks", ()),
            in_channels=d.get("in_channels", 3), out_channels=d.get("out_channels", 3),
            latent_channels=latent_channels, patch_size=d.get("patch_size", 4),
            encoder_base_channels=latent_channels,
            decoder_base_channels=d.get("decoder_base_channels", 128),
            latent_log_var=d.get("latent_log_var", "uniform"),
            causal_decoder=d.get("causal_decoder", False),
            timestep_conditioning=d.get("timestep_conditioning", True),
            spatial_padding_mode=padding or "zeros",
            decoder_spatial_padding_mode=padding or "reflect")
