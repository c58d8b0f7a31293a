"""The LTX VAEs' tiled decodes as the oracles of ``LTXVideoVAE.decode_tiled`` (tests/models/
ltx_video/ and tests/models/ltx2_5/ ``test_*_vae_temporal_tiling.py``): diffusers'
(``AutoencoderKLLTXVideo`` / ``AutoencoderKLLTX2Video`` with ``enable_tiling()`` and
``use_framewise_decoding``) and ltx-core's (``VideoDecoder.tiled_decode``), each around the
authors' decoders.

vidax reads the LTX VAEs in the authors' layouts (LTX-Video's ``CausalVideoAutoencoder``,
ltx-core's ``VideoDecoder``), not diffusers', so, as :func:`tests.reference.tiled_vae.
ltx2_tiled_reference` does for the spatial tiles, diffusers' own ``_decode`` -- which picks
``_temporal_tiled_decode`` and, inside it, ``tiled_decode`` -- is called unbound on a stand-in
``self`` holding diffusers' ``enable_tiling`` attributes, its own ``blend_v`` / ``blend_h`` /
``blend_t``, and the authors' decoder (taking the normalised latents: the per-channel
statistics commute with slicing in time and space) in place of diffusers' ``decoder``. The
decode timestep goes to that decoder as diffusers passes ``temb`` to its own. Test-only;
torch is imported here.
"""

from __future__ import annotations

import functools
import types

import numpy as np

from tests.parity import to_channels_last, to_ncthw


def ltx_tiled_reference(cls, decoder, latents: np.ndarray, settings, *, spatial_ratio: int,
                        temporal_ratio: int, use_tiling: bool = True, framewise: bool = True,
                        timestep: np.ndarray | None = None) -> np.ndarray:
    """``cls._decode`` (diffusers' ``AutoencoderKLLTXVideo`` or ``AutoencoderKLLTX2Video``) on
    ``latents`` (channels-last, normalised) with ``use_tiling`` / ``use_framewise_decoding``
    and the tile sizes of ``settings`` (a ``vidax.models.ltx_video.vae.TileSettings``),
    ``decoder(z_ncthw, temb)`` decoding each tile; channels-last float32."""
    import torch

    this = types.SimpleNamespace(
        spatial_compression_ratio=spatial_ratio, temporal_compression_ratio=temporal_ratio,
        use_tiling=use_tiling, use_framewise_decoding=framewise,
        tile_sample_min_height=settings.height, tile_sample_min_width=settings.width,
        tile_sample_min_num_frames=settings.frames,
        tile_sample_stride_height=settings.stride_height,
        tile_sample_stride_width=settings.stride_width,
        tile_sample_stride_num_frames=settings.stride_frames,
        decoder=lambda z, temb, causal=None: decoder(z, temb))
    for name in ("blend_v", "blend_h", "blend_t", "tiled_decode", "_temporal_tiled_decode"):
        setattr(this, name, functools.partial(getattr(cls, name), this))
    temb = None if timestep is None else torch.from_numpy(np.asarray(timestep, np.float32))
    with torch.no_grad():
        out = cls._decode(this, to_ncthw(latents), temb, return_dict=False)[0]
    return to_channels_last(out)


def ltx_core_tiled_reference(decoder, latents: np.ndarray, tiles, *, spatial_ratio: int,
                             temporal_ratio: int, timestep: np.ndarray | None = None
                             ) -> np.ndarray:
    """ltx-core 1.0.0's ``VideoDecoder.tiled_decode`` on ``latents`` (channels-last,
    normalised) with the ``TilingConfig`` of ``tiles`` (a
    ``vidax.models.ltx_video.vae.LTXCoreTiles``), its yielded chunks concatenated;
    channels-last float32. ``decoder``: ltx-core's ``VideoDecoder`` itself, or a callable
    ``decode(z_ncthw, temb)`` (LTX-Video's decoder) put in place of ``VideoDecoder.forward``
    on a stand-in ``self``. ltx-core hard-codes ``video_downscale_factors`` at 8 / 32 / 32;
    the tiny VAEs' ``temporal_ratio`` / ``spatial_ratio`` replace them."""
    import torch
    from ltx_core.model.video_vae import (SpatialTilingConfig, TemporalTilingConfig,
                                          TilingConfig, VideoDecoder)
    from ltx_core.types import SpatioTemporalScaleFactors

    config = TilingConfig(
        spatial_config=(None if tiles.pixels is None
                        else SpatialTilingConfig(tiles.pixels, tiles.overlap_pixels)),
        temporal_config=(None if tiles.frames is None
                         else TemporalTilingConfig(tiles.frames, tiles.overlap_frames)))
    factors = SpatioTemporalScaleFactors(time=temporal_ratio, width=spatial_ratio,
                                         height=spatial_ratio)
    if isinstance(decoder, VideoDecoder):
        decoder.video_downscale_factors = factors
        this = decoder
    else:
        this = types.SimpleNamespace(video_downscale_factors=factors,
                                     forward=lambda z, t, generator=None: decoder(z, t))
        for name in ("_prepare_tiles", "_group_tiles_by_temporal_slice",
                     "_accumulate_temporal_group_into_buffer"):
            setattr(this, name, functools.partial(getattr(VideoDecoder, name), this))
    temb = None if timestep is None else torch.from_numpy(np.asarray(timestep, np.float32))
    with torch.no_grad():
        chunks = list(VideoDecoder.tiled_decode(this, to_ncthw(latents), config, timestep=temb))
    return to_channels_last(torch.cat(chunks, dim=2))
