"""The Wan2.2 VAE, after the authors' ``WanVAE_`` in ``wan/modules/vae2_2.py`` (Wan2.2).

``Wan2.2_VAE.pth`` (TI2V-5B; Cosmos3 ships the same weights in diffusers' layout): video
``[B, 4n+1, H, W, 3]`` in [-1, 1] <-> latents ``[B, n+1, H/16, W/16, 48]``. What differs from
the Wan2.1 VAE (:mod:`vidax.models.wan2_1.vae`, whose building blocks are reused here):

* A 2x2 pixel patchify first (``patchify``: 3 -> 12 channels at half the size) and the inverse
  after the decoder, so the conv trunk's 8x becomes 16x.
* The down/up levels are blocks of their own (``Down_ResidualBlock`` / ``Up_ResidualBlock``),
  nested as ``downsamples.I.downsamples.J`` / ``upsamples.I.upsamples.J``, each with a
  parameter-free shortcut around the whole level: ``AvgDown3D`` (space/time to channels, then
  a mean over channel groups) and ``DupUp3D`` (channels repeated, then channels to
  space/time).
* The decoder's spatial upsampling conv keeps the width (Wan2.1's halves it).
* Encoder width 160, decoder width 256 (one ``dim`` in Wan2.1).

Chunks, caches and compilation are exactly the Wan2.1 VAE's (see that module): the encoder takes
the first frame alone, then 4 frames at a time; the decoder one latent frame at a time; every
causal conv carries its last frames in a :class:`vidax.nn.causal_conv.ChunkCache`; one jitted
program for the first chunk and one for all later chunks, per direction, with the cache
donated; decoded chunks go to the host as they are produced. The shortcuts need no cache: a
chunk always holds whole groups of frames, except the first chunk's single frame, which
``AvgDown3D`` pads with zeros in front and ``DupUp3D`` crops (the authors' ``first_chunk``).

Module names mirror the authors', with the Wan2.1 VAE's names for ``nn.Sequential`` indices
(``residual.0/2/3/6`` -> ``norm1/conv1/norm2/conv2``, ``middle.0/1/2`` ->
``mid_block1/mid_attn/mid_block2``, ``head.0/2`` -> ``head_norm/head_conv``,
``resample.1`` -> ``conv``).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.models.wan2_1 import vae as wan21
from vidax.models.wan2_2.config import (  # noqa: F401  (the statistics: importable from here too)
    PATCH, RGB, WAN2_2_LATENTS_MEAN, WAN2_2_LATENTS_STD, Wan22VAEConfig)
from vidax.nn.causal_conv import CausalConv3d, ChunkCache
from vidax.nn.layers import Conv, KeyGen


# ----------------------------------------------------------------------------- pixel patches
def patchify(x: jax.Array) -> jax.Array:
    """``[B, T, H, W, 3]`` -> ``[B, T, H/2, W/2, 12]``; mirrors ``patchify`` (``b c f (h q)
    (w r) -> b (c r q) f h w``): channel ``4c + 2r + q`` holds pixel ``(2h + q, 2w + r)``."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t, h // PATCH, PATCH, w // PATCH, PATCH, c)      # [b t h q w r c]
    x = x.transpose(0, 1, 2, 4, 6, 5, 3)                              # [b t h w c r q]
    return x.reshape(b, t, h // PATCH, w // PATCH, c * PATCH * PATCH)


def unpatchify(x: jax.Array) -> jax.Array:
    """The inverse of :func:`patchify`; mirrors ``unpatchify``."""
    b, t, h, w, cp = x.shape
    x = x.reshape(b, t, h, w, cp // (PATCH * PATCH), PATCH, PATCH)   # [b t h w c r q]
    x = x.transpose(0, 1, 2, 6, 3, 5, 4)                              # [b t h q w r c]
    return x.reshape(b, t, h * PATCH, w * PATCH, cp // (PATCH * PATCH))


# ----------------------------------------------------------------------------- shortcuts
def avg_down(x: jax.Array, out_dim: int, factor_t: int, factor_s: int) -> jax.Array:
    """Mirrors ``AvgDown3D``: ``[B, T, H, W, C]`` -> ``[B, T/ft, H/fs, W/fs, out_dim]``.

    Time is zero-padded in front to a multiple of ``factor_t``; each (ft, fs, fs) block goes
    to channels in the authors' order ``(c, t, h, w)``, and consecutive groups of those
    ``C * ft * fs * fs`` channels are averaged down to ``out_dim``.
    """
    pad_t = -x.shape[1] % factor_t
    if pad_t:
        x = jnp.pad(x, ((0, 0), (pad_t, 0), (0, 0), (0, 0), (0, 0)))
    b, t, h, w, c = x.shape
    ft, fs = factor_t, factor_s
    x = x.reshape(b, t // ft, ft, h // fs, fs, w // fs, fs, c)
    x = x.transpose(0, 1, 3, 5, 7, 2, 4, 6)                  # [b t h w c ft fs fs]
    group = c * ft * fs * fs // out_dim
    return x.reshape(b, t // ft, h // fs, w // fs, out_dim, group).mean(axis=-1)


def dup_up(x: jax.Array, out_dim: int, factor_t: int, factor_s: int, *,
           first_chunk: bool) -> jax.Array:
    """Mirrors ``DupUp3D``: ``[B, T, H, W, C]`` -> ``[B, T*ft, H*fs, W*fs, out_dim]``.

    Each channel is repeated (``repeat_interleave``) up to ``out_dim * ft * fs * fs``
    channels, read in the order ``(out, t, h, w)`` back into space and time. On the video's
    first chunk the first ``ft - 1`` frames are dropped, as the main path does not upsample
    that chunk in time.
    """
    b, t, h, w, c = x.shape
    ft, fs = factor_t, factor_s
    x = jnp.repeat(x, out_dim * ft * fs * fs // c, axis=-1)
    x = x.reshape(b, t, h, w, out_dim, ft, fs, fs)
    x = x.transpose(0, 1, 5, 2, 6, 3, 7, 4)                  # [b t ft h fs w fs out]
    x = x.reshape(b, t * ft, h * fs, w * fs, out_dim)
    return x[:, ft - 1:] if first_chunk else x


# ----------------------------------------------------------------------------- blocks
class Resample(wan21.Resample):
    """The Wan2.1 VAE's ``Resample`` but for the upsampling conv, which keeps the width here
    (vae2_2's ``nn.Conv2d(dim, dim, 3, padding=1)``; Wan2.1 halves it)."""

    def __init__(self, dim: int, mode: str, *, keys: KeyGen, param_dtype):
        super().__init__(dim, mode, keys=keys, param_dtype=param_dtype)
        if mode.startswith("upsample"):
            self.conv = Conv(dim, dim, (3, 3), padding=1, keys=keys, param_dtype=param_dtype)


class DownBlock(nnx.Module):
    """Mirrors ``Down_ResidualBlock``: ``num_res_blocks`` residual blocks, then (except on the
    last level) a downsampling ``Resample``; plus the ``AvgDown3D`` shortcut around them."""

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, *, temporal: bool,
                 down: bool, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.out_dim = out_dim
        self.factor_t = 2 if temporal else 1
        self.factor_s = 2 if down else 1
        layers: list[nnx.Module] = []
        for _ in range(num_res_blocks):
            layers.append(wan21.ResidualBlock(in_dim, out_dim, **kw))
            in_dim = out_dim
        if down:
            layers.append(Resample(out_dim, "downsample3d" if temporal else "downsample2d", **kw))
        self.downsamples = nnx.List(layers)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        h = x
        for layer in self.downsamples:
            h = layer(h, cache)
        return h + avg_down(x, self.out_dim, self.factor_t, self.factor_s)


class UpBlock(nnx.Module):
    """Mirrors ``Up_ResidualBlock``: ``num_res_blocks + 1`` residual blocks, then (except on
    the last level) an upsampling ``Resample`` with the ``DupUp3D`` shortcut around them."""

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, *, temporal: bool,
                 up: bool, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.out_dim = out_dim
        self.up = up
        self.factor_t = 2 if temporal else 1
        layers: list[nnx.Module] = []
        for _ in range(num_res_blocks + 1):
            layers.append(wan21.ResidualBlock(in_dim, out_dim, **kw))
            in_dim = out_dim
        if up:
            layers.append(Resample(out_dim, "upsample3d" if temporal else "upsample2d", **kw))
        self.upsamples = nnx.List(layers)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        first = cache.first
        h = x
        for layer in self.upsamples:
            h = layer(h, cache)
        if not self.up:
            return h
        return h + dup_up(x, self.out_dim, self.factor_t, 2, first_chunk=first)


class Encoder3d(nnx.Module):
    """Mirrors vae2_2's ``Encoder3d``: 12 patchified channels -> ``2 z_dim`` (mean and
    log-variance) at 1/8 the (patchified) size."""

    def __init__(self, cfg: Wan22VAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        dims = [cfg.dim * u for u in (1, *cfg.dim_mult)]
        last = len(cfg.dim_mult) - 1
        self.conv1 = CausalConv3d(RGB * PATCH * PATCH, dims[0], 3, padding=1, **kw)
        self.downsamples = nnx.List([
            DownBlock(in_dim, out_dim, cfg.num_res_blocks, temporal=cfg.temporal(i),
                      down=i != last, **kw)
            for i, (in_dim, out_dim) in enumerate(itertools.pairwise(dims))])
        out_dim = dims[-1]
        self.mid_block1 = wan21.ResidualBlock(out_dim, out_dim, **kw)
        self.mid_attn = wan21.AttentionBlock(out_dim, **kw)
        self.mid_block2 = wan21.ResidualBlock(out_dim, out_dim, **kw)
        self.head_norm = wan21.RMSNorm(out_dim, param_dtype=param_dtype)
        self.head_conv = CausalConv3d(out_dim, 2 * cfg.z_dim, 3, padding=1, **kw)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        x = cache.conv(self.conv1, x)
        for block in self.downsamples:
            x = block(x, cache)
        x = self.mid_block2(self.mid_attn(self.mid_block1(x, cache)), cache)
        return cache.conv(self.head_conv, jax.nn.silu(self.head_norm(x)))


class Decoder3d(nnx.Module):
    """Mirrors vae2_2's ``Decoder3d``: ``z_dim`` latents -> 12 patchified channels at 8x."""

    def __init__(self, cfg: Wan22VAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        dims = [cfg.dec_dim * u for u in (cfg.dim_mult[-1], *cfg.dim_mult[::-1])]
        temporal_upsample = cfg.temporal_downsample[::-1]
        last = len(cfg.dim_mult) - 1
        self.conv1 = CausalConv3d(cfg.z_dim, dims[0], 3, padding=1, **kw)
        self.mid_block1 = wan21.ResidualBlock(dims[0], dims[0], **kw)
        self.mid_attn = wan21.AttentionBlock(dims[0], **kw)
        self.mid_block2 = wan21.ResidualBlock(dims[0], dims[0], **kw)
        self.upsamples = nnx.List([
            UpBlock(in_dim, out_dim, cfg.num_res_blocks,
                    temporal=i < len(temporal_upsample) and temporal_upsample[i],
                    up=i != last, **kw)
            for i, (in_dim, out_dim) in enumerate(itertools.pairwise(dims))])
        self.head_norm = wan21.RMSNorm(dims[-1], param_dtype=param_dtype)
        self.head_conv = CausalConv3d(dims[-1], RGB * PATCH * PATCH, 3, padding=1, **kw)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        x = cache.conv(self.conv1, x)
        x = self.mid_block2(self.mid_attn(self.mid_block1(x, cache)), cache)
        for block in self.upsamples:
            x = block(x, cache)
        return cache.conv(self.head_conv, jax.nn.silu(self.head_norm(x)))


class Wan22VAE(wan21.ChunkedVideoVAE):
    """The Wan2.2 VAE (vae2_2 ``WanVAE_``) in Flax NNX: channels-last video, chunked, jitted
    per chunk; 2x2 pixels patchified into channels before the encoder and back after the
    decoder.

    Use :meth:`encode` and :meth:`decode`; :meth:`encode_chunk` / :meth:`decode_chunk` are
    the per-chunk computations they jit.
    """

    NAME = "Wan2.2 VAE"
    ENCODER = Encoder3d
    DECODER = Decoder3d

    def __init__(self, config: Wan22VAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        super().__init__(config, keys=keys, param_dtype=param_dtype)

    def pack(self, x: jax.Array) -> jax.Array:
        return patchify(x)

    def unpack(self, x: jax.Array) -> jax.Array:
        return unpatchify(x)
