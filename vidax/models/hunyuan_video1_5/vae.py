"""The HunyuanVideo-1.5 VAE, after the authors' ``AutoencoderKLConv3D``
(``hyvideo/models/autoencoders/hunyuanvideo_15_vae.py``; diffusers' ``AutoencoderKLHunyuanVideo15``
computes the same thing under other module names).

A causal 3D-conv autoencoder with 16x16 spatial and 4x temporal compression: video
``[B, T, H, W, 3]`` in [-1, 1] <-> latents ``[B, (T-1)/4 + 1, H/16, W/16, 32]`` (121 frames <->
31 latent frames: the first frame alone, then groups of 4).

What decides the numbers, beyond the layers themselves:

* **The whole clip in one pass.** With tiling off (the default of both the authors' class and
  diffusers'), ``encode`` / ``decode`` run the encoder and decoder on every frame at once; the
  mid-block attention sees all of them. This port does the same: one jitted program per
  direction and input shape.
* **Spatial tiles (decode), as the authors' pipeline runs it.** The authors' pipeline always
  decodes inside ``memory_efficient_context`` (tiling and batch slicing on) with 256 px tiles,
  overlap 0.125 on GPUs above 21 GB (128 px, 0.25 below). ``decode(tiled=True)`` does that:
  where the latent is larger than 16 x 16, 16 x 16 latent tiles every 14, each decoded alone
  over *all* frames (neither the authors nor diffusers tile this VAE in time: the authors'
  temporal tiling raises), their 32-pixel overlaps cross-faded left-to-right and
  top-to-bottom in raster order (``spatial_tiled_decode``, the same computation as diffusers'
  ``tiled_decode``). :class:`TileSettings` holds other sizes (:data:`DIFFUSERS_TILES`:
  diffusers' ``enable_tiling()`` defaults, 256 px and 0.25); :func:`tile_geometry` says which
  decoder passes a request makes. Encoding is never tiled here.
* **RMS_norm is an L2 normalisation** over channels (``F.normalize``, a 1e-12 floor on the
  norm) times ``sqrt(C)`` and ``gamma``; no bias, no mean. It is
  :class:`vidax.models.wan2_1.vae.RMSNorm`, the same function.
* **Causal convs replicate-pad** ``k//2`` around each frame and ``k-1`` copies of the first
  frame in front (:class:`vidax.models.hunyuan_video.vae.CausalConv`, the 1.0 VAE's).
* **DC-AE resampling.** Each downsampler convolves to ``out / f`` channels (``f`` = 4 for
  space, 8 for space-time) and folds each 2x2(x2) neighbourhood into channels
  (``(r1 r2 r3 c)`` order: the offsets outermost); it adds a parameter-free shortcut, the
  input folded the same way and averaged over groups of consecutive channels. Upsamplers do
  the reverse: conv to ``out * f`` channels, unfold, plus the input's channels repeated
  (``repeat_interleave``) and unfolded. In time the first frame is resampled alone, in space
  only: on the way down it is folded 2x2 and duplicated to fill the channels, on the way up
  the first half of its unfolded channels is kept (the shortcut repeats half as often).
* **Shortcuts around the ends.** The encoder's output is ``conv_out(...)`` plus the mid-block
  activations averaged over groups of ``C / (2 * latent)`` consecutive channels; the decoder's
  input is ``conv_in(z)`` plus ``z`` with each channel repeated ``C / latent`` times.
* **Frame-causal mid-block attention.** One head of ``C`` channels over all ``T*H*W``
  positions (RMS_norm first, 1x1x1-conv q/k/v/proj_out, residual after); a position of frame
  ``i`` attends to every position of frames ``<= i``.
* No quant convs; the latents are the posterior mean times ``scaling_factor`` (1.03682), no
  shift.

Module names mirror the authors' (``encoder.down.N.block.M``, ``down.N.downsample``,
``mid.block_1`` / ``attn_1`` / ``block_2``, ``attn_1.q`` ...), causal-conv wrappers included
(``conv_in.conv.weight`` -> ``conv_in.conv.kernel``); the mapper
(``vidax.translator.mappings.hunyuan_video1_5``) only turns each ``gamma [C, 1, 1, 1]`` into a
``scale [C]``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.hunyuan_video.vae import CausalConv
from vidax.tiling import TileGeometry, counted, spatially_tiled
from vidax.models.hunyuan_video1_5.config import (  # noqa: F401  (the tiling API, re-exported)
    AUTHORS_SMALL_GPU_TILES, AUTHORS_TILES, DIFFUSERS_TILES, HunyuanVideo15VAEConfig, Resampler,
    TileSettings)
from vidax.models.wan2_1.vae import RMSNorm
from vidax.nn.attention import attention
from vidax.nn.layers import Conv, KeyGen

#: diffusers' ``DiagonalGaussianDistribution`` clamps the log-variance to this range.
LOG_VAR_RANGE = (-30.0, 20.0)


# ------------------------------------------------------------------------- layout helpers
def _fold(x: jax.Array, rt: int) -> jax.Array:
    """The authors' ``rearrange("b c (f r1) (h r2) (w r3) -> b (r1 r2 r3 c) f h w")``,
    channels-last, ``r2 = r3 = 2``: each ``rt x 2 x 2`` block of positions becomes channels,
    offsets outermost."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // rt, rt, h // 2, 2, w // 2, 2, c)
    x = x.transpose(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(b, t // rt, h // 2, w // 2, rt * 4 * c)


def _unfold(x: jax.Array, rt: int) -> jax.Array:
    """The authors' ``rearrange("b (r1 r2 r3 c) f h w -> b c (f r1) (h r2) (w r3)")``,
    channels-last: the inverse of :func:`_fold`."""
    b, t, h, w, c = x.shape
    c //= rt * 4
    x = x.reshape(b, t, h, w, rt, 2, 2, c)
    x = x.transpose(0, 1, 4, 2, 5, 3, 6, 7)
    return x.reshape(b, t * rt, h * 2, w * 2, c)


def _group_mean(x: jax.Array, channels: int) -> jax.Array:
    """``x.view(B, channels, group, ...).mean(2)``: averages of consecutive channels."""
    return x.reshape(*x.shape[:-1], channels, x.shape[-1] // channels).mean(axis=-1)


# ------------------------------------------------------------------------------- modules
class ResnetBlock(nnx.Module):
    """Mirrors the authors' ``ResnetBlock`` (width kept): (RMS_norm, SiLU, 3x3x3 causal
    conv) twice, plus the input."""

    def __init__(self, ch: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.norm1 = RMSNorm(ch, param_dtype=param_dtype)
        self.conv1 = CausalConv(ch, ch, **kw)
        self.norm2 = RMSNorm(ch, param_dtype=param_dtype)
        self.conv2 = CausalConv(ch, ch, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        return x + self.conv2(jax.nn.silu(self.norm2(h)))


class AttnBlock(nnx.Module):
    """Mirrors the authors' ``AttnBlock``: RMS_norm, 1x1x1-conv q/k/v, one head of ``C``
    channels under the frame-causal mask (``prepare_causal_attention_mask``), ``proj_out``,
    plus the input."""

    def __init__(self, ch: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.norm = RMSNorm(ch, param_dtype=param_dtype)
        self.q = Conv(ch, ch, (1, 1, 1), **kw)
        self.k = Conv(ch, ch, (1, 1, 1), **kw)
        self.v = Conv(ch, ch, (1, 1, 1), **kw)
        self.proj_out = Conv(ch, ch, (1, 1, 1), **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, h, w, c = x.shape
        y = self.norm(x)
        q, k, v = (proj(y).reshape(b, t * h * w, 1, c) for proj in (self.q, self.k, self.v))
        # Tokens in (f, h, w) order: key frame <= query frame.
        # Built in the program from an iota (XLA fuses it into the select), not a host
        # constant of L x L booleans (12 GB at 720p untiled).
        frame = jnp.arange(t * h * w, dtype=jnp.int32) // (h * w)
        mask = (frame[None, :] <= frame[:, None])[None, None]
        out = attention(q, k, v, mask=mask).reshape(b, t, h, w, c)
        return x + self.proj_out(out)


class MidBlock(nnx.Module):
    """The authors' ``mid``: ``block_1``, ``attn_1``, ``block_2``."""

    def __init__(self, ch: int, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.block_1 = ResnetBlock(ch, **kw)
        self.attn_1 = AttnBlock(ch, **kw)
        self.block_2 = ResnetBlock(ch, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.block_2(self.attn_1(self.block_1(x)))


class Downsample(nnx.Module):
    """Mirrors the authors' ``Downsample``: a causal conv to ``out / factor`` channels, folded
    into ``out`` channels, plus the folded input averaged over groups of
    ``factor * in / out`` channels. With time, the first frame is folded in space only (its
    conv output duplicated, its shortcut averaged over half-size groups)."""

    def __init__(self, r: Resampler, *, keys: KeyGen, param_dtype):
        self.out_ch, self.temporal = r.out_ch, r.temporal
        self.conv = CausalConv(r.in_ch, r.out_ch // r.factor, keys=keys,
                               param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv(x)
        if not self.temporal:
            return _fold(h, 1) + _group_mean(_fold(x, 1), self.out_ch)
        h_first = _fold(h[:, :1], 1)
        h = jnp.concatenate([jnp.concatenate([h_first, h_first], axis=-1),
                             _fold(h[:, 1:], 2)], axis=1)
        shortcut = jnp.concatenate([_group_mean(_fold(x[:, :1], 1), self.out_ch),
                                    _group_mean(_fold(x[:, 1:], 2), self.out_ch)], axis=1)
        return h + shortcut


class Upsample(nnx.Module):
    """Mirrors the authors' ``Upsample``: a causal conv to ``out * factor`` channels,
    unfolded into ``out`` channels, plus the input with each channel repeated
    ``factor * out / in`` times and unfolded. With time, the first frame is unfolded in space
    only (the first half of its conv channels kept; its input repeated half as often, after
    unfolding, as the later frames are)."""

    def __init__(self, r: Resampler, *, keys: KeyGen, param_dtype):
        self.temporal = r.temporal
        self.repeats = r.factor * r.out_ch // r.in_ch
        self.conv = CausalConv(r.in_ch, r.out_ch * r.factor, keys=keys,
                               param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv(x)
        if not self.temporal:
            return _unfold(h, 1) + _unfold(jnp.repeat(x, self.repeats, axis=-1), 1)
        h_first = _unfold(h[:, :1], 1)
        h = jnp.concatenate([h_first[..., :h_first.shape[-1] // 2], _unfold(h[:, 1:], 2)],
                            axis=1)
        shortcut = jnp.concatenate(
            [jnp.repeat(_unfold(x[:, :1], 1), self.repeats // 2, axis=-1),
             jnp.repeat(_unfold(x[:, 1:], 2), self.repeats, axis=-1)], axis=1)
        return h + shortcut


class Level(nnx.Module):
    """One encoder ``down.N`` / decoder ``up.N``: residual ``block``s, then the resampler
    (``downsample`` / ``upsample``) where the level has one."""

    def __init__(self, ch: int, n_blocks: int, resampler: Resampler | None, kind: str, *,
                 keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.block = nnx.List([ResnetBlock(ch, **kw) for _ in range(n_blocks)])
        sampler = None
        if resampler is not None:
            sampler = (Downsample if kind == "down" else Upsample)(resampler, **kw)
        self.kind = kind
        setattr(self, f"{kind}sample", sampler)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.block:
            x = block(x)
        sampler = getattr(self, f"{self.kind}sample")
        return x if sampler is None else sampler(x)


class Encoder(nnx.Module):
    """Mirrors the authors' ``Encoder``: ``conv_in``, the ``down`` levels, ``mid``, then
    RMS_norm, SiLU, ``conv_out`` plus the channel-group-mean shortcut."""

    def __init__(self, cfg: HunyuanVideo15VAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        chs, top = cfg.block_out_channels, cfg.block_out_channels[-1]
        self.out_ch = 2 * cfg.latent_channels
        self.conv_in = CausalConv(cfg.in_channels, chs[0], **kw)
        self.down = nnx.List([Level(ch, cfg.layers_per_block, r, "down", **kw)
                              for ch, r in zip(chs, cfg.downsamplers())])
        self.mid = MidBlock(top, **kw)
        self.norm_out = RMSNorm(top, param_dtype=param_dtype)
        self.conv_out = CausalConv(top, self.out_ch, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv_in(x)
        for level in self.down:
            x = level(x)
        x = self.mid(x)
        return self.conv_out(jax.nn.silu(self.norm_out(x))) + _group_mean(x, self.out_ch)


class Decoder(nnx.Module):
    """Mirrors the authors' ``Decoder``: ``conv_in`` plus the latent's channels repeated,
    ``mid``, the ``up`` levels (widest first, ``layers_per_block + 1`` blocks each), then
    RMS_norm, SiLU, ``conv_out``."""

    def __init__(self, cfg: HunyuanVideo15VAEConfig, *, keys: KeyGen, param_dtype):
        kw = {"keys": keys, "param_dtype": param_dtype}
        chs = cfg.block_out_channels[::-1]
        self.repeats = chs[0] // cfg.latent_channels
        self.conv_in = CausalConv(cfg.latent_channels, chs[0], **kw)
        self.mid = MidBlock(chs[0], **kw)
        self.up = nnx.List([Level(ch, cfg.layers_per_block + 1, r, "up", **kw)
                            for ch, r in zip(chs, cfg.upsamplers())])
        self.norm_out = RMSNorm(chs[-1], param_dtype=param_dtype)
        self.conv_out = CausalConv(chs[-1], cfg.out_channels, **kw)

    def __call__(self, z: jax.Array) -> jax.Array:
        x = self.mid(self.conv_in(z) + jnp.repeat(z, self.repeats, axis=-1))
        for level in self.up:
            x = level(x)
        return self.conv_out(jax.nn.silu(self.norm_out(x)))


class HunyuanVideo15VAE(nnx.Module):
    """``AutoencoderKLConv3D`` in Flax NNX: channels-last video, the whole clip in one jitted
    program per direction (tiling off, as the class defaults).

    Use :meth:`encode` and :meth:`decode`; :meth:`moments` / :meth:`reconstruct` are the raw
    computations they jit.
    """

    def __init__(self, config: HunyuanVideo15VAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        kw = {"keys": keys, "param_dtype": param_dtype}
        self.config = config
        self.encoder = Encoder(config, **kw)
        self.decoder = Decoder(config, **kw)

    def moments(self, video: jax.Array) -> jax.Array:
        """``encoder(video)``: the posterior's mean and log-variance concatenated on the
        channel axis (unclamped)."""
        return self.encoder(video)

    def reconstruct(self, z: jax.Array) -> jax.Array:
        """``decoder(z)``, unclamped."""
        return self.decoder(z)

    def encode(self, video, *, normalize: bool = True, return_log_var: bool = False):
        """Video ``[B, T, H, W, in_channels]`` in [-1, 1] (``T`` = 4k + 1, ``H``, ``W``
        multiples of 16) -> the posterior mean ``[B, (T-1)/4 + 1, H/16, W/16, latent]``.

        Mirrors ``AutoencoderKLConv3D.encode`` (tiling off) and the posterior's mean, times
        ``scaling_factor`` as the pipeline does; ``normalize=False`` returns the mean
        unscaled. With ``return_log_var`` also its log-variance (clamped to [-30, 20] as
        ``DiagonalGaussianDistribution``; never scaled): ``(mean, log_var)``.
        """
        cfg = self.config
        rt, rs = cfg.temporal_compression_ratio, cfg.spatial_compression_ratio
        shape = tuple(getattr(video, "shape", ()))
        if (len(shape) != 5 or shape[-1] != cfg.in_channels or (shape[1] - 1) % rt
                or shape[2] % rs or shape[3] % rs):
            raise VidaxError(f"HunyuanVideo-1.5 VAE encode takes video [B, T, H, W, "
                             f"{cfg.in_channels}] with T = {rt}k + 1 and H, W multiples of "
                             f"{rs}; got shape {shape}")
        graphdef, state = nnx.split(self)
        moments = _moments(graphdef, state, jnp.asarray(video, jnp.float32))
        mean, log_var = jnp.split(moments, 2, axis=-1)
        if normalize:
            mean = mean * cfg.scaling_factor
        return (mean, jnp.clip(log_var, *LOG_VAR_RANGE)) if return_log_var else mean

    def decode(self, latents, *, normalized: bool = True, clamp: bool = True,
               tiled: bool | TileSettings = False, on_chunk=None) -> np.ndarray:
        """Latents ``[B, T', h, w, latent]`` -> video ``[B, 4(T'-1) + 1, 16h, 16w,
        out_channels]`` (numpy, float32).

        Mirrors the pipeline's ``latents / scaling_factor`` (skipped with
        ``normalized=False``) and ``AutoencoderKLConv3D.decode``: tiling off by default (the
        class default); ``tiled=True``: the authors' pipeline's (``memory_efficient_context``
        with :data:`AUTHORS_TILES`, 256 px tiles, overlap 0.125), or a :class:`TileSettings`
        (:data:`DIFFUSERS_TILES`: diffusers' ``enable_tiling()``). Tiled, where the latent
        is larger than one tile: overlapping spatial tiles over all frames, one sample at a
        time (the context's ``enable_slicing``), one jitted program per tile shape, each
        tile's output on the host at once, blended there (``spatial_tiled_decode`` /
        ``tiled_decode``). ``on_chunk(done, total)``, if given, is
        called after each decoder pass (:func:`tile_geometry` counts them). The output is
        clamped to [-1, 1] unless ``clamp=False`` (the pipelines clamp in their
        post-processing).
        """
        cfg = self.config
        shape = tuple(getattr(latents, "shape", ()))
        if len(shape) != 5 or shape[-1] != cfg.latent_channels or shape[1] < 1:
            raise VidaxError(f"HunyuanVideo-1.5 VAE decode takes latents [B, T, h, w, "
                             f"{cfg.latent_channels}]; got shape {shape}")
        settings = _settings(tiled)
        spatial = None if settings is None else settings.spatial(cfg.spatial_compression_ratio)
        slices = spatial is not None and spatial.applies(*shape[2:4])
        total = tile_geometry(shape[1:4], tiled=tiled, config=cfg).count * (
            shape[0] if slices else 1)
        z = jnp.asarray(latents, jnp.float32)
        if normalized:
            z = z / cfg.scaling_factor
        graphdef, state = nnx.split(self)
        one = counted(lambda x: np.asarray(_reconstruct(graphdef, state, x)), total, on_chunk)

        if slices:   # one sample at a time, as memory_efficient_context's slicing
            video = np.concatenate([spatially_tiled(one, z[i:i + 1], spatial,
                                                    cfg.spatial_compression_ratio)
                                    for i in range(shape[0])])
        else:
            video = one(z)
        return np.clip(video, -1.0, 1.0) if clamp else video


# --------------------------------------------------------------------------- spatial tiles
def _settings(tiled) -> TileSettings | None:
    if tiled is True:
        return AUTHORS_TILES
    if tiled is False or tiled is None:
        return None
    if not isinstance(tiled, TileSettings):
        raise VidaxError(f"HunyuanVideo-1.5 VAE decode: tiled must be a bool or a "
                         f"vidax.models.hunyuan_video1_5.vae.TileSettings, got {tiled!r}")
    return tiled


def tile_geometry(latent_shape, *, tiled=False,
                  config: HunyuanVideo15VAEConfig | None = None) -> TileGeometry:
    """The decoder passes :meth:`HunyuanVideo15VAE.decode` makes for latents ``(T, h, w[, C])``
    (for memory estimates), per sample: with ``tiled`` on and the latent larger than a tile,
    one per spatial tile, each over every frame of one sample (nobody tiles this VAE in time;
    ``decode`` then runs the samples of a batch one after another); else one pass over the
    whole batch."""
    ratio = 16 if config is None else config.spatial_compression_ratio
    t, h, w = latent_shape[:3]
    settings = _settings(tiled)
    spatial = None if settings is None else settings.spatial(ratio)
    if spatial is not None and spatial.applies(h, w):
        shapes = [(t, th, tw) for _, _, th, tw in spatial.grid(h, w)]
    else:
        shapes = [(t, h, w)]
    largest = max(shapes, key=lambda s: s[1] * s[2])
    return TileGeometry(largest, (4 * (t - 1) + 1, ratio * largest[1], ratio * largest[2]),
                        len(shapes), tuple(dict.fromkeys(shapes)))


# One jitted program per direction and input shape.
@functools.partial(jax.jit, static_argnums=0)
def _moments(graphdef, state, x):
    return nnx.merge(graphdef, state).moments(x)


@functools.partial(jax.jit, static_argnums=0)
def _reconstruct(graphdef, state, z):
    return nnx.merge(graphdef, state).reconstruct(z)
