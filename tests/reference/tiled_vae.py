"""diffusers' VAEs decoding in spatial tiles (``enable_tiling``), as the oracles of vidax's
tiled decodes (tests/models/*/test_*_vae_tiling.py).

Each builder makes diffusers' VAE at a tiny config with random values in every tensor
(:func:`tests.parity.randomize`), writes it with ``save_pretrained``, decodes the drawn latents
with tiling on at the given tile sizes and with tiling off, and returns both decodes
(channels-last) beside vidax's model of the saved file. Test-only; torch is imported here.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

import vidax
from tests.parity import draw_inputs, randomize, to_channels_last, to_ncthw

#: version -> (vidax tiny config factory, AutoencoderKLWan kwargs, spatial stride, patch)
WAN_VAES = {
    "wan2_1": ("vidax.models.wan2_1.vae:WanVAEConfig", {"base_dim": 8, "z_dim": 4}, 8, 1),
    "wan2_2": ("vidax.models.wan2_2.vae:Wan22VAEConfig",
               {"base_dim": 8, "decoder_base_dim": 12, "z_dim": 4, "is_residual": True,
                "in_channels": 12, "out_channels": 12, "patch_size": 2,
                "scale_factor_spatial": 16}, 16, 2),
}


@contextlib.contextmanager
def unclamped(module):
    """``module.torch.clamp`` as the identity (diffusers' Wan decode clamps its result; the
    comparison wants the numbers before that)."""
    import torch

    original = torch.clamp
    module.torch.clamp = lambda x, min=None, max=None: x
    try:
        yield
    finally:
        module.torch.clamp = original


def _decodes(ref, z: np.ndarray, tiling: dict, module=None) -> tuple[np.ndarray, np.ndarray]:
    """(tiled, untiled) decodes of ``z`` by ``ref``, channels-last."""
    import torch

    with torch.no_grad(), (unclamped(module) if module is not None
                           else contextlib.nullcontext()):
        ref.disable_tiling()
        untiled = to_channels_last(ref.decode(to_ncthw(z)).sample)
        ref.enable_tiling(**tiling)
        tiled = to_channels_last(ref.decode(to_ncthw(z)).sample)
        ref.disable_tiling()
    return tiled, untiled


def wan_case(version: str, folder: Path, latent_shape: tuple, settings) -> dict:
    """diffusers' ``AutoencoderKLWan`` (Wan2.1 or Wan2.2 tiny) tiled at ``settings`` (a
    ``vidax.models.wan2_1.vae.TileSettings``) over latents of ``latent_shape`` ``(B, T, h,
    w)``: ``model`` (vidax, from the saved file), ``config``, ``stride``, ``patch``, ``z``,
    ``tiled`` and ``untiled`` (unclamped)."""
    import importlib

    import torch
    from diffusers import AutoencoderKLWan
    from diffusers.models.autoencoders import autoencoder_kl_wan

    config_path, kwargs, stride, patch = WAN_VAES[version]
    module, _, name = config_path.partition(":")
    cfg = getattr(importlib.import_module(module), name).tiny()
    torch.manual_seed(0)
    ref = AutoencoderKLWan(latents_mean=list(cfg.latents_mean),
                           latents_std=list(cfg.latents_std), **kwargs).eval()
    randomize(ref.named_parameters(), seed=0)
    ref.save_pretrained(folder)
    _, zs = draw_inputs(1, {}, {"z": (*latent_shape, cfg.z_dim)})
    tiled, untiled = _decodes(ref, zs["z"], {
        "tile_sample_min_height": settings.height, "tile_sample_min_width": settings.width,
        "tile_sample_stride_height": settings.stride_height,
        "tile_sample_stride_width": settings.stride_width}, autoencoder_kl_wan)
    model = vidax.load(version, "vae", folder / "diffusion_pytorch_model.safetensors",
                       config=cfg, layout="diffusers")
    return {"version": version, "config": cfg, "stride": stride, "patch": patch,
            "settings": settings, "model": model, "z": zs["z"], "tiled": tiled,
            "untiled": untiled}


def cogvideox_case(folder: Path, latent_shape: tuple, settings) -> dict:
    """diffusers' ``AutoencoderKLCogVideoX`` (the tiny config) tiled at ``settings`` (a
    ``vidax.models.cogvideox.vae.TileSettings``) over latents of ``latent_shape`` ``(B, T, h,
    w)``: ``model`` (vidax), ``config``, ``z``, ``tiled`` and ``untiled`` (diffusers'
    ``decode`` does not clamp)."""
    import torch
    from diffusers import AutoencoderKLCogVideoX

    from vidax.models.cogvideox.vae import CogVideoXVAEConfig

    cfg = CogVideoXVAEConfig.tiny()
    torch.manual_seed(0)
    ref = AutoencoderKLCogVideoX(block_out_channels=cfg.block_out_channels,
                                 latent_channels=cfg.latent_channels,
                                 norm_num_groups=cfg.norm_num_groups).eval()
    randomize(sorted(ref.named_parameters()), seed=0)
    ref.save_pretrained(folder)
    _, zs = draw_inputs(1, {}, {"z": (*latent_shape, cfg.latent_channels)})
    tiled, untiled = _decodes(ref, zs["z"], {
        "tile_sample_min_height": settings.height, "tile_sample_min_width": settings.width,
        "tile_overlap_factor_height": settings.overlap_height,
        "tile_overlap_factor_width": settings.overlap_width})
    model = vidax.load("cogvideox", "vae", folder / "diffusion_pytorch_model.safetensors",
                       config=cfg)
    return {"config": cfg, "settings": settings, "model": model, "z": zs["z"],
            "tiled": tiled, "untiled": untiled}


def ltx2_tiled_reference(decoder, latents: np.ndarray, settings, ratio: int) -> np.ndarray:
    """diffusers' ``AutoencoderKLLTX2Video.tiled_decode`` -- its own code, unbound, with its
    own ``blend_v`` / ``blend_h`` -- around ``decoder`` (ltx-core's ``VideoDecoder``, which
    takes the normalised latents: the per-channel statistics commute with spatial slicing)
    in place of diffusers' decoder, at ``settings`` (a
    ``vidax.models.ltx_video.vae.TileSettings``); channels-last."""
    import types

    import torch
    from diffusers import AutoencoderKLLTX2Video

    cls = AutoencoderKLLTX2Video
    this = types.SimpleNamespace(
        spatial_compression_ratio=ratio,
        tile_sample_min_height=settings.height, tile_sample_min_width=settings.width,
        tile_sample_stride_height=settings.stride_height,
        tile_sample_stride_width=settings.stride_width,
        decoder=lambda z, temb, causal=None: decoder(z))
    this.blend_v = lambda a, b, extent: cls.blend_v(this, a, b, extent)
    this.blend_h = lambda a, b, extent: cls.blend_h(this, a, b, extent)
    with torch.no_grad():
        out = cls.tiled_decode(this, to_ncthw(latents), None, return_dict=False)[0]
    return to_channels_last(out)
