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

Tiles (:meth:`LTXVideoVAE.decode_tiled`, a host loop; :meth:`~LTXVideoVAE.decode` stays
one traced computation), two ways; in both the 0.9.x decode timestep goes to every tile's
decoder unchanged, each tile is one jitted program per shape, and its video is moved to the
host, where the blending runs.

With a :class:`TileSettings`: diffusers' ``AutoencoderKLLTXVideo`` / ``AutoencoderKLLTX2Video``
(``autoencoder_kl_ltx.py`` / ``autoencoder_kl_ltx2.py``, the same loops) with
``enable_tiling()``:

* spatial (``tiled_decode``): where the latent is larger than one tile, latent tiles of
  ``tile_sample_min // 32`` starting every ``tile_sample_stride // 32`` (512 px every 448: 16
  every 14), each decoded over the frames it is given; each tile's first ``size - stride``
  rows / columns cross-fade from its already blended upper / left neighbour (``blend_v`` /
  ``blend_h``), ``stride`` of them kept;
* temporal (``_temporal_tiled_decode``, with ``framewise=True``: diffusers'
  ``use_framewise_decoding``): where the latent has more than ``tile_sample_min_num_frames //
  8`` frames (16 frames: 2), tiles of that many latent frames plus one, every
  ``tile_sample_stride_num_frames // 8`` (8 frames: 1), each spatially tiled as above where
  it is larger than a spatial tile. A tile after the first drops its *last* decoded frame; its
  first ``min_num_frames - stride_num_frames`` frames cross-fade from the previous tile's last
  ones (``blend_t``, in place, in order), then the first tile keeps ``stride + 1`` frames and
  the others ``stride``. diffusers also decodes a final one-latent-frame tile whose only frame
  it then drops; vidax skips it (same output). As placed, every later tile's frames land one
  frame after the time they show: a tile's first decoded frame is its first latent's causal
  "image" frame, time ``8 i`` (ltx-core's ``map_temporal_interval_to_frame``), concatenated at
  ``8 i + 1`` (on the tiny VAE a later tile's frames are 2-4x closer to the untiled decode's
  previous frame than to the same one). diffusers' numbers, reproduced as they are.

With an :class:`LTXCoreTiles` (what the LTX pipelines use, :mod:`vidax.pipelines.ltx_tiles`):
ltx-core's ``VideoDecoder.tiled_decode`` (``ltx_core/model/video_vae/video_vae.py`` and
``tiling.py``): per axis, tiles of ``size`` latents every ``size - overlap``
(``split_with_symmetric_overlaps``; a spatial tile first scaled by its axis's share of the
longer side), a later temporal tile starting one latent frame early
(``split_temporal_latents``); each decoded tile weighted by the product of its axes'
trapezoidal ramps (``compute_trapezoidal_mask_1d``: over the overlaps, a later temporal tile's
causal first frame at weight 0) and summed into the video, which is divided by the summed
weights.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.tiling import TileGeometry
from vidax.tiling import blend as _blend
from vidax.tiling import counted, spatially_tiled
from vidax.models.ltx_video.config import (  # noqa: F401  (the tiling API, re-exported)
    DECODER_STRIDES, ENCODER_STRIDES, PADDING_MODES, LTXCoreTiles, LTXVideoVAEConfig,
    TemporalTiles, TileSettings)
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

    def decode_tiled(self, latents, tiled: bool | TileSettings | LTXCoreTiles = True, *,
                     framewise: bool = False, normalized: bool = True, timestep=None,
                     on_chunk=None) -> np.ndarray:
        """:meth:`decode_normalized` (``normalized=False``: :meth:`decode`) in tiles (the
        module docstring). ``tiled``: diffusers' ``_decode`` with ``enable_tiling()`` --
        ``True`` for its default spatial tiles (512 px every 448), a :class:`TileSettings`,
        or ``False`` (none), ``framewise=True`` adding its temporal tiles
        (``use_framewise_decoding``; ``tiled``'s temporal sizes, else 16 frames every 8) --
        or an :class:`LTXCoreTiles`: ltx-core's ``VideoDecoder.tiled_decode`` (``framewise``
        is then unused). A latent no larger than a tile decodes in one pass. ``timestep``: a
        timestep-conditioned decoder's decode timestep, given to every tile. One jitted
        program per tile shape, every tile's video on the host as it is made, blended there;
        ``on_chunk(done, total)`` after each pass (:func:`tile_geometry` counts them).
        Returns numpy float32, unclamped. Decode noise is not mixed in here
        (:meth:`decode_normalized` does it)."""
        cfg = self.config
        z = jnp.asarray(latents, _F32)
        if z.ndim != 5 or z.shape[-1] != cfg.latent_channels:
            raise VidaxError(f"LTX-Video VAE latents must be [B, F, H, W, "
                             f"{cfg.latent_channels}], got {tuple(z.shape)}")
        if normalized:
            z = self.denormalize(z)
        ratio = cfg.spatial_downscale_factor
        total = tile_geometry(z.shape[1:4], tiled=tiled, framewise=framewise, config=cfg).count
        graphdef, state = nnx.split(self)
        run = counted(lambda tile: np.asarray(_decode(graphdef, state, tile, timestep)), total,
                      on_chunk)
        if isinstance(tiled, LTXCoreTiles):
            return ltx_core_tiled(run, z, tiled, ratio, cfg.temporal_downscale_factor)
        settings = _settings(tiled)
        spatial = None if settings is None else settings.spatial(ratio)
        temporal = ((settings or TileSettings()).temporal(cfg.temporal_downscale_factor)
                    if framewise else None)

        def piece(x):
            if spatial is not None and spatial.applies(*x.shape[2:4]):
                return spatially_tiled(run, x, spatial, ratio)
            return run(x)

        if temporal is not None and temporal.applies(z.shape[1]):
            return temporally_tiled(piece, z, temporal)
        return piece(z)

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


# ----------------------------------------------------------------------------- tiles
def _settings(tiled) -> TileSettings | None:
    if tiled is False or tiled is None:
        return None
    if tiled is True:
        return TileSettings()
    if not isinstance(tiled, TileSettings):
        raise VidaxError(f"LTX VAE decode_tiled: tiled must be a bool, a "
                         f"vidax.models.ltx_video.vae.TileSettings or an LTXCoreTiles, got "
                         f"{tiled!r}")
    return tiled


def temporally_tiled(run, z, tiles: TemporalTiles) -> np.ndarray:
    """diffusers' ``_temporal_tiled_decode`` over latents ``z [B, T, h, w, C]``: ``run`` (a
    tile's decode, host numpy ``[B, F, H, W, 3]``) on each of ``tiles.spans``; a tile after
    the first without its last frame, its first ``tiles.blend`` frames cross-faded in place
    from the previous (already blended) tile's last ones (``blend_t``), then ``keep + 1``
    frames of the first tile and ``keep`` of each later one, cut to ``ratio (T - 1) + 1``."""
    t = z.shape[1]
    kept, prev = [], None
    for first, length in tiles.spans(t):
        out = np.array(run(z[:, first:first + length]), np.float32)
        if first > 0:
            out = out[:, :-1]
        if prev is not None:
            _blend(prev, out, tiles.blend, axis=1)
        kept.append(out[:, :tiles.keep + (first == 0)])
        prev = out
    return np.concatenate(kept, axis=1)[:, :tiles.ratio * (t - 1) + 1]


def _ramp(length: int, left: int, right: int, from_zero: bool) -> np.ndarray:
    """ltx-core's ``compute_trapezoidal_mask_1d``: ones, the first ``left`` entries rising
    linearly (from 0 with ``from_zero``, else from ``1 / (left + 1)``) and the last ``right``
    falling to ``1 / (right + 1)``, float32."""
    left, right = min(max(left, 0), length), min(max(right, 0), length)
    mask = np.ones(length, np.float32)
    if left:
        rise = np.linspace(0, 1, left + 2, dtype=np.float32)[1:-1] if not from_zero else \
            np.linspace(0, 1, left + 1, dtype=np.float32)[:-1]
        mask[:left] *= rise
    if right:
        mask[length - right:] *= np.linspace(1, 0, right + 2, dtype=np.float32)[1:-1]
    return np.clip(mask, 0, 1)


def ltx_core_tiles(latent_shape, tiles: LTXCoreTiles, ratio: int, time_ratio: int):
    """The tiles of ltx-core's ``VideoDecoder._prepare_tiles`` for latents ``(T, h, w)``, in
    its order (time, then rows, then columns): ``(latent, output, ramps)`` -- the latent
    slices ``(T, h, w)``, the output slices ``(frames, H, W)`` and the three 1-D float32
    weights along them (``map_temporal_interval_to_frame`` / ``map_spatial_interval_to_pixel``:
    latent ``[s, e)`` -> frames ``[r s, 1 + r (e - 1))``, a left ramp of ``l`` latent frames ->
    ``1 + r (l - 1)`` frames rising from 0, so that a later tile's first (causal "image")
    frame weighs nothing; ``R`` pixels per latent pixel, ramps rising from ``1 / (n + 1)``)."""
    times, rows, cols = tiles.spans(latent_shape, ratio, time_ratio)
    out = []
    for t0, t1, tl, tr in times:
        ft = slice(time_ratio * t0, 1 + time_ratio * (t1 - 1))
        mt = _ramp(ft.stop - ft.start, 0 if tl == 0 else 1 + (tl - 1) * time_ratio,
                   tr * time_ratio, True)
        for h0, h1, hl, hr in rows:
            mh = _ramp(ratio * (h1 - h0), ratio * hl, ratio * hr, False)
            for w0, w1, wl, wr in cols:
                mw = _ramp(ratio * (w1 - w0), ratio * wl, ratio * wr, False)
                out.append(((slice(t0, t1), slice(h0, h1), slice(w0, w1)),
                            (ft, slice(ratio * h0, ratio * h1), slice(ratio * w0, ratio * w1)),
                            (mt, mh, mw)))
    return out


def ltx_core_tiled(run, z, tiles: LTXCoreTiles, ratio: int, time_ratio: int) -> np.ndarray:
    """ltx-core's ``VideoDecoder.tiled_decode`` over latents ``z [B, T, h, w, C]``: ``run`` (a
    tile's decode, host numpy) on each of :func:`ltx_core_tiles`, the decoded tile weighted by
    the product of its three ramps and summed into the video, which is divided by the summed
    weights (at least 1e-8) at the end. ltx-core streams one temporal group at a time; the
    sums are the same (up to the order of float additions)."""
    b, t, h, w = z.shape[:4]
    frames = time_ratio * (t - 1) + 1
    weight = np.zeros((frames, ratio * h, ratio * w), np.float32)
    video = None
    for latent, where, (mt, mh, mw) in ltx_core_tiles((t, h, w), tiles, ratio, time_ratio):
        tile = np.asarray(run(z[(slice(None),) + latent]), np.float32)
        if video is None:
            video = np.zeros((b, frames, ratio * h, ratio * w, tile.shape[-1]), np.float32)
        mask = mt[:, None, None] * mh[None, :, None] * mw[None, None, :]
        video[(slice(None),) + where] += tile * mask[..., None]
        weight[where] += mask
    return video / np.maximum(weight, np.float32(1e-8))[..., None]


def tile_geometry(latent_shape, *, tiled=True, framewise: bool = False,
                  config) -> TileGeometry:
    """The decoder passes :meth:`LTXVideoVAE.decode_tiled` makes on latents ``(T, h, w[, C])``
    with these ``tiled`` / ``framewise`` options (for memory estimates): an
    :class:`LTXCoreTiles`' tiles; else (diffusers') within each temporal tile
    (``framewise``, where the latent has more frames than one) one pass per spatial tile
    where the latent is larger than one, else one over the whole frame. ``latent`` /
    ``sample``: the largest pass's latent and decoded (before any frame is dropped) sizes."""
    t, h, w = latent_shape[:3]
    ratio, time_ratio = config.spatial_downscale_factor, config.temporal_downscale_factor
    if isinstance(tiled, LTXCoreTiles):
        shapes = [tuple(s.stop - s.start for s in latent)
                  for latent, _, _ in ltx_core_tiles((t, h, w), tiled, ratio, time_ratio)]
    else:
        settings = _settings(tiled)
        spatial = None if settings is None else settings.spatial(ratio)
        spans = ((settings or TileSettings()).temporal(time_ratio).spans(t) if framewise
                 else [(0, t)])
        shapes = []
        for _, n in spans:
            if spatial is not None and spatial.applies(h, w):
                shapes += [(n, th, tw) for _, _, th, tw in spatial.grid(h, w)]
            else:
                shapes.append((n, h, w))
    largest = max(shapes, key=math.prod)
    frames = time_ratio * (largest[0] - 1) + 1
    return TileGeometry(largest, (frames, ratio * largest[1], ratio * largest[2]),
                        len(shapes), tuple(dict.fromkeys(shapes)))


# One jitted program per tile shape (and timestep presence).
@functools.partial(jax.jit, static_argnums=0)
def _decode(graphdef, state, z, timestep):
    return nnx.merge(graphdef, state).decode(z, timestep)
