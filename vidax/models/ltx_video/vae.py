"""The LTX-Video causal video VAE, after the authors' ``CausalVideoAutoencoder``.

Mirrors Lightricks/LTX-Video ``ltx_video/models/autoencoders/causal_video_autoencoder.py``
(``Encoder``, ``Decoder``, ``UNetMidBlock3D``, ``ResnetBlock3D``, ``SpaceToDepthDownsample``,
``DepthToSpaceUpsample``, ``causal_conv3d.CausalConv3d``, ``pixel_norm.PixelNorm``) for the
0.9.5 - 0.9.8 block stacks: pixel norm, ``res_x`` groups, the ``compress_*_res``
space-to-depth encoder stages, depth-to-space decoder stages, the timestep-conditioned decoder,
one shared latent log-variance. Module names are the authors' (``encoder.down_blocks.N`` /
``decoder.up_blocks.N`` index the config's block lists, the decoder's reversed; every conv is
``<name>.conv``), so the mapper only renames the latent statistics.

Layout: channels-last. Video ``[B, F, H, W, 3]`` in [-1, 1] with ``F = 1 + 8k`` and ``H, W``
multiples of 32 <-> latents ``[B, 1 + k, H/32, W/32, 128]``.

The computation, as the authors' code does it:

* Patchify ``b c f (h q) (w r) -> b (c r q) f h w`` (q = r = 4): the channel index is
  ``c * 16 + r * 4 + q``, the *width* offset before the height offset.
* Convs are 3x3x3 with spatial padding 1 (``spatial_padding_mode``, zeros in 0.9.8) and time
  padding by repeated edge frames: causal (the encoder, always) 2 copies of the first frame
  in front; non-causal (the 0.9.8 decoder) one copy of the first frame in front and one of
  the last behind.
* ``PixelNorm``: ``x / sqrt(mean_c(x^2) + 1e-8)``. Resnet: norm1, SiLU, conv1, norm2, SiLU,
  conv2, plus the input; the conditioned decoder modulates after each norm with
  ``scale_shift_table [4, C]`` + the group's ``time_embedder`` (4C) as
  (shift1, scale1, shift2, scale2).
* Encoder ``compress_*_res``: for a time stride the first frame is duplicated; the output is
  space-to-depth(conv(x)) (conv to C_out / prod(stride) channels) plus space-to-depth(x)
  averaged over groups of channels. ``conv_out`` gives 128 means + 1 log-variance shared by
  every channel (``latent_log_var="uniform"``).
* Decoder ``compress_all`` (and ``compress_time`` / ``compress_space``): conv to
  prod(stride) x C / multiplier channels, depth-to-space, with ``residual`` the input
  depth-to-spaced and tiled over channels added; after a time stride the first frame is
  dropped. The decoder's timestep is ``t * timestep_scale_multiplier`` (a learned scalar);
  the final PixelNorm is modulated by ``last_scale_shift_table [2, C]`` + ``last_time_embedder``
  (2C) as (shift, scale).
* Latents are normalised per channel with the file's statistics:
  ``(z - mean-of-means) / std-of-means`` (``vae_per_channel_normalize=True``, what every 0.9.x
  pipeline uses). The three other statistics vectors in the file are not used by the authors.

Decode noise: the authors' pipeline mixes fresh noise into the normalised latents before
decoding, ``z <- (1 - s) z + s * noise`` with ``s = decode_noise_scale`` (default: the decode
timestep). :meth:`LTXVideoVAE.decode_normalized` takes that noise as an argument, so runs
are reproducible and comparable.

Precision: the computation runs in the input's dtype (float32 by default); the parameters
are cast at use. Normalisation statistics in float32.

Spatial tiles (:meth:`LTXVideoVAE.decode_tiled`, a host loop; :meth:`~LTXVideoVAE.decode`
stays one traced computation): diffusers' ``tiled_decode`` of ``AutoencoderKLLTX2Video``
(``autoencoder_kl_ltx2.py``; ``AutoencoderKLLTXVideo``'s is the same): where the latent is
larger than one tile, latent tiles of ``tile_sample_min // 32`` starting every
``tile_sample_stride // 32`` (512 px every 448: 16 every 14), each decoded over every frame;
on the host each tile's first ``size - stride`` rows / columns cross-fade from its already
blended upper / left neighbour (``blend_v`` / ``blend_h``), ``stride`` of them kept.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.hunyuan_video.config import SpatialTiles, TileGeometry
from vidax.models.hunyuan_video.vae import counted, spatially_tiled
from vidax.models.ltx_video.config import (
    DECODER_STRIDES, ENCODER_STRIDES, PADDING_MODES, LTXVideoVAEConfig, TileSettings)
from vidax.models.ltx_video.dit import CombinedTimestepEmbedding
from vidax.nn.layers import Conv, KeyGen, init_param

_F32 = jnp.float32
PIXEL_NORM_EPS = 1e-8


# ---------------------------------------------------------------------------- functions
def pixel_norm(x: jax.Array) -> jax.Array:
    """The authors' ``PixelNorm``: ``x / sqrt(mean_c(x^2) + 1e-8)``."""
    return x / jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + PIXEL_NORM_EPS)


def patchify(x: jax.Array, p: int) -> jax.Array:
    """``[B, F, H*p, W*p, C] -> [B, F, H, W, C*p*p]``, channel ``c*p*p + r*p + q`` for height
    offset q and width offset r (the authors' ``b c f (h q) (w r) -> b (c r q) f h w``)."""
    b, f, h, w, c = x.shape
    x = x.reshape(b, f, h // p, p, w // p, p, c)               # b f h q w r c
    return x.transpose(0, 1, 2, 4, 6, 5, 3).reshape(b, f, h // p, w // p, c * p * p)


def unpatchify(x: jax.Array, p: int) -> jax.Array:
    """The inverse of :func:`patchify`."""
    b, f, h, w, cpp = x.shape
    x = x.reshape(b, f, h, w, cpp // (p * p), p, p)            # b f h w c r q
    return x.transpose(0, 1, 2, 6, 3, 5, 4).reshape(b, f, h * p, w * p, cpp // (p * p))


def space_to_depth(x: jax.Array, stride) -> jax.Array:
    """``b (d p1) (h p2) (w p3) c -> b d h w (c p1 p2 p3)`` (the authors' rearrange, channels
    last)."""
    b, d, h, w, c = x.shape
    s1, s2, s3 = stride
    x = x.reshape(b, d // s1, s1, h // s2, s2, w // s3, s3, c)
    return x.transpose(0, 1, 3, 5, 7, 2, 4, 6).reshape(b, d // s1, h // s2, w // s3,
                                                       c * s1 * s2 * s3)


def depth_to_space(x: jax.Array, stride) -> jax.Array:
    """``b d h w (c p1 p2 p3) -> b (d p1) (h p2) (w p3) c``: the authors' ``PixelShuffleND``."""
    b, d, h, w, cs = x.shape
    s1, s2, s3 = stride
    c = cs // (s1 * s2 * s3)
    x = x.reshape(b, d, h, w, c, s1, s2, s3)
    return x.transpose(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, d * s1, h * s2, w * s3, c)


def _modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """``x * (1 + scale) + shift`` with per-sample ``[B, C]`` values over ``[B, F, H, W, C]``."""
    return x * (1 + scale[:, None, None, None]) + shift[:, None, None, None]


# ---------------------------------------------------------------------------- modules
class CausalConv3d(nnx.Module):
    """The authors' ``CausalConv3d``: a 3x3x3 conv (``conv``) over channels-last video with
    spatial padding 1 in ``padding_mode`` and time padding by repeated edge frames."""

    def __init__(self, in_channels: int, out_channels: int, *, padding_mode: str, keys: KeyGen,
                 param_dtype):
        self.pad_mode = PADDING_MODES[padding_mode]
        spatial = (1, 1) if self.pad_mode == "constant" else (0, 0)
        self.conv = Conv(in_channels, out_channels, (3, 3, 3), keys=keys,
                         padding=((0, 0), spatial, spatial), param_dtype=param_dtype)

    def __call__(self, x: jax.Array, causal: bool = True) -> jax.Array:
        first = x[:, :1]
        if causal:
            x = jnp.concatenate([first, first, x], axis=1)
        else:
            x = jnp.concatenate([first, x, x[:, -1:]], axis=1)
        if self.pad_mode != "constant":
            x = jnp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)), mode=self.pad_mode)
        return self.conv(x)


class ResnetBlock3D(nnx.Module):
    """The authors' ``ResnetBlock3D`` with pixel norm and equal in/out channels (``res_x``)."""

    def __init__(self, channels: int, *, timestep_conditioning: bool, padding_mode: str,
                 keys: KeyGen, param_dtype):
        kw = dict(padding_mode=padding_mode, keys=keys, param_dtype=param_dtype)
        self.conv1 = CausalConv3d(channels, channels, **kw)
        self.conv2 = CausalConv3d(channels, channels, **kw)
        self.scale_shift_table = (init_param(keys, (4, channels), std=channels ** -0.5,
                                             dtype=param_dtype)
                                  if timestep_conditioning else None)

    def __call__(self, x: jax.Array, causal: bool, temb: jax.Array | None) -> jax.Array:
        """``temb [B, 4C]``: the group's time embedding (conditioned decoder only)."""
        h = pixel_norm(x)
        if self.scale_shift_table is not None:
            ada = self.scale_shift_table[...].astype(x.dtype) + temb.reshape(x.shape[0], 4, -1)
            h = _modulate(h, ada[:, 0], ada[:, 1])
        h = self.conv1(jax.nn.silu(h), causal)
        h = pixel_norm(h)
        if self.scale_shift_table is not None:
            h = _modulate(h, ada[:, 2], ada[:, 3])
        h = self.conv2(jax.nn.silu(h), causal)
        return x + h


class UNetMidBlock3D(nnx.Module):
    """The authors' ``UNetMidBlock3D`` (a ``res_x`` group): resnets sharing one
    ``time_embedder`` (4C) when timestep-conditioned."""

    def __init__(self, channels: int, num_layers: int, *, timestep_conditioning: bool,
                 padding_mode: str, keys: KeyGen, param_dtype):
        self.time_embedder = (CombinedTimestepEmbedding(4 * channels, keys=keys,
                                                        param_dtype=param_dtype)
                              if timestep_conditioning else None)
        self.res_blocks = nnx.List([
            ResnetBlock3D(channels, timestep_conditioning=timestep_conditioning,
                          padding_mode=padding_mode, keys=keys, param_dtype=param_dtype)
            for _ in range(num_layers)])

    def __call__(self, x: jax.Array, causal: bool = True,
                 timestep: jax.Array | None = None) -> jax.Array:
        temb = None if self.time_embedder is None else self.time_embedder(timestep, x.dtype)
        for block in self.res_blocks:
            x = block(x, causal, temb)
        return x


class SpaceToDepthDownsample(nnx.Module):
    """The authors' ``SpaceToDepthDownsample`` (``compress_*_res`` encoder stages)."""

    def __init__(self, in_channels: int, out_channels: int, stride, *, padding_mode: str,
                 keys: KeyGen, param_dtype):
        self.stride = tuple(stride)
        self.group_size = in_channels * math.prod(stride) // out_channels
        self.conv = CausalConv3d(in_channels, out_channels // math.prod(stride),
                                 padding_mode=padding_mode, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array, causal: bool = True) -> jax.Array:
        if self.stride[0] == 2:   # the first frame is encoded alone
            x = jnp.concatenate([x[:, :1], x], axis=1)
        skip = space_to_depth(x, self.stride)
        skip = skip.reshape(*skip.shape[:-1], -1, self.group_size).mean(-1)
        return space_to_depth(self.conv(x, causal), self.stride) + skip


class DepthToSpaceUpsample(nnx.Module):
    """The authors' ``DepthToSpaceUpsample`` (``compress_*`` decoder stages)."""

    def __init__(self, in_channels: int, stride, *, residual: bool, reduction: int,
                 padding_mode: str, keys: KeyGen, param_dtype):
        self.stride, self.residual, self.reduction = tuple(stride), residual, reduction
        self.conv = CausalConv3d(in_channels, math.prod(stride) * in_channels // reduction,
                                 padding_mode=padding_mode, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array, causal: bool = True) -> jax.Array:
        out = depth_to_space(self.conv(x, causal), self.stride)
        if self.residual:
            skip = depth_to_space(x, self.stride)
            skip = jnp.tile(skip, (1, 1, 1, 1, math.prod(self.stride) // self.reduction))
            out = out + skip
        return out[:, 1:] if self.stride[0] == 2 else out


class Encoder(nnx.Module):
    """The authors' ``Encoder``: patchify, ``conv_in``, ``down_blocks``, norm, SiLU,
    ``conv_out``."""

    def __init__(self, cfg: LTXVideoVAEConfig, *, keys: KeyGen, param_dtype):
        kw = dict(padding_mode=cfg.spatial_padding_mode, keys=keys, param_dtype=param_dtype)
        self.patch_size = cfg.patch_size
        channels = cfg.encoder_base_channels
        self.conv_in = CausalConv3d(cfg.in_channels * cfg.patch_size ** 2, channels, **kw)
        blocks = []
        for b in cfg.encoder_blocks:
            if b.name == "res_x":
                blocks.append(UNetMidBlock3D(channels, b.num_layers, timestep_conditioning=False,
                                             **kw))
            else:
                out = channels * (2 if b.multiplier is None else b.multiplier)
                blocks.append(SpaceToDepthDownsample(channels, out, ENCODER_STRIDES[b.name], **kw))
                channels = out
        self.down_blocks = nnx.List(blocks)
        extra = 1 if cfg.latent_log_var == "uniform" else cfg.latent_channels
        self.conv_out = CausalConv3d(channels, cfg.latent_channels + extra, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv_in(patchify(x, self.patch_size))
        for block in self.down_blocks:
            x = block(x)
        return self.conv_out(jax.nn.silu(pixel_norm(x)))


class Decoder(nnx.Module):
    """The authors' ``Decoder``, with their timestep conditioning."""

    def __init__(self, cfg: LTXVideoVAEConfig, *, keys: KeyGen, param_dtype):
        kw = dict(padding_mode=cfg.decoder_padding_mode, keys=keys, param_dtype=param_dtype)
        self.patch_size, self.causal = cfg.patch_size, cfg.causal_decoder
        channels = cfg.decoder_channels
        self.conv_in = CausalConv3d(cfg.latent_channels, channels, **kw)
        blocks = []
        for b in reversed(cfg.decoder_blocks):
            if b.name == "res_x":
                blocks.append(UNetMidBlock3D(channels, b.num_layers,
                                             timestep_conditioning=cfg.timestep_conditioning,
                                             **kw))
            else:
                # The LTX-Video code passes the multiplier to compress_all only, ltx-core to
                # every stage; the residual flag reaches compress_all only in both.
                narrows = b.name == "compress_all" or cfg.decoder_multiplier_on_every_stage
                reduction = (b.multiplier or 1) if narrows else 1
                residual = b.residual if b.name == "compress_all" else False
                blocks.append(DepthToSpaceUpsample(channels, DECODER_STRIDES[b.name],
                                                   residual=residual, reduction=reduction, **kw))
                channels //= reduction
        self.up_blocks = nnx.List(blocks)
        self.conv_out = CausalConv3d(channels, cfg.out_channels * cfg.patch_size ** 2, **kw)
        if cfg.timestep_conditioning:
            self.timestep_scale_multiplier = nnx.Param(jnp.asarray(1000.0, param_dtype))
            self.last_time_embedder = CombinedTimestepEmbedding(2 * channels, keys=keys,
                                                                param_dtype=param_dtype)
            self.last_scale_shift_table = init_param(keys, (2, channels), std=channels ** -0.5,
                                                     dtype=param_dtype)
        else:
            self.timestep_scale_multiplier = None

    def __call__(self, z: jax.Array, timestep: jax.Array | None = None) -> jax.Array:
        conditioned = self.timestep_scale_multiplier is not None
        x = self.conv_in(z, self.causal)
        if conditioned:
            t = timestep.astype(x.dtype) * self.timestep_scale_multiplier[...].astype(x.dtype)
        for block in self.up_blocks:
            if isinstance(block, UNetMidBlock3D):
                x = block(x, self.causal, t if conditioned else None)
            else:
                x = block(x, self.causal)
        x = pixel_norm(x)
        if conditioned:
            emb = self.last_time_embedder(t, x.dtype).reshape(x.shape[0], 2, -1)
            ada = self.last_scale_shift_table[...].astype(x.dtype) + emb
            x = _modulate(x, ada[:, 0], ada[:, 1])
        return unpatchify(self.conv_out(jax.nn.silu(x), self.causal), self.patch_size)


class PerChannelStatistics(nnx.Module):
    """The file's latent statistics that the authors use (``per_channel_statistics.*``)."""

    def __init__(self, channels: int, param_dtype):
        self.mean_of_means = nnx.Param(jnp.zeros((channels,), param_dtype))
        self.std_of_means = nnx.Param(jnp.ones((channels,), param_dtype))


class LTXVideoVAE(nnx.Module):
    """The LTX-Video causal video VAE (``CausalVideoAutoencoder``), channels-last."""

    def __init__(self, config: LTXVideoVAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        self.config = config
        self.encoder = Encoder(config, keys=keys, param_dtype=param_dtype)
        self.decoder = Decoder(config, keys=keys, param_dtype=param_dtype)
        self.per_channel_statistics = PerChannelStatistics(config.latent_channels, param_dtype)

    # ------------------------------------------------------------------ encode
    def encode_moments(self, video: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Latent means ``[B, F', H', W', C]`` and log-variances (``[..., 1]`` shared by every
        channel for ``latent_log_var="uniform"``, else ``[..., C]``), un-normalised."""
        cfg = self.config
        video = jnp.asarray(video)
        b, f, h, w, c = video.shape
        ts, ss = cfg.temporal_downscale_factor, cfg.spatial_downscale_factor
        if c != cfg.in_channels or (f - 1) % ts or h % ss or w % ss:
            raise VidaxError(
                f"LTX-Video VAE input {tuple(video.shape)} must be [B, F, H, W, {cfg.in_channels}]"
                f" with F = 1 + {ts}k frames and H, W multiples of {ss}")
        moments = self.encoder(video)
        return moments[..., :cfg.latent_channels], moments[..., cfg.latent_channels:]

    def encode(self, video: jax.Array, noise: jax.Array | None = None) -> jax.Array:
        """Un-normalised latents of ``video [B, F, H, W, 3]`` in [-1, 1]: the posterior's mean,
        or with ``noise`` (``[B, F', H', W', C]``, standard normal) a sample
        ``mean + exp(logvar / 2) * noise`` as the authors' ``vae_encode`` draws it
        (``DiagonalGaussianDistribution``: log-variance clipped to [-30, 20])."""
        mean, logvar = self.encode_moments(video)
        if noise is None:
            return mean
        std = jnp.exp(0.5 * jnp.clip(logvar, -30.0, 20.0))
        return mean + std * jnp.asarray(noise, mean.dtype)

    # ------------------------------------------------------------------ decode
    def decode(self, z: jax.Array, timestep: jax.Array | None = None) -> jax.Array:
        """Video ``[B, 1 + 8(F'-1), 32 H', 32 W', 3]`` from un-normalised latents
        ``[B, F', H', W', C]``; ``timestep`` ``[B]`` or a scalar (the decode timestep, 0.05 in
        the 0.9.8 configs) for a timestep-conditioned decoder."""
        cfg = self.config
        z = jnp.asarray(z)
        if z.ndim != 5 or z.shape[-1] != cfg.latent_channels:
            raise VidaxError(f"LTX-Video VAE latents must be [B, F, H, W, "
                             f"{cfg.latent_channels}], got {tuple(z.shape)}")
        if cfg.timestep_conditioning:
            if timestep is None:
                raise VidaxError("this LTX-Video VAE decoder is timestep-conditioned: pass the "
                                 "decode timestep")
            timestep = jnp.broadcast_to(jnp.asarray(timestep, _F32).reshape(-1), (z.shape[0],))
        elif timestep is not None:
            raise VidaxError("this LTX-Video VAE decoder takes no timestep")
        return self.decoder(z, timestep)

    def decode_normalized(self, latents: jax.Array, timestep: jax.Array | None = None, *,
                          noise: jax.Array | None = None,
                          noise_scale: jax.Array | None = None) -> jax.Array:
        """The authors' pipeline decode: ``latents`` normalised per channel (what the DiT
        produces); with ``noise`` (same shape, standard normal) first
        ``(1 - s) latents + s noise`` with ``s = noise_scale`` per sample (default: the
        timestep); then :meth:`denormalize` and :meth:`decode`."""
        latents = jnp.asarray(latents)
        if noise is not None:
            s = timestep if noise_scale is None else noise_scale
            if s is None:
                raise VidaxError("decode noise needs a noise_scale or a timestep")
            s = jnp.broadcast_to(jnp.asarray(s, latents.dtype).reshape(-1), (latents.shape[0],))
            s = s[:, None, None, None, None]
            latents = latents * (1 - s) + jnp.asarray(noise, latents.dtype) * s
        return self.decode(self.denormalize(latents), timestep)

    def decode_tiled(self, latents, tiled: bool | TileSettings = True, *,
                     normalized: bool = True, timestep=None, on_chunk=None) -> np.ndarray:
        """:meth:`decode_normalized` (``normalized=False``: :meth:`decode`) in spatial tiles,
        as diffusers' ``tiled_decode`` (the module docstring): ``True`` for its
        ``enable_tiling()`` defaults (512 px every 448), or a :class:`TileSettings`; a latent
        of at most one tile decodes in one pass. One jitted program per tile shape, every
        tile's video on the host as it is made, blended there; ``on_chunk(done, total)``
        after each pass (:func:`tile_geometry` counts them). Returns numpy float32,
        unclamped. Decode noise is not mixed in here (:meth:`decode_normalized` does it)."""
        cfg = self.config
        z = jnp.asarray(latents, _F32)
        if z.ndim != 5 or z.shape[-1] != cfg.latent_channels:
            raise VidaxError(f"LTX-Video VAE latents must be [B, F, H, W, "
                             f"{cfg.latent_channels}], got {tuple(z.shape)}")
        if normalized:
            z = self.denormalize(z)
        ratio = cfg.spatial_downscale_factor
        spatial = _spatial_tiles(tiled, ratio)
        graphdef, state = nnx.split(self)
        applies = spatial is not None and spatial.applies(*z.shape[2:4])
        run = counted(lambda tile: np.asarray(_decode(graphdef, state, tile, timestep)),
                      len(spatial.grid(*z.shape[2:4])) if applies else 1, on_chunk)
        return spatially_tiled(run, z, spatial, ratio) if applies else run(z)

    # ------------------------------------------------------------------ statistics
    def normalize(self, z: jax.Array) -> jax.Array:
        """``(z - mean-of-means) / std-of-means`` per channel (the authors' ``normalize_latents``
        with ``vae_per_channel_normalize=True``)."""
        stats = self.per_channel_statistics
        return ((z - stats.mean_of_means[...].astype(z.dtype))
                / stats.std_of_means[...].astype(z.dtype))

    def denormalize(self, z: jax.Array) -> jax.Array:
        """The inverse of :meth:`normalize` (the authors' ``un_normalize_latents``)."""
        stats = self.per_channel_statistics
        return (z * stats.std_of_means[...].astype(z.dtype)
                + stats.mean_of_means[...].astype(z.dtype))


# ----------------------------------------------------------------------------- spatial tiles
def _spatial_tiles(tiled, ratio: int) -> SpatialTiles | None:
    if tiled is False or tiled is None:
        return None
    if tiled is True:
        tiled = TileSettings()
    if not isinstance(tiled, TileSettings):
        raise VidaxError(f"LTX VAE decode_tiled: tiled must be a bool or a "
                         f"vidax.models.ltx_video.vae.TileSettings, got {tiled!r}")
    return tiled.spatial(ratio)


def tile_geometry(latent_shape, *, tiled=True, config) -> TileGeometry:
    """The decoder passes :meth:`LTXVideoVAE.decode_tiled` makes on latents ``(T, h, w[, C])``
    (for memory estimates): one per spatial tile, each over every frame, where the latent is
    larger than one tile; else one pass over the whole frame."""
    t, h, w = latent_shape[:3]
    ratio = config.spatial_downscale_factor
    spatial = _spatial_tiles(tiled, ratio)
    if spatial is not None and spatial.applies(h, w):
        shapes = [(t, th, tw) for _, _, th, tw in spatial.grid(h, w)]
    else:
        shapes = [(t, h, w)]
    largest = max(shapes, key=lambda s: s[1] * s[2])
    frames = config.temporal_downscale_factor * (t - 1) + 1
    return TileGeometry(largest, (frames, ratio * largest[1], ratio * largest[2]),
                        len(shapes), tuple(dict.fromkeys(shapes)))


# One jitted program per tile shape (and timestep presence).
@functools.partial(jax.jit, static_argnums=0)
def _decode(graphdef, state, z, timestep):
    return nnx.merge(graphdef, state).decode(z, timestep)
