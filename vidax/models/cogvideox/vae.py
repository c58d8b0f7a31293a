"""The CogVideoX VAE, after diffusers' ``AutoencoderKLCogVideoX``
(``models/autoencoders/autoencoder_kl_cogvideox.py``, with ``CogVideoXDownsample3D`` and
``CogVideoXUpsample3D`` from ``models/downsampling.py`` / ``upsampling.py``).

A causal 3D-conv autoencoder with 8x8 spatial and 4x temporal compression: video
``[B, T, H, W, 3]`` in [-1, 1] <-> latents ``[B, T', H/8, W/8, 16]`` (49 frames <-> 13 latent
frames: the first frame alone, then groups of 4). One architecture serves all five releases
(CogVideoX-2B, -5B, -5B-I2V, 1.5-5B, 1.5-5B-I2V); only ``scaling_factor`` and
``invert_scale_latents`` differ.

What decides the numbers, beyond the layers themselves:

* **Causal convs pad time with copies of the first frame** (diffusers' ``pad_mode="first"``),
  spatially with zeros; chunk after chunk, the last two input frames of each 3x3x3 conv are
  carried instead (:class:`vidax.nn.causal_conv.CausalConv3d` with ``pad_mode="replicate"``
  and :class:`~vidax.nn.causal_conv.ChunkCache`).
* **Frame batching.** Every GroupNorm normalises over the frames of the chunk it sees, so
  the output depends on how the video is cut. diffusers' ``_encode`` runs the encoder on 8
  frames at a time (the first chunk also takes the ``T % 8`` leftover frames: 9 of 49) and
  ``_decode`` runs the decoder on 2 latent frames at a time (the first chunk 3 when the count
  is odd). :func:`frame_batches` reproduces those bounds exactly. The down/upsamplers keep no
  cache: each chunk is resampled on its own (an odd chunk keeps its first frame out of the
  temporal pooling / doubling).
* **The decoder's norms are spatial norms**: ``GroupNorm(f) * conv_y(zq) + conv_b(zq)`` with
  ``zq`` the chunk's *latent* (the decoder's input) stretched by nearest-neighbour resizing to
  ``f``'s frames, height and width; with an odd number of frames (more than one) its first
  latent frame stretches to the first frame of ``f`` and the rest to the rest.

**Spatial tiles** (``decode(tiled=...)``), as ``AutoencoderKLCogVideoX.tiled_decode`` runs
them once ``enable_tiling()`` is on: where the latent is wider or taller than one tile,
latent tiles of ``tile_sample_min_* / 8`` starting every ``int(tile * (1 - overlap))``,
each decoded alone in the frame batches above with its own causal-conv cache (so every
GroupNorm normalises over the tile, not the frame); on the host each decoded tile's first
``int(size * overlap)`` rows / columns cross-fade from its already blended upper / left
neighbour (``blend_v`` / ``blend_h``) and ``size - blend`` of them are kept. The tiles are
``sample_height // 2`` x ``sample_width // 2`` (240 x 360 px: every release's config says
480 x 720) with overlaps 1/6 and 1/5, the constructor's defaults (:class:`TileSettings`);
:func:`tile_geometry` says which chunks a decode runs.

Module names mirror diffusers'. The mapper (``vidax.translator.mappings.cogvideox``) drops
the ``.conv`` of diffusers' causal-conv wrappers (``conv_in.conv.weight`` -> ``conv_in.kernel``)
and names the one-element ``downsamplers`` / ``upsamplers`` lists ``downsampler`` /
``upsampler``. The quant convs (``use_quant_conv`` / ``use_post_quant_conv``), off in every
release, are not implemented.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.cogvideox.config import CogVideoXVAEConfig, TileSettings
from vidax.tiling import SpatialTiles, TileGeometry
from vidax.tiling import spatially_tiled, ticker
from vidax.nn.causal_conv import CausalConv3d, ChunkCache
from vidax.nn.group_norm import GroupNorm
from vidax.nn.layers import Conv, KeyGen

#: diffusers' ``num_sample_frames_batch_size`` / ``num_latent_frames_batch_size``.
ENCODE_FRAMES_PER_CHUNK = 8
DECODE_FRAMES_PER_CHUNK = 2
#: diffusers' ``DiagonalGaussianDistribution`` clamps the log-variance to this range.
LOG_VAR_RANGE = (-30.0, 20.0)
#: The spatial norm's GroupNorm and the encoder's ``norm_out`` use this epsilon whatever
#: ``norm_eps`` says (diffusers hard-codes it; the releases' ``norm_eps`` is the same 1e-6).
_FIXED_EPS = 1e-6


def frame_batches(num_frames: int, per_chunk: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` frame bounds of diffusers' ``_encode`` / ``_decode`` loops:
    ``max(n // per_chunk, 1)`` chunks of ``per_chunk`` frames, the first also taking the
    ``n % per_chunk`` leftover frames (all of them when ``n < per_chunk``)."""
    rest = num_frames % per_chunk
    count = max(num_frames // per_chunk, 1)
    return [(0 if i == 0 else per_chunk * i + rest, min(per_chunk * (i + 1) + rest, num_frames))
            for i in range(count)]


def _per_frame(fn, x: jax.Array) -> jax.Array:
    """A 2D op on every frame of ``[B, T, H, W, C]`` (diffusers' ``(b t) c h w`` reshapes)."""
    b, t = x.shape[:2]
    y = fn(x.reshape(b * t, *x.shape[2:]))
    return y.reshape(b, t, *y.shape[1:])


def _resize_nearest(x: jax.Array, size: tuple[int, int, int]) -> jax.Array:
    """``F.interpolate(mode="nearest", size=size)`` over ``(T, H, W)`` of ``[B, T, H, W, C]``:
    output index ``i`` reads input ``floor(i * n_in / n_out)`` on each axis."""
    for axis, n_out in zip((1, 2, 3), size):
        n_in = x.shape[axis]
        if n_in != n_out:
            x = jnp.take(x, np.arange(n_out) * n_in // n_out, axis=axis)
    return x


def _causal_conv(in_ch: int, out_ch: int, *, keys: KeyGen, param_dtype) -> CausalConv3d:
    """diffusers' ``CogVideoXCausalConv3d`` with a 3x3x3 kernel in ``pad_mode="first"``: the
    first frame repeated twice in front, one zero pixel around each frame."""
    return CausalConv3d(in_ch, out_ch, 3, padding=1, pad_mode="replicate", keys=keys,
                        param_dtype=param_dtype)


class SpatialNorm3D(nnx.Module):
    """Mirrors ``CogVideoXSpatialNorm3D``: ``GroupNorm(f) * conv_y(zq) + conv_b(zq)``.

    ``conv_y`` / ``conv_b`` are 1x1x1 convs (diffusers wraps them as causal convs of time
    kernel 1: no padding, no cache). They run on the latent before it is stretched to ``f``'s
    size: a per-position map commutes with nearest-neighbour resizing, and the latent has
    64x fewer positions per frame at the decoder's last level.
    """

    def __init__(self, f_channels: int, zq_channels: int, groups: int, *, keys: KeyGen,
                 param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.norm_layer = GroupNorm(groups, f_channels, eps=_FIXED_EPS, param_dtype=param_dtype)
        self.conv_y = Conv(zq_channels, f_channels, (1, 1, 1), **kw)
        self.conv_b = Conv(zq_channels, f_channels, (1, 1, 1), **kw)

    def __call__(self, f: jax.Array, zq: jax.Array) -> jax.Array:
        y, b = self.conv_y(zq), self.conv_b(zq)
        t, h, w = f.shape[1:4]
        if t > 1 and t % 2 == 1:
            # The first latent frame stands for the first frame only (the causal layout).
            y = jnp.concatenate([_resize_nearest(y[:, :1], (1, h, w)),
                                 _resize_nearest(y[:, 1:], (t - 1, h, w))], axis=1)
            b = jnp.concatenate([_resize_nearest(b[:, :1], (1, h, w)),
                                 _resize_nearest(b[:, 1:], (t - 1, h, w))], axis=1)
        else:
            y, b = _resize_nearest(y, (t, h, w)), _resize_nearest(b, (t, h, w))
        return self.norm_layer(f) * y + b


class ResnetBlock3D(nnx.Module):
    """Mirrors ``CogVideoXResnetBlock3D`` (no time embedding: ``temb_channels=0``):
    (norm, SiLU, causal conv) twice plus the input, through a 1x1x1 ``conv_shortcut`` where the
    width changes. Norms are GroupNorms in the encoder, spatial norms in the decoder."""

    def __init__(self, in_ch: int, out_ch: int, cfg: CogVideoXVAEConfig, *, spatial: bool,
                 keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        groups = cfg.norm_num_groups

        def norm(ch):
            if spatial:
                return SpatialNorm3D(ch, cfg.latent_channels, groups, **kw)
            return GroupNorm(groups, ch, eps=cfg.norm_eps, param_dtype=param_dtype)

        self.norm1 = norm(in_ch)
        self.conv1 = _causal_conv(in_ch, out_ch, **kw)
        self.norm2 = norm(out_ch)
        self.conv2 = _causal_conv(out_ch, out_ch, **kw)
        self.conv_shortcut = Conv(in_ch, out_ch, (1, 1, 1), **kw) if in_ch != out_ch else None

    @staticmethod
    def _norm(norm, x: jax.Array, zq: jax.Array | None) -> jax.Array:
        return norm(x) if zq is None else norm(x, zq)

    def __call__(self, x: jax.Array, cache: ChunkCache, zq: jax.Array | None = None
                 ) -> jax.Array:
        h = cache.conv(self.conv1, jax.nn.silu(self._norm(self.norm1, x, zq)))
        h = cache.conv(self.conv2, jax.nn.silu(self._norm(self.norm2, h, zq)))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class Downsample3D(nnx.Module):
    """Mirrors ``CogVideoXDownsample3D``: with ``compress_time``, average pairs of frames (an
    odd count keeps its first frame alone in front); then, per frame, zero-pad one pixel right
    and bottom and a 3x3 stride-2 conv."""

    def __init__(self, channels: int, compress_time: bool, *, keys: KeyGen, param_dtype):
        self.compress_time = compress_time
        self.conv = Conv(channels, channels, (3, 3), stride=2, padding=((0, 1), (0, 1)),
                         keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.compress_time:
            first, rest = (x[:, :1], x[:, 1:]) if x.shape[1] % 2 else (x[:, :0], x)
            rest = (rest[:, 0::2] + rest[:, 1::2]) * 0.5
            x = jnp.concatenate([first, rest], axis=1)
        return _per_frame(self.conv, x)


class Upsample3D(nnx.Module):
    """Mirrors ``CogVideoXUpsample3D``: nearest 2x in height and width, and with
    ``compress_time`` in time too (each frame twice; an odd count above one keeps its first
    frame single; one frame stays one); then a 3x3 conv per frame."""

    def __init__(self, channels: int, compress_time: bool, *, keys: KeyGen, param_dtype):
        self.compress_time = compress_time
        self.conv = Conv(channels, channels, (3, 3), padding=1, keys=keys,
                         param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)
        t = x.shape[1]
        if self.compress_time and t > 1:
            if t % 2:
                x = jnp.concatenate([x[:, :1], jnp.repeat(x[:, 1:], 2, axis=1)], axis=1)
            else:
                x = jnp.repeat(x, 2, axis=1)
        return _per_frame(self.conv, x)


class DownBlock3D(nnx.Module):
    """Mirrors ``CogVideoXDownBlock3D``: resnets, then (but the last level) a downsampler."""

    def __init__(self, in_ch: int, out_ch: int, cfg: CogVideoXVAEConfig, *, downsample: bool,
                 compress_time: bool, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.resnets = nnx.List([ResnetBlock3D(in_ch if i == 0 else out_ch, out_ch, cfg,
                                               spatial=False, **kw)
                                 for i in range(cfg.layers_per_block)])
        self.downsampler = Downsample3D(out_ch, compress_time, **kw) if downsample else None

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x, cache)
        return x if self.downsampler is None else self.downsampler(x)


class MidBlock3D(nnx.Module):
    """Mirrors ``CogVideoXMidBlock3D``: two resnets at constant width."""

    def __init__(self, ch: int, cfg: CogVideoXVAEConfig, *, spatial: bool, keys: KeyGen,
                 param_dtype):
        self.resnets = nnx.List([ResnetBlock3D(ch, ch, cfg, spatial=spatial, keys=keys,
                                               param_dtype=param_dtype) for _ in range(2)])

    def __call__(self, x: jax.Array, cache: ChunkCache, zq: jax.Array | None = None
                 ) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x, cache, zq)
        return x


class UpBlock3D(nnx.Module):
    """Mirrors ``CogVideoXUpBlock3D``: ``layers_per_block + 1`` spatial-norm resnets, then
    (but the last level) an upsampler."""

    def __init__(self, in_ch: int, out_ch: int, cfg: CogVideoXVAEConfig, *, upsample: bool,
                 compress_time: bool, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.resnets = nnx.List([ResnetBlock3D(in_ch if i == 0 else out_ch, out_ch, cfg,
                                               spatial=True, **kw)
                                 for i in range(cfg.layers_per_block + 1)])
        self.upsampler = Upsample3D(out_ch, compress_time, **kw) if upsample else None

    def __call__(self, x: jax.Array, cache: ChunkCache, zq: jax.Array) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x, cache, zq)
        return x if self.upsampler is None else self.upsampler(x)


class Encoder3D(nnx.Module):
    """Mirrors ``CogVideoXEncoder3D``: video -> ``2 * latent_channels`` moments (mean, then
    log-variance) at 1/8 the size."""

    def __init__(self, cfg: CogVideoXVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        chs = cfg.block_out_channels
        self.conv_in = _causal_conv(cfg.in_channels, chs[0], **kw)
        self.down_blocks = nnx.List([
            DownBlock3D(chs[max(i - 1, 0)], ch, cfg, downsample=i < len(chs) - 1,
                        compress_time=i < cfg.temporal_levels, **kw)
            for i, ch in enumerate(chs)])
        self.mid_block = MidBlock3D(chs[-1], cfg, spatial=False, **kw)
        self.norm_out = GroupNorm(cfg.norm_num_groups, chs[-1], eps=_FIXED_EPS,
                                  param_dtype=param_dtype)
        self.conv_out = _causal_conv(chs[-1], 2 * cfg.latent_channels, **kw)

    def __call__(self, x: jax.Array, cache: ChunkCache) -> jax.Array:
        x = cache.conv(self.conv_in, x)
        for block in self.down_blocks:
            x = block(x, cache)
        x = self.mid_block(x, cache)
        return cache.conv(self.conv_out, jax.nn.silu(self.norm_out(x)))


class Decoder3D(nnx.Module):
    """Mirrors ``CogVideoXDecoder3D``: latents -> RGB at 8x the size; every norm is a spatial
    norm fed by the chunk's latent."""

    def __init__(self, cfg: CogVideoXVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        chs = cfg.block_out_channels[::-1]
        self.conv_in = _causal_conv(cfg.latent_channels, chs[0], **kw)
        self.mid_block = MidBlock3D(chs[0], cfg, spatial=True, **kw)
        self.up_blocks = nnx.List([
            UpBlock3D(chs[max(i - 1, 0)], ch, cfg, upsample=i < len(chs) - 1,
                      compress_time=i < cfg.temporal_levels, **kw)
            for i, ch in enumerate(chs)])
        self.norm_out = SpatialNorm3D(chs[-1], cfg.latent_channels, cfg.norm_num_groups, **kw)
        self.conv_out = _causal_conv(chs[-1], cfg.out_channels, **kw)

    def __call__(self, z: jax.Array, cache: ChunkCache) -> jax.Array:
        x = cache.conv(self.conv_in, z)
        x = self.mid_block(x, cache, z)
        for block in self.up_blocks:
            x = block(x, cache, z)
        return cache.conv(self.conv_out, jax.nn.silu(self.norm_out(x, z)))


class CogVideoXVAE(nnx.Module):
    """``AutoencoderKLCogVideoX`` in Flax NNX: channels-last video, encoded and decoded in
    diffusers' frame batches, one jitted program per chunk shape with the causal-conv caches
    carried (and donated) from chunk to chunk.

    Use :meth:`encode` and :meth:`decode`; :meth:`encode_chunk` / :meth:`decode_chunk` are the
    per-chunk computations they jit.
    """

    def __init__(self, config: CogVideoXVAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        self.config = config
        self.encoder = Encoder3D(config, keys=keys, param_dtype=param_dtype)
        self.decoder = Decoder3D(config, keys=keys, param_dtype=param_dtype)

    def encode_chunk(self, x: jax.Array, cache: tuple[jax.Array, ...] | None
                     ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        """One encoder chunk (``None`` cache: the video's first): its moments
        ``[B, t, h, w, 2 * latent_channels]`` and the cache for the next chunk."""
        chunk_cache = ChunkCache(cache)
        return self.encoder(x, chunk_cache), chunk_cache.result()

    def decode_chunk(self, z: jax.Array, cache: tuple[jax.Array, ...] | None
                     ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        """One decoder chunk: latent frames -> video frames, and the cache for the next."""
        chunk_cache = ChunkCache(cache)
        return self.decoder(z, chunk_cache), chunk_cache.result()

    def encode(self, video, *, normalize: bool = True, return_log_var: bool = False):
        """Video ``[B, T, H, W, in_channels]`` in [-1, 1] -> the posterior mean
        ``[B, T', H/8, W/8, latent_channels]`` (``T = 8k + 1`` frames give ``T' = 2k + 1``;
        49 -> 13, 81 -> 21).

        Mirrors ``AutoencoderKLCogVideoX.encode`` (tiling and slicing off) followed by the
        pipelines' ``* scaling_factor``; ``normalize=False`` returns diffusers'
        ``latent_dist.mean`` unscaled. With ``return_log_var`` also its log-variance (clamped
        to [-30, 20] as diffusers' ``DiagonalGaussianDistribution``; never scaled):
        ``(mean, log_var)``. For the 1.5 image-to-video latent (``invert_scale_latents``),
        encode with ``normalize=False`` and divide by ``scaling_factor``.
        """
        cfg = self.config
        if getattr(video, "ndim", None) != 5 or video.shape[-1] != cfg.in_channels:
            raise VidaxError(f"CogVideoX VAE encode takes video [B, T, H, W, {cfg.in_channels}],"
                             f" got shape {tuple(getattr(video, 'shape', ()))}")
        graphdef, state = nnx.split(self)
        parts, cache = [], None
        for start, stop in frame_batches(video.shape[1], ENCODE_FRAMES_PER_CHUNK):
            chunk = jnp.asarray(video[:, start:stop], jnp.float32)
            moments, cache = _encode_chunk(graphdef, state, chunk, cache)
            parts.append(moments)
        mean, log_var = jnp.split(jnp.concatenate(parts, axis=1), 2, axis=-1)
        if normalize:
            mean = mean * cfg.scaling_factor
        return (mean, jnp.clip(log_var, *LOG_VAR_RANGE)) if return_log_var else mean

    def decode(self, latents, *, normalized: bool = True, clamp: bool = True,
               tiled: bool | TileSettings = False, on_chunk=None) -> np.ndarray:
        """Latents ``[B, T', h, w, latent_channels]`` -> video ``[B, T, 8h, 8w, out_channels]``
        (numpy, float32; ``T' = 2k + 1`` latent frames give ``T = 8k + 1``).

        Mirrors the pipelines' ``latents / scaling_factor`` (skipped with
        ``normalized=False``) and ``AutoencoderKLCogVideoX.decode``: tiling off by default
        (the class default); ``tiled=True``: ``enable_tiling()``'s defaults, or a
        :class:`TileSettings` -- where the latent is larger than a tile, each spatial tile
        decoded in frame batches with its own cache and the tiles blended on the host (the
        module docstring). The output is clamped to [-1, 1] unless ``clamp=False``
        (diffusers clamps later, in its video post-processing). Each decoded chunk goes to
        host memory as soon as it is ready, then ``on_chunk(done, total)`` is called, if
        given (progress; :func:`tile_geometry` counts the chunks).
        """
        cfg = self.config
        if getattr(latents, "ndim", None) != 5 or latents.shape[-1] != cfg.latent_channels:
            raise VidaxError(f"CogVideoX VAE decode takes latents [B, T, h, w, "
                             f"{cfg.latent_channels}], got shape "
                             f"{tuple(getattr(latents, 'shape', ()))}")
        spatial = _spatial_tiles(tiled, cfg)
        z = jnp.asarray(latents, jnp.float32)
        if normalized:
            z = z / cfg.scaling_factor
        graphdef, state = nnx.split(self)
        t, h, w = z.shape[1:4]
        chunks = len(frame_batches(t, DECODE_FRAMES_PER_CHUNK))
        if spatial is None or not spatial.applies(h, w):
            video = _frames(graphdef, state, z, ticker(chunks, on_chunk))
        else:
            tick = ticker(chunks * len(spatial.grid(h, w)), on_chunk)
            video = spatially_tiled(lambda tile: _frames(graphdef, state, tile, tick), z,
                                    spatial, cfg.spatial_stride)
        return np.clip(video, -1.0, 1.0) if clamp else video


# ----------------------------------------------------------------------------- spatial tiles
def _spatial_tiles(tiled, cfg: CogVideoXVAEConfig) -> SpatialTiles | None:
    if tiled is False or tiled is None:
        return None
    if tiled is True:
        tiled = TileSettings()
    if not isinstance(tiled, TileSettings):
        raise VidaxError(f"CogVideoX VAE decode: tiled must be a bool or a "
                         f"vidax.models.cogvideox.vae.TileSettings, got {tiled!r}")
    return tiled.spatial(cfg.spatial_stride)


def tile_geometry(latent_shape, *, tiled=False,
                  config: CogVideoXVAEConfig | None = None) -> TileGeometry:
    """The decoder chunks :meth:`CogVideoXVAE.decode` runs on latents ``(T, h, w[, C])``
    with ``tiled`` (for memory estimates): diffusers' frame batches (the largest: 3 latent
    frames -> 9 frames when ``T`` is odd, else 2 -> 8), over the whole frame or (tiled,
    where the latent is larger than a tile) over each spatial tile."""
    cfg = config or CogVideoXVAEConfig()
    t, h, w = latent_shape[:3]
    batches = frame_batches(t, DECODE_FRAMES_PER_CHUNK)
    frames = max(stop - start for start, stop in batches)
    spatial = _spatial_tiles(tiled, cfg)
    if spatial is not None and spatial.applies(h, w):
        shapes = [(frames, th, tw) for _, _, th, tw in spatial.grid(h, w)]
    else:
        shapes = [(frames, h, w)]
    largest = max(shapes, key=lambda s: s[1] * s[2])
    r, rt = cfg.spatial_stride, cfg.temporal_compression_ratio
    out = rt * frames - (rt - 1 if frames % 2 else 0)   # an odd batch keeps its first alone
    return TileGeometry(largest, (out, r * largest[1], r * largest[2]),
                        len(shapes) * len(batches), tuple(dict.fromkeys(shapes)))


def _frames(graphdef, state, z, tick) -> np.ndarray:
    """The decoder over ``z``'s frame batches (:func:`frame_batches`), the cache carried from
    the first (none) to the last; each chunk's output on the host."""
    frames, cache = [], None
    for start, stop in frame_batches(z.shape[1], DECODE_FRAMES_PER_CHUNK):
        out, cache = _decode_chunk(graphdef, state, z[:, start:stop], cache)
        frames.append(np.asarray(out))
        tick()
    return np.concatenate(frames, axis=1)


# One jitted function per direction; the cache pytree (None on the first chunk) and the chunk
# shape select the compiled program (encode: 9 then 8 frames; decode: 3 or 2, then 2). The
# cache is donated: each chunk's carry reuses the previous one's buffers.
@functools.partial(jax.jit, static_argnums=0, donate_argnums=3)
def _encode_chunk(graphdef, state, x, cache):
    return nnx.merge(graphdef, state).encode_chunk(x, cache)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=3)
def _decode_chunk(graphdef, state, z, cache):
    return nnx.merge(graphdef, state).decode_chunk(z, cache)
