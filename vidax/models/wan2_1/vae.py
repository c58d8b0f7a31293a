"""The Wan2.1 VAE, after the authors' ``WanVAE_`` (``wan/modules/vae2_1.py`` of Wan2.2,
``wan/modules/vae.py`` of Wan2.1: the same code).

A causal 3D-conv autoencoder: video ``[B, 4n+1, H, W, 3]`` in [-1, 1] <-> latents
``[B, n+1, H/8, W/8, z_dim]``. The same file is ``Wan2.1_VAE.pth`` in every Wan2.1 release,
the VAE of Wan2.2's A14B models, and Cosmos-Predict2.5's ``tokenizer.pth``.

Chunks, as the authors run them (``WanVAE_.encode`` / ``.decode``): the encoder takes the
first frame alone, then 4 frames at a time; the decoder one latent frame at a time. Every
causal conv carries the last frames of its input from chunk to chunk
(:mod:`vidax.nn.causal_conv`); the authors' first-chunk special cases become static Python
here (the temporal resampling convs do not run on the first chunk, so its one frame stays one
frame) and their ``None`` / ``'Rep'`` cache states become arrays:

* ``None`` (no cache yet): the first chunk runs without a cache; each conv pads with zeros,
  which is what the authors' ``F.pad`` does.
* ``'Rep'`` (decoder temporal upsampling after the first chunk): two zero frames, exactly the
  padding the authors' next ``time_conv(x)`` call (no cache) applies.
* A cache the authors keep as 1 frame (a 1-frame chunk with no earlier cache) and later pad
  with one zero frame, or grow with the previous cache's last frame: always the last 2 frames
  of everything the conv has seen, zero padding included; the same numbers in one fixed shape.

So one jitted function runs each chunk: the first chunk and the later chunks compile once
each, driven by a Python loop that donates the cache from chunk to chunk (docs/models/wan2_1.md).
Decoded chunks move to the host as they are produced.

Spatial tiles (``decode(tiled=...)``), as diffusers' ``AutoencoderKLWan.tiled_decode``
(``models/autoencoders/autoencoder_kl_wan.py``) runs them once ``enable_tiling()`` is on:
where the latent is larger than one tile (``_decode``'s test), latent tiles of
``tile_sample_min_* // spatial_stride`` starting every ``tile_sample_stride_* //
spatial_stride``, each decoded alone over every latent frame with a fresh cache (its
``clear_cache`` per tile, ``first_chunk`` on the tile's first frame); on the host each tile's
first ``size - stride`` rows / columns cross-fade from its already blended upper / left
neighbour (``blend_v`` / ``blend_h``), ``stride`` of them kept. With Wan2.2's 2x2 patch the
blending runs on the decoder's output before unpatchifying, in patch units (diffusers divides
the blend and the kept extent by ``patch_size``). :class:`TileSettings` holds the sizes,
:func:`tile_geometry` says which chunks a decode runs.

Module names mirror the authors'; where torch uses ``nn.Sequential`` indices the names are:

====================================  =====================================
authors (torch)                       vidax
====================================  =====================================
``*.residual.0`` / ``.2``             ``*.norm1`` / ``*.conv1``
``*.residual.3`` / ``.6``             ``*.norm2`` / ``*.conv2``
``{encoder,decoder}.middle.0/1/2``    ``.mid_block1`` / ``.mid_attn`` / ``.mid_block2``
``{encoder,decoder}.head.0`` / ``.2`` ``.head_norm`` / ``.head_conv``
``*.resample.1`` (Resample)           ``*.conv``
====================================  =====================================

``encoder.downsamples.N`` / ``decoder.upsamples.N`` keep the authors' flat numbering. Norm
``gamma`` tensors (stored ``[C, 1, 1, 1]`` / ``[C, 1, 1]``) are ``scale`` ``[C]`` here.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.tiling import SpatialTiles, TileGeometry
from vidax.tiling import spatially_tiled, ticker
from vidax.models.wan2_1.config import (  # noqa: F401  (the statistics: importable from here too)
    WAN2_1_LATENTS_MEAN, WAN2_1_LATENTS_STD, TileSettings, WanVAEConfig)
from vidax.nn.attention import attention
from vidax.nn.causal_conv import CausalConv3d, ChunkCache
from vidax.nn.layers import Conv, KeyGen


class RMSNorm(nnx.Module):
    """The authors' ``RMS_norm`` over channels: ``F.normalize(x) * sqrt(C) * gamma``.

    An L2 normalisation with a 1e-12 floor on the norm (not an epsilon inside the mean, as in
    ``vidax.nn.layers.RMSNorm``), computed in float32.
    """

    def __init__(self, dim: int, *, param_dtype=jnp.float32):
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        norm = jnp.sqrt(jnp.sum(jnp.square(xf), axis=-1, keepdims=True))
        y = xf / jnp.maximum(norm, 1e-12) * (x.shape[-1] ** 0.5)
        return (y * self.scale[...].astype(jnp.float32)).astype(x.dtype)


def _per_frame(fn, x: jax.Array) -> jax.Array:
    """Apply a 2D (image) op to every frame of ``[B, T, H, W, C]``
    (``b c t h w -> (b t) c h w``)."""
    b, t = x.shape[:2]
    y = fn(x.reshape(b * t, *x.shape[2:]))
    return y.reshape(b, t, *y.shape[1:])


class ResidualBlock(nnx.Module):
    """Mirrors ``ResidualBlock``: (norm, SiLU, causal conv) twice, plus a 1x1x1 shortcut
    conv where the width changes. Dropout is the identity at inference."""

    def __init__(self, in_dim: int, out_dim: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.norm1 = RMSNorm(in_dim, param_dtype=param_dtype)
        self.conv1 = CausalConv3d(in_dim, out_dim, 3, padding=1, **kw)
        self.norm2 = RMSNorm(out_dim, param_dtype=param_dtype)
        self.conv2 = CausalConv3d(out_dim, out_dim, 3, padding=1, **kw)
        self.shortcut = CausalConv3d(in_dim, out_dim, 1, **kw) if in_dim != out_dim else None

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        h = x if self.shortcut is None else self.shortcut(x)
        x = cache.conv(self.conv1, jax.nn.silu(self.norm1(x)))
        x = cache.conv(self.conv2, jax.nn.silu(self.norm2(x)))
        return x + h


class AttentionBlock(nnx.Module):
    """Mirrors ``AttentionBlock``: single-head self-attention over the pixels of each frame."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.norm = RMSNorm(dim, param_dtype=param_dtype)
        self.to_qkv = Conv(dim, 3 * dim, (1, 1), **kw)
        self.proj = Conv(dim, dim, (1, 1), **kw)

    def _frame(self, x: jax.Array) -> jax.Array:
        n, h, w, c = x.shape
        # to_qkv's output channels are [q | k | v] (the authors' ``chunk(3, dim=-1)``).
        q, k, v = jnp.split(self.to_qkv(self.norm(x)).reshape(n, h * w, 1, 3 * c), 3, axis=-1)
        return self.proj(attention(q, k, v).reshape(n, h, w, c))

    def __call__(self, x: jax.Array) -> jax.Array:
        return _per_frame(self._frame, x) + x


class Resample(nnx.Module):
    """Mirrors ``Resample``: 2x spatial down/up-sampling per frame, and for the ``*3d`` modes
    2x temporal down/up-sampling by a causal conv, skipped on the first chunk.

    ``upsample*``: nearest 2x (the authors' ``nearest-exact``, the same at an integer
    scale), then a 3x3 conv halving the channels. ``upsample3d`` first doubles the frames:
    ``time_conv`` makes ``2C`` channels, the first ``C`` of them frame ``2t``, the rest frame
    ``2t+1``.

    ``downsample*``: zero-pad right and bottom by one, 3x3 conv with stride 2.
    ``downsample3d`` then halves the frames with a stride-2 conv over the previous chunk's
    last frame and this chunk's frames (``context=1``: its cache is that one frame).
    """

    MODES = ("upsample2d", "upsample3d", "downsample2d", "downsample3d")

    def __init__(self, dim: int, mode: str, *, keys: KeyGen, param_dtype):
        if mode not in self.MODES:
            raise VidaxError(f"Resample mode must be one of {self.MODES}, got {mode!r}")
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.mode = mode
        if mode.startswith("upsample"):
            self.conv = Conv(dim, dim // 2, (3, 3), padding=1, **kw)
        else:
            self.conv = Conv(dim, dim, (3, 3), stride=2, padding=((0, 1), (0, 1)), **kw)
        if mode == "upsample3d":
            self.time_conv = CausalConv3d(dim, 2 * dim, (3, 1, 1), **kw)
        elif mode == "downsample3d":
            self.time_conv = CausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1), context=1, **kw)

    def _upsample_frame(self, x: jax.Array) -> jax.Array:
        return self.conv(jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2))

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        if self.mode == "upsample3d":
            if cache.first:
                # The authors' 'Rep': no temporal upsampling now; the next call pads with zeros.
                cache.skip(jnp.zeros((x.shape[0], self.time_conv.context, *x.shape[2:]),
                                     x.dtype))
            else:
                b, t, h, w, c = x.shape
                x = cache.conv(self.time_conv, x).reshape(b, t, h, w, 2, c)
                x = x.transpose(0, 1, 4, 2, 3, 5).reshape(b, 2 * t, h, w, c)
        if self.mode.startswith("upsample"):
            return _per_frame(self._upsample_frame, x)
        x = _per_frame(self.conv, x)
        if self.mode == "downsample3d":
            if cache.first:
                # The first frame is not downsampled in time; it is the next chunk's context.
                cache.skip(x[:, -self.time_conv.context:])
            else:
                x = cache.conv(self.time_conv, x)
        return x


class Encoder3d(nnx.Module):
    """Mirrors ``Encoder3d`` (``attn_scales=[]``): video ``[B, T, H, W, 3]`` -> ``out_dim``
    channels (``2 z_dim``: mean and log-variance) at 1/8 the size."""

    def __init__(self, cfg: WanVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        dims = [cfg.dim * u for u in (1, *cfg.dim_mult)]
        self.conv1 = CausalConv3d(3, dims[0], 3, padding=1, **kw)
        blocks: list[nnx.Module] = []
        for i, (in_dim, out_dim) in enumerate(itertools.pairwise(dims)):
            for _ in range(cfg.num_res_blocks):
                blocks.append(ResidualBlock(in_dim, out_dim, **kw))
                in_dim = out_dim
            if i != len(cfg.dim_mult) - 1:
                mode = "downsample3d" if cfg.temporal_downsample[i] else "downsample2d"
                blocks.append(Resample(out_dim, mode, **kw))
        self.downsamples = nnx.List(blocks)
        self.mid_block1 = ResidualBlock(out_dim, out_dim, **kw)
        self.mid_attn = AttentionBlock(out_dim, **kw)
        self.mid_block2 = ResidualBlock(out_dim, out_dim, **kw)
        self.head_norm = RMSNorm(out_dim, param_dtype=param_dtype)
        self.head_conv = CausalConv3d(out_dim, 2 * cfg.z_dim, 3, padding=1, **kw)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        x = cache.conv(self.conv1, x)
        for layer in self.downsamples:
            x = layer(x, cache)
        x = self.mid_block2(self.mid_attn(self.mid_block1(x, cache)), cache)
        return cache.conv(self.head_conv, jax.nn.silu(self.head_norm(x)))


class Decoder3d(nnx.Module):
    """Mirrors ``Decoder3d`` (``attn_scales=[]``): ``z_dim`` latents -> RGB at 8x the size."""

    def __init__(self, cfg: WanVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        dims = [cfg.dim * u for u in (cfg.dim_mult[-1], *cfg.dim_mult[::-1])]
        temporal_upsample = cfg.temporal_downsample[::-1]
        self.conv1 = CausalConv3d(cfg.z_dim, dims[0], 3, padding=1, **kw)
        self.mid_block1 = ResidualBlock(dims[0], dims[0], **kw)
        self.mid_attn = AttentionBlock(dims[0], **kw)
        self.mid_block2 = ResidualBlock(dims[0], dims[0], **kw)
        blocks: list[nnx.Module] = []
        for i, (in_dim, out_dim) in enumerate(itertools.pairwise(dims)):
            if i > 0:  # the previous level's upsampling conv halved the channels
                in_dim //= 2
            for _ in range(cfg.num_res_blocks + 1):
                blocks.append(ResidualBlock(in_dim, out_dim, **kw))
                in_dim = out_dim
            if i != len(cfg.dim_mult) - 1:
                mode = "upsample3d" if temporal_upsample[i] else "upsample2d"
                blocks.append(Resample(out_dim, mode, **kw))
        self.upsamples = nnx.List(blocks)
        self.head_norm = RMSNorm(out_dim, param_dtype=param_dtype)
        self.head_conv = CausalConv3d(out_dim, 3, 3, padding=1, **kw)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        x = cache.conv(self.conv1, x)
        x = self.mid_block2(self.mid_attn(self.mid_block1(x, cache)), cache)
        for layer in self.upsamples:
            x = layer(x, cache)
        return cache.conv(self.head_conv, jax.nn.silu(self.head_norm(x)))


class ChunkedVideoVAE(nnx.Module):
    """Whole-video ``encode`` / ``decode`` over a subclass's per-chunk computations, as the
    Wan authors chunk: encode the first frame, then ``temporal_stride`` frames at a time;
    decode one latent frame at a time; the causal-conv cache carried between chunks. Shared
    by the Wan2.1 and Wan2.2 VAEs (their ``config`` has ``spatial_stride``,
    ``temporal_stride``, ``z_dim``, ``latents_mean``, ``latents_std``)."""

    NAME = "VAE"
    ENCODER: type = None   # the encoder / decoder modules of the subclass
    DECODER: type = None

    def __init__(self, config, *, keys: KeyGen | int = 0, param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.encoder = self.ENCODER(cfg, **kw)
        self.conv1 = CausalConv3d(2 * cfg.z_dim, 2 * cfg.z_dim, 1, **kw)
        self.conv2 = CausalConv3d(cfg.z_dim, cfg.z_dim, 1, **kw)
        self.decoder = self.DECODER(cfg, **kw)

    def pack(self, x: jax.Array) -> jax.Array:
        """Pixels -> the encoder's input (Wan2.2 patchifies 2x2 pixels into channels)."""
        return x

    def unpack(self, x: jax.Array) -> jax.Array:
        """The decoder's output -> pixels."""
        return x

    # ----------------------------------------------------------------------------- per chunk
    def encode_chunk(self, x: jax.Array, cache: tuple[jax.Array, ...] | None
                     ) -> tuple[jax.Array, jax.Array, tuple[jax.Array, ...]]:
        """One encoder chunk (the first frame, or 4 frames): ``(mu, log_var, cache)``, the
        moments unnormalised, one latent frame."""
        chunk_cache = ChunkCache(cache)
        out = self.conv1(self.encoder(self.pack(x), chunk_cache))
        mu, log_var = jnp.split(out, 2, axis=-1)
        return mu, log_var, chunk_cache.result()

    def decode_chunk(self, z: jax.Array, cache: tuple[jax.Array, ...] | None
                     ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        """One decoder chunk: one unnormalised latent frame -> 1 (first) or 4 video frames."""
        x, cache = self.decode_chunk_packed(z, cache)
        return self.unpack(x), cache

    def decode_chunk_packed(self, z: jax.Array, cache: tuple[jax.Array, ...] | None
                            ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        """:meth:`decode_chunk` before :meth:`unpack` (what a tiled decode blends)."""
        chunk_cache = ChunkCache(cache)
        return self.decoder(self.conv2(z), chunk_cache), chunk_cache.result()

    @property
    def patch(self) -> int:
        """Pixels per decoder output pixel along each side (Wan2.2's 2x2 patch: 2)."""
        cfg = self.config
        return cfg.spatial_stride // 2 ** (len(cfg.dim_mult) - 1)

    # ----------------------------------------------------------------------------- whole videos
    def _statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, 1/std) in float32, as the authors' wrapper computes its ``scale``."""
        mean = np.asarray(self.config.latents_mean, np.float32)
        inv_std = np.float32(1.0) / np.asarray(self.config.latents_std, np.float32)
        return mean, inv_std

    def encode(self, video, *, normalize: bool = True, return_log_var: bool = False):
        """Video ``[B, 4n+1, H, W, 3]`` in [-1, 1] -> latent mean ``[B, n+1, H/s, W/s, z_dim]``
        (``s`` the spatial stride: 8 for Wan2.1, 16 for Wan2.2).

        Mirrors the authors' ``Wan2_1_VAE.encode`` / ``Wan2_2_VAE.encode``: the posterior
        mean, normalised as ``(mu - mean) / std`` with the latent statistics unless
        ``normalize=False``. With ``return_log_var`` also the (never normalised)
        log-variance: ``(mu, log_var)``.
        """
        cfg = self.config
        if getattr(video, "ndim", None) != 5 or video.shape[-1] != 3:
            raise VidaxError(f"{self.NAME} encode takes video [B, T, H, W, 3], got shape "
                             f"{tuple(getattr(video, 'shape', ()))}")
        _, t, h, w, _ = video.shape
        s, ts = cfg.spatial_stride, cfg.temporal_stride
        if t % ts != 1 or h % s or w % s:
            raise VidaxError(f"{self.NAME} encode: video of {t} frames at {h}x{w}; the frame "
                             f"count must be {ts}n+1 (1, {ts + 1}, {2 * ts + 1}, ...) and height "
                             f"and width multiples of {s}")
        graphdef, state = nnx.split(self)
        # The first frame alone, then one latent frame's worth (the authors' 1 + 4(i-1) : 1 + 4i).
        bounds = [(0, 1)] + [(i, i + ts) for i in range(1, t, ts)]
        mus, log_vars, cache = [], [], None
        for start, stop in bounds:
            chunk = jnp.asarray(video[:, start:stop], jnp.float32)
            mu, log_var, cache = _encode_chunk(graphdef, state, chunk, cache)
            mus.append(mu)
            log_vars.append(log_var)
        mu = jnp.concatenate(mus, axis=1)
        if normalize:
            mean, inv_std = self._statistics()
            mu = (mu - mean) * inv_std
        return (mu, jnp.concatenate(log_vars, axis=1)) if return_log_var else mu

    def decode(self, latents, *, normalized: bool = True, clamp: bool = True,
               tiled: bool | TileSettings = False, on_chunk=None) -> np.ndarray:
        """Latents ``[B, n+1, h, w, z_dim]`` -> video ``[B, 4n+1, s*h, s*w, 3]`` (numpy, float32).

        Mirrors the authors' ``Wan2_1_VAE.decode`` / ``Wan2_2_VAE.decode``: latents are
        un-normalised first (``normalized=False``: they are raw posterior samples), the
        output is clamped to [-1, 1] unless
        ``clamp=False`` (``WanVAE_.decode`` itself does not clamp). Each decoded chunk (one
        latent frame) goes to host memory as soon as it is ready, then ``on_chunk(done,
        total)`` is called, if given (progress).

        ``tiled``: off by default (the authors never tile; nor does diffusers unless
        ``enable_tiling()``); ``True`` for diffusers' ``enable_tiling()`` defaults (256 px
        tiles every 192), or a :class:`TileSettings`. Where the latent is larger than one
        tile, each spatial tile is decoded chunk by chunk with its own cache and the tiles
        are blended on the host (the module docstring); :func:`tile_geometry` counts the
        chunks.
        """
        cfg = self.config
        if getattr(latents, "ndim", None) != 5 or latents.shape[-1] != cfg.z_dim:
            raise VidaxError(f"{self.NAME} decode takes latents [B, T, h, w, {cfg.z_dim}], got "
                             f"shape {tuple(getattr(latents, 'shape', ()))}")
        spatial = _spatial_tiles(tiled, cfg, self.patch, self.NAME)
        z = jnp.asarray(latents, jnp.float32)
        if normalized:
            mean, inv_std = self._statistics()
            z = z / inv_std + mean
        graphdef, state = nnx.split(self)
        t, h, w = z.shape[1:4]
        if spatial is None or not spatial.applies(h, w):
            tick = ticker(t, on_chunk)
            video = _frames(_decode_chunk, graphdef, state, z, tick)
        else:
            tick = ticker(t * len(spatial.grid(h, w)), on_chunk)
            video = self.unpack(spatially_tiled(
                lambda tile: _frames(_decode_chunk_packed, graphdef, state, tile, tick), z,
                spatial, cfg.spatial_stride // self.patch))
        return np.clip(video, -1.0, 1.0) if clamp else video


class WanVAE(ChunkedVideoVAE):
    """The Wan2.1 VAE (``WanVAE_``) in Flax NNX: channels-last video, chunked, jitted per chunk.

    Use :meth:`encode` and :meth:`decode`; :meth:`encode_chunk` / :meth:`decode_chunk` are
    the per-chunk computations they jit.
    """

    NAME = "Wan2.1 VAE"
    ENCODER = Encoder3d
    DECODER = Decoder3d

    def __init__(self, config: WanVAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        super().__init__(config, keys=keys, param_dtype=param_dtype)


# ----------------------------------------------------------------------------- spatial tiles
def _spatial_tiles(tiled, cfg, patch: int, name: str = "Wan VAE") -> SpatialTiles | None:
    if tiled is False or tiled is None:
        return None
    if tiled is True:
        tiled = TileSettings()
    if not isinstance(tiled, TileSettings):
        raise VidaxError(f"{name} decode: tiled must be a bool or a "
                         f"vidax.models.wan2_1.vae.TileSettings, got {tiled!r}")
    return tiled.spatial(cfg.spatial_stride, patch)


def tile_geometry(latent_shape, *, tiled=False, config) -> TileGeometry:
    """The decoder chunks :meth:`ChunkedVideoVAE.decode` runs on latents ``(T, h, w[, C])``
    with ``tiled`` (for memory estimates): one latent frame each -- ``temporal_stride``
    frames out -- over the whole frame, or (tiled, where the latent is larger than a tile)
    over each spatial tile; ``count`` chunks in all, the distinct latent ``shapes``."""
    t, h, w = latent_shape[:3]
    patch = config.spatial_stride // 2 ** (len(config.dim_mult) - 1)
    spatial = _spatial_tiles(tiled, config, patch)
    if spatial is not None and spatial.applies(h, w):
        shapes = [(1, th, tw) for _, _, th, tw in spatial.grid(h, w)]
    else:
        shapes = [(1, h, w)]
    largest = max(shapes, key=lambda s: s[1] * s[2])
    s = config.spatial_stride
    return TileGeometry(largest, (config.temporal_stride, s * largest[1], s * largest[2]),
                        len(shapes) * t, tuple(dict.fromkeys(shapes)))


def _frames(step, graphdef, state, z, tick) -> np.ndarray:
    """``step`` (a jitted per-chunk decode) over ``z``'s latent frames, one at a time, the
    cache carried from the first (none) to the last; each chunk's output on the host."""
    frames, cache = [], None
    for i in range(z.shape[1]):
        out, cache = step(graphdef, state, z[:, i:i + 1], cache)
        frames.append(np.asarray(out))
        tick()
    return np.concatenate(frames, axis=1)


# One jitted function per direction; the cache pytree (None on the first chunk) selects the
# compiled program, so a video compiles two programs per direction and chunk shape. The cache
# is donated: each chunk's carry reuses the previous one's buffers.
@functools.partial(jax.jit, static_argnums=0, donate_argnums=3)
def _encode_chunk(graphdef, state, x, cache):
    return nnx.merge(graphdef, state).encode_chunk(x, cache)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=3)
def _decode_chunk(graphdef, state, z, cache):
    return nnx.merge(graphdef, state).decode_chunk(z, cache)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=3)
def _decode_chunk_packed(graphdef, state, z, cache):   # a tile's chunk (blended before unpack)
    return nnx.merge(graphdef, state).decode_chunk_packed(z, cache)
