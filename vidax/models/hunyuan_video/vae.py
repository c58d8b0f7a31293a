"""The HunyuanVideo 1.0 VAE ("884-16c-hy"), after diffusers' ``AutoencoderKLHunyuanVideo``
(``models/autoencoders/autoencoder_kl_hunyuan_video.py``; the authors' ``AutoencoderKLCausal3D``,
``hyvideo/vae/autoencoder_kl_causal_3d.py``, has the same modules and tensor names).

A causal 3D-conv autoencoder with 8x8 spatial and 4x temporal compression: video
``[B, T, H, W, 3]`` in [-1, 1] <-> latents ``[B, (T-1)/4 + 1, H/8, W/8, 16]`` (129 frames <->
33 latent frames: the first frame alone, then groups of 4).

What decides the numbers, beyond the layers themselves:

* **The whole video in one pass.** diffusers' ``_encode`` / ``_decode`` with tiling off run
  the encoder and decoder on every frame at once, so every GroupNorm normalises over all
  frames and the mid-block attention sees all of them. This port does the same by default
  (one jitted program per direction and shape) and keeps no chunk cache.
* **Framewise (temporal tiles), diffusers' default for long clips.** ``use_framewise_encoding``
  / ``_decoding`` are on in a fresh ``AutoencoderKLHunyuanVideo``: above 16 frames (encode) or
  4 latent frames (decode) it runs overlapping tiles of 17 frames / 5 latent frames, 12 frames /
  3 latent frames apart, each as an independent clip, and cross-fades the overlaps
  (``_temporal_tiled_encode`` / ``_decode``). The numbers differ from the one-pass run; pass
  ``framewise=True`` to :meth:`HunyuanVideoVAE.encode` / ``decode`` to get diffusers' tiled
  ones.
* **Spatial tiles (decode), diffusers' ``enable_tiling``.** ``decode(tiled=True)``: where the
  latent is larger than 32 x 32 (256 px), overlapping 32 x 32 latent tiles every 24, each
  decoded alone, their 64-pixel overlaps cross-faded left-to-right and top-to-bottom in
  raster order (``tiled_decode``); inside each temporal tile when ``framewise`` is on too
  (``_temporal_tiled_decode``). :class:`TileSettings` holds other sizes
  (:data:`AUTHORS_TILES`: the authors' ``AutoencoderKLCausal3D`` tiles, the same spatially,
  64-frame temporal tiles every 48 where diffusers' are 16 / 12);
  :func:`tile_geometry` says which decoder passes a request makes. Encoding is never
  spatially tiled here.
* **Causal convs replicate-pad in every direction** (``HunyuanVideoCausalConv3d``:
  ``F.pad(mode="replicate")`` by ``k//2`` on each side of H and W, ``k-1`` copies of the first
  frame in front of T, none behind). Replicate padding is separable, so edge-padding H and W
  and then letting :class:`vidax.nn.causal_conv.CausalConv3d` (``pad_mode="replicate"``)
  prepend the first frame gives the same input.
* **Temporal resampling keeps the first frame apart.** The stride-2 causal downsampler maps
  ``T`` frames to ``(T-1)//2 + 1`` (the front padding copies frame 0); the upsampler doubles
  every frame but the first (nearest 2x in time), which it only enlarges spatially.
* **Frame-causal mid-block attention.** One head of ``C`` channels over all ``T*H*W`` positions
  (GroupNorm first, residual after), with diffusers' ``prepare_causal_attention_mask``: a
  position of frame ``i`` attends to every position of frames ``<= i``.

Module names mirror diffusers', causal-conv wrappers included (``conv_in.conv.weight`` ->
``conv_in.conv.kernel``). The mapper (``vidax.translator.mappings.hunyuan_video``) names the
one-element ``downsamplers`` / ``upsamplers`` / ``attentions`` lists ``downsampler`` /
``upsampler`` / ``attention`` and ``to_out.0`` ``to_out``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.tiling import blend as _blend  # noqa: F401
from vidax.tiling import counted, spatially_tiled  # noqa: F401  (re-exported)
from vidax.models.hunyuan_video.config import (  # noqa: F401  (the tiling API, re-exported)
    AUTHORS_TILES, TILE_FRAMES, TILE_SIZE, TILE_SPATIAL_STRIDE, TILE_STRIDE,
    HunyuanVideoVAEConfig, SpatialTiles, TileGeometry, TileSettings)
from vidax.nn.attention import attention
from vidax.nn.causal_conv import CausalConv3d
from vidax.nn.group_norm import GroupNorm
from vidax.nn.layers import Conv, KeyGen, Linear

#: diffusers' ``DiagonalGaussianDistribution`` clamps the log-variance to this range.
LOG_VAR_RANGE = (-30.0, 20.0)
#: Every GroupNorm of the model (resnets, attention, ``conv_norm_out``): diffusers hard-codes it.
_EPS = 1e-6


class CausalConv(nnx.Module):
    """Mirrors ``HunyuanVideoCausalConv3d``: replicate-pad ``k//2`` pixels around each frame and
    ``k-1`` copies of the first frame in front, then a Conv3d (stride applied after padding),
    held as ``conv`` like diffusers' wrapper."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int = 3, *, keys: KeyGen,
                 param_dtype, stride: tuple[int, int, int] = (1, 1, 1)):
        self.pad = kernel_size // 2
        self.conv = CausalConv3d(in_ch, out_ch, kernel_size, stride=stride, pad_mode="replicate",
                                 keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.pad:
            p = self.pad
            x = jnp.pad(x, ((0, 0), (0, 0), (p, p), (p, p), (0, 0)), mode="edge")
        return self.conv(x)


class ResnetBlock(nnx.Module):
    """Mirrors ``HunyuanVideoResnetBlockCausal3D``: (GroupNorm, SiLU, 3x3x3 causal conv) twice
    plus the input, through a 1x1x1 causal ``conv_shortcut`` where the width changes."""

    def __init__(self, in_ch: int, out_ch: int, groups: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.norm1 = GroupNorm(groups, in_ch, eps=_EPS, param_dtype=param_dtype)
        self.conv1 = CausalConv(in_ch, out_ch, **kw)
        self.norm2 = GroupNorm(groups, out_ch, eps=_EPS, param_dtype=param_dtype)
        self.conv2 = CausalConv(out_ch, out_ch, **kw)
        self.conv_shortcut = CausalConv(in_ch, out_ch, 1, **kw) if in_ch != out_ch else None

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class Attention(nnx.Module):
    """The mid block's diffusers ``Attention`` (``_from_deprecated_attn_block``, one head of
    ``C`` channels, ``residual_connection=True``): GroupNorm over all positions, q/k/v Linears,
    softmax attention under the frame-causal mask, ``to_out``, plus the input."""

    def __init__(self, ch: int, groups: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.group_norm = GroupNorm(groups, ch, eps=_EPS, param_dtype=param_dtype)
        self.to_q = Linear(ch, ch, **kw)
        self.to_k = Linear(ch, ch, **kw)
        self.to_v = Linear(ch, ch, **kw)
        self.to_out = Linear(ch, ch, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, h, w, c = x.shape
        y = self.group_norm(x).reshape(b, t * h * w, 1, c)
        # diffusers' prepare_causal_attention_mask: key frame <= query frame (tokens in
        # (t, h, w) order, as its permute(0, 2, 3, 4, 1).flatten(1, 3)).
        # Built in the program from an iota (XLA fuses it into the select), not a host
        # constant of L x L booleans (12 GB at 720p untiled).
        frame = jnp.arange(t * h * w, dtype=jnp.int32) // (h * w)
        mask = (frame[None, :] <= frame[:, None])[None, None]
        out = attention(self.to_q(y), self.to_k(y), self.to_v(y), mask=mask)
        return self.to_out(out.reshape(b, t, h, w, c)) + x


class MidBlock(nnx.Module):
    """Mirrors ``HunyuanVideoMidBlock3D`` (``num_layers=1``): resnet, attention, resnet."""

    def __init__(self, ch: int, cfg: HunyuanVideoVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        groups = cfg.norm_num_groups
        self.resnets = nnx.List([ResnetBlock(ch, ch, groups, **kw) for _ in range(2)])
        self.attention = (Attention(ch, groups, **kw) if cfg.mid_block_add_attention else None)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.resnets[0](x)
        if self.attention is not None:
            x = self.attention(x)
        return self.resnets[1](x)


class Downsample(nnx.Module):
    """Mirrors ``HunyuanVideoDownsampleCausal3D``: a 3x3x3 causal conv of stride
    ``(time, space, space)``."""

    def __init__(self, ch: int, factors: tuple[int, int], *, keys: KeyGen, param_dtype):
        t, s = factors
        self.conv = CausalConv(ch, ch, stride=(t, s, s), keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class Upsample(nnx.Module):
    """Mirrors ``HunyuanVideoUpsampleCausal3D``: nearest upsampling by ``(time, space, space)``
    (integer factors: repeats), the first frame spatially only; then a 3x3x3 causal conv."""

    def __init__(self, ch: int, factors: tuple[int, int], *, keys: KeyGen, param_dtype):
        self.time_factor, self.space_factor = factors
        self.conv = CausalConv(ch, ch, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        s = self.space_factor
        x = jnp.repeat(jnp.repeat(x, s, axis=2), s, axis=3)
        x = jnp.concatenate([x[:, :1], jnp.repeat(x[:, 1:], self.time_factor, axis=1)], axis=1)
        return self.conv(x)


class DownBlock(nnx.Module):
    """Mirrors ``HunyuanVideoDownBlock3D``: ``layers_per_block`` resnets, then a downsampler
    where the level resamples."""

    def __init__(self, in_ch: int, out_ch: int, level: int, cfg: HunyuanVideoVAEConfig, *,
                 keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.resnets = nnx.List([ResnetBlock(in_ch if i == 0 else out_ch, out_ch,
                                             cfg.norm_num_groups, **kw)
                                 for i in range(cfg.layers_per_block)])
        factors = cfg.resample(level)
        self.downsampler = Downsample(out_ch, factors, **kw) if factors != (1, 1) else None

    def __call__(self, x: jax.Array) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x)
        return x if self.downsampler is None else self.downsampler(x)


class UpBlock(nnx.Module):
    """Mirrors ``HunyuanVideoUpBlock3D``: ``layers_per_block + 1`` resnets, then an upsampler
    where the level resamples."""

    def __init__(self, in_ch: int, out_ch: int, level: int, cfg: HunyuanVideoVAEConfig, *,
                 keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.resnets = nnx.List([ResnetBlock(in_ch if i == 0 else out_ch, out_ch,
                                             cfg.norm_num_groups, **kw)
                                 for i in range(cfg.layers_per_block + 1)])
        factors = cfg.resample(level)
        self.upsampler = Upsample(out_ch, factors, **kw) if factors != (1, 1) else None

    def __call__(self, x: jax.Array) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x)
        return x if self.upsampler is None else self.upsampler(x)


class Encoder(nnx.Module):
    """Mirrors ``HunyuanVideoEncoder3D``: video -> ``2 * latent_channels`` moments (mean, then
    log-variance) before ``quant_conv``."""

    def __init__(self, cfg: HunyuanVideoVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        chs = cfg.block_out_channels
        self.conv_in = CausalConv(cfg.in_channels, chs[0], **kw)
        self.down_blocks = nnx.List([DownBlock(chs[max(i - 1, 0)], ch, i, cfg, **kw)
                                     for i, ch in enumerate(chs)])
        self.mid_block = MidBlock(chs[-1], cfg, **kw)
        self.conv_norm_out = GroupNorm(cfg.norm_num_groups, chs[-1], eps=_EPS,
                                       param_dtype=param_dtype)
        self.conv_out = CausalConv(chs[-1], 2 * cfg.latent_channels, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        x = self.mid_block(x)
        return self.conv_out(jax.nn.silu(self.conv_norm_out(x)))


class Decoder(nnx.Module):
    """Mirrors ``HunyuanVideoDecoder3D``: latents (after ``post_quant_conv``) -> RGB."""

    def __init__(self, cfg: HunyuanVideoVAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        chs = cfg.block_out_channels[::-1]
        self.conv_in = CausalConv(cfg.latent_channels, chs[0], **kw)
        self.mid_block = MidBlock(chs[0], cfg, **kw)
        self.up_blocks = nnx.List([UpBlock(chs[max(i - 1, 0)], ch, i, cfg, **kw)
                                   for i, ch in enumerate(chs)])
        self.conv_norm_out = GroupNorm(cfg.norm_num_groups, chs[-1], eps=_EPS,
                                       param_dtype=param_dtype)
        self.conv_out = CausalConv(chs[-1], cfg.out_channels, **kw)

    def __call__(self, z: jax.Array) -> jax.Array:
        x = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(jax.nn.silu(self.conv_norm_out(x)))


class HunyuanVideoVAE(nnx.Module):
    """``AutoencoderKLHunyuanVideo`` in Flax NNX: channels-last video, the whole clip in one
    jitted program per direction (diffusers with tiling and framewise processing off), or with
    ``framewise=True`` in diffusers' temporal tiles.

    Use :meth:`encode` and :meth:`decode`; :meth:`moments` / :meth:`reconstruct` are the raw
    computations they jit.
    """

    def __init__(self, config: HunyuanVideoVAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.config = config
        lat = config.latent_channels
        self.encoder = Encoder(config, **kw)
        self.decoder = Decoder(config, **kw)
        self.quant_conv = Conv(2 * lat, 2 * lat, (1, 1, 1), **kw)
        self.post_quant_conv = Conv(lat, lat, (1, 1, 1), **kw)

    def moments(self, video: jax.Array) -> jax.Array:
        """diffusers' ``_encode`` (untiled): ``quant_conv(encoder(video))``, the posterior's
        mean and log-variance concatenated on the channel axis (unclamped)."""
        return self.quant_conv(self.encoder(video))

    def reconstruct(self, z: jax.Array) -> jax.Array:
        """diffusers' ``_decode`` (untiled): ``decoder(post_quant_conv(z))``, unclamped."""
        return self.decoder(self.post_quant_conv(z))

    def encode(self, video, *, normalize: bool = True, return_log_var: bool = False,
               framewise: bool = False):
        """Video ``[B, T, H, W, in_channels]`` in [-1, 1] -> the posterior mean
        ``[B, (T-1)//4 + 1, H/8, W/8, latent_channels]`` (129 frames -> 33; one image -> 1).

        Mirrors ``AutoencoderKLHunyuanVideo.encode`` with tiling and framewise encoding off,
        followed by the pipeline's ``* scaling_factor``; ``normalize=False`` returns diffusers'
        ``latent_dist.mean`` unscaled. With ``return_log_var`` also its log-variance (clamped
        to [-30, 20] as ``DiagonalGaussianDistribution``; never scaled): ``(mean, log_var)``.
        ``framewise=True``: diffusers' default ``use_framewise_encoding`` instead -- above 16
        frames, temporal tiles of 17 frames every 12, blended (``_temporal_tiled_encode``).
        """
        cfg = self.config
        if getattr(video, "ndim", None) != 5 or video.shape[-1] != cfg.in_channels:
            raise VidaxError(f"HunyuanVideo VAE encode takes video [B, T, H, W, "
                             f"{cfg.in_channels}], got shape "
                             f"{tuple(getattr(video, 'shape', ()))}")
        graphdef, state = nnx.split(self)
        if framewise and video.shape[1] > TILE_FRAMES:
            moments = self._temporal_tiled(
                lambda x: _moments(graphdef, state, jnp.asarray(x, jnp.float32)), video,
                TILE_FRAMES // 4, TILE_STRIDE // 4, TILE_FRAMES // 4 - TILE_STRIDE // 4,
                (video.shape[1] - 1) // 4 + 1, scale=4)
        else:
            moments = _moments(graphdef, state, jnp.asarray(video, jnp.float32))
        mean, log_var = jnp.split(moments, 2, axis=-1)
        if normalize:
            mean = mean * cfg.scaling_factor
        return (mean, jnp.clip(log_var, *LOG_VAR_RANGE)) if return_log_var else mean

    def decode(self, latents, *, normalized: bool = True, clamp: bool = True,
               framewise: bool = False, tiled: bool | TileSettings = False,
               on_chunk=None) -> np.ndarray:
        """Latents ``[B, T', h, w, latent_channels]`` -> video ``[B, 4(T'-1) + 1, 8h, 8w,
        out_channels]`` (numpy, float32).

        Mirrors the pipeline's ``latents / scaling_factor`` (skipped with
        ``normalized=False``) and ``AutoencoderKLHunyuanVideo.decode`` with tiling and
        framewise decoding off. The output is clamped to [-1, 1] unless ``clamp=False``
        (diffusers clamps later, in its video post-processing). ``framewise=True``: diffusers'
        default ``use_framewise_decoding`` instead -- above 4 latent frames, temporal tiles of
        5 latent frames every 3, blended (``_temporal_tiled_decode``). ``tiled``: diffusers'
        ``enable_tiling()`` (``True``: its default 256 px tiles every 192 px; or a
        :class:`TileSettings`, whose temporal sizes then also set ``framewise``'s tiles;
        :data:`AUTHORS_TILES` with ``framewise=True`` is the authors' decode) -- where the
        latent is larger than a tile, overlapping spatial tiles, blended (``tiled_decode``);
        with ``framewise`` too, inside each temporal tile, as diffusers does. Each decoder
        pass is one jitted program per tile shape; its output goes to host memory at once
        and the blending runs there. ``on_chunk(done, total)``, if given, is called after
        each decoder pass: progress (:func:`tile_geometry` counts them).
        """
        cfg = self.config
        if getattr(latents, "ndim", None) != 5 or latents.shape[-1] != cfg.latent_channels:
            raise VidaxError(f"HunyuanVideo VAE decode takes latents [B, T, h, w, "
                             f"{cfg.latent_channels}], got shape "
                             f"{tuple(getattr(latents, 'shape', ()))}")
        settings = _settings(tiled)
        spatial = None if settings is None else settings.spatial(cfg.spatial_compression_ratio)
        total = tile_geometry(latents.shape[1:4], framewise=framewise, tiled=tiled,
                              config=cfg).count
        z = jnp.asarray(latents, jnp.float32)
        if normalized:
            z = z / cfg.scaling_factor
        graphdef, state = nnx.split(self)
        one = counted(lambda x: np.asarray(_reconstruct(graphdef, state, x)), total, on_chunk)

        def piece(x):
            if spatial is not None and spatial.applies(*x.shape[2:4]):
                return spatially_tiled(one, x, spatial, cfg.spatial_compression_ratio)
            return one(x)

        temporal = settings or TileSettings()
        frames, stride = temporal.frames, temporal.stride_frames
        if framewise and z.shape[1] > frames // 4:
            video = self._temporal_tiled(piece, z, frames // 4, stride // 4, frames - stride,
                                         4 * (z.shape[1] - 1) + 1, scale=1)
        else:
            video = piece(z)
        return np.clip(video, -1.0, 1.0) if clamp else video

    @staticmethod
    def _temporal_tiled(run, x, tile: int, stride: int, blend: int, length: int, *,
                        scale: int) -> np.ndarray:
        """diffusers' ``_temporal_tiled_encode`` / ``_decode`` over the time axis of ``x``:
        ``run`` on tiles of ``tile + 1`` input frames starting every ``stride * scale``
        (encode, ``scale=4``: video frames; decode, ``scale=1``: latent frames), each tile
        after the first without its first output frame (its causal "image" frame); each tile's
        first ``blend`` output frames cross-faded from the previous tile's last ones (linear
        weights ``j / blend``, as ``blend_t``, in place and in order); then the first tile's
        first ``out_stride + 1`` output frames and every later tile's first ``out_stride``,
        cut to ``length``. ``out_stride`` is ``stride`` for encode (latent frames) and
        ``4 * stride`` for decode (video frames)."""
        in_step, out_stride = stride * scale, stride * 4 // scale
        outs = []
        for i in range(0, x.shape[1], in_step):
            out = np.array(run(x[:, i:i + tile * scale + 1]), np.float32)
            outs.append(out if i == 0 else out[:, 1:])
        kept = []
        for i, out in enumerate(outs):
            if i > 0:
                prev = outs[i - 1]
                n = min(prev.shape[1], out.shape[1], blend)
                for j in range(n):
                    w = j / n
                    out[:, j] = prev[:, prev.shape[1] - n + j] * (1 - w) + out[:, j] * w
            kept.append(out[:, :out_stride + (i == 0)])
        return np.concatenate(kept, axis=1)[:, :length]


# --------------------------------------------------------------------------- spatial tiles
def _settings(tiled) -> TileSettings | None:
    if tiled is True:
        return TileSettings()
    if tiled is False or tiled is None:
        return None
    if not isinstance(tiled, TileSettings):
        raise VidaxError(f"HunyuanVideo VAE decode: tiled must be a bool or a "
                         f"vidax.models.hunyuan_video.vae.TileSettings, got {tiled!r}")
    return tiled


def _temporal_starts(t: int, framewise: bool, settings: TileSettings | None
                     ) -> list[tuple[int, int]]:
    """``(first, length)`` latent frames of each framewise tile (diffusers'
    ``_temporal_tiled_decode``: above ``frames / 4`` latent frames, ``frames / 4 + 1`` every
    ``stride_frames / 4``); one span otherwise."""
    settings = settings or TileSettings()
    tile, stride = settings.frames // 4, settings.stride_frames // 4
    if not framewise or t <= tile:
        return [(0, t)]
    return [(i, min(tile + 1, t - i)) for i in range(0, t, stride)]


def tile_geometry(latent_shape, *, framewise: bool = False, tiled=False,
                  config: HunyuanVideoVAEConfig | None = None) -> TileGeometry:
    """The decoder passes :meth:`HunyuanVideoVAE.decode` makes for latents ``(T, h, w[, C])``
    with these ``framewise`` / ``tiled`` options (for memory estimates)."""
    ratio = 8 if config is None else config.spatial_compression_ratio
    t, h, w = latent_shape[:3]
    settings = _settings(tiled)
    spatial = None if settings is None else settings.spatial(ratio)
    shapes = []
    for _, n in _temporal_starts(t, framewise, settings):
        if spatial is not None and spatial.applies(h, w):
            shapes += [(n, th, tw) for _, _, th, tw in spatial.grid(h, w)]
        else:
            shapes.append((n, h, w))
    largest = max(shapes, key=lambda s: s[0] * s[1] * s[2])
    return TileGeometry(largest, (4 * (largest[0] - 1) + 1, ratio * largest[1],
                                  ratio * largest[2]), len(shapes), tuple(dict.fromkeys(shapes)))


# One jitted program per direction and input shape.
@functools.partial(jax.jit, static_argnums=0)
def _moments(graphdef, state, x):
    return nnx.merge(graphdef, state).moments(x)


@functools.partial(jax.jit, static_argnums=0)
def _reconstruct(graphdef, state, z):
    return nnx.merge(graphdef, state).reconstruct(z)
