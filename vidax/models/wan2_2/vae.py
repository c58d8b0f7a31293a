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

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.wan2_1 import vae as wan21
from vidax.nn.causal_conv import CausalConv3d, ChunkCache
from vidax.nn.layers import Conv, KeyGen

# The latent statistics of the released VAE: constants of the authors' ``Wan2_2_VAE`` wrapper
# (not stored in the file). Latents are normalised as ``(mu - mean) * (1 / std)``.
WAN2_2_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542,
    0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,
    0.2665, -0.2108, -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899,
    -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667)
WAN2_2_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344,
    0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804,
    0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999,
    0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744)
#: The pixel patch of the authors' ``patchify`` / ``unpatchify`` (hard-coded 2 there, and
#: the trunk's 12 input / output channels with it).
PATCH = 2
RGB = 3


@dataclass(frozen=True)
class Wan22VAEConfig:
    """The authors' ``WanVAE_`` (vae2_2) hyper-parameters plus the latent statistics.

    ``dim`` is the encoder's base width (``c_dim`` of the ``Wan2_2_VAE`` wrapper) and
    ``dec_dim`` the decoder's; ``temporal_downsample`` is the authors'
    ``temperal_downsample`` (accepted by :meth:`from_dict`).
    """

    dim: int = 160
    dec_dim: int = 256
    z_dim: int = 48
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = WAN2_2_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN2_2_LATENTS_STD

    def __post_init__(self):
        for name in ("dim_mult", "temporal_downsample", "latents_mean", "latents_std"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.dim_mult) < 2:
            raise VidaxError(f"Wan2.2 VAE dim_mult needs at least 2 levels, got {self.dim_mult}")
        if len(self.temporal_downsample) > len(self.dim_mult) - 1 or sum(
                self.temporal_downsample) != 2:
            # Chunks of 1 + 4k frames and 4n+1 <-> n+1 assume a temporal stride of 4.
            raise VidaxError("Wan2.2 VAE: exactly two of the first "
                             f"{len(self.dim_mult) - 1} levels must downsample in time "
                             f"(stride 4), got temporal_downsample {self.temporal_downsample}")
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise VidaxError(f"Wan2.2 VAE latents_mean/std need z_dim={self.z_dim} values each, "
                             f"got {len(self.latents_mean)} and {len(self.latents_std)}")

    @property
    def spatial_stride(self) -> int:
        return PATCH * 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_stride(self) -> int:
        return 2 ** sum(self.temporal_downsample)

    def temporal(self, level: int) -> bool:
        """Whether down level ``level`` halves time (the authors pad the list with False)."""
        return level < len(self.temporal_downsample) and self.temporal_downsample[level]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Wan22VAEConfig:
        """From the authors' ``WanVAE_`` keyword arguments (a manifest's ``config``).

        ``attn_scales`` must be empty (the released setting) and ``dropout`` is accepted and
        unused (inference); ``c_dim`` (the wrapper's name of ``dim``) is accepted. Keys
        starting with ``_`` are ignored; any other unknown key is an error.
        """
        d = dict(d)
        if d.pop("attn_scales", []):
            raise VidaxError("Wan2.2 VAE attn_scales: only [] (the released setting) is "
                             "supported")
        d.pop("dropout", None)
        for theirs, ours in (("temperal_downsample", "temporal_downsample"), ("c_dim", "dim")):
            if theirs in d:
                d[ours] = d.pop(theirs)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown Wan2.2 VAE config keys {unknown}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def wan2_2(cls) -> Wan22VAEConfig:
        """``Wan2.2_VAE.pth`` (TI2V-5B; Cosmos3's VAE in diffusers' layout)."""
        return cls()

    @classmethod
    def tiny(cls) -> Wan22VAEConfig:
        """For tests: the released block structure with encoder width 8, decoder width 12
        (unequal, as released) and 4 latent channels (their statistics: the first 4 released
        values)."""
        return cls(dim=8, dec_dim=12, z_dim=4, latents_mean=WAN2_2_LATENTS_MEAN[:4],
                   latents_std=WAN2_2_LATENTS_STD[:4])


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
