"""The LTX-Video latent upsampler, after the authors' ``LatentUpsampler``.

Mirrors Lightricks/LTX-Video ``ltx_video/models/autoencoders/latent_upsampler.py`` at
``dims=3`` (every released upsampler: ``ltxv-spatial-upscaler-0.9.8.safetensors`` doubles H and
W of un-normalised VAE latents between the two passes of the multi-scale pipeline; the
temporal upscaler doubles the frames). Module names are the authors'; their
``upsampler = nn.Sequential(conv, PixelShuffleND)`` holds one weight, ``upsampler.0`` here
``upsampler.conv``.

The computation: ``initial_conv`` (3x3x3, zero padding in every axis: a plain Conv3d, not
causal), GroupNorm(32), SiLU; ``num_blocks_per_stage`` ResBlocks (conv, GroupNorm, SiLU, conv,
GroupNorm, then SiLU of the sum with the input); the upsampling; as many ResBlocks again;
``final_conv``. Spatial upsampling runs a 3x3 *2-D* conv per frame (4 x mid channels) and a
2x2 pixel shuffle; temporal (or both) a 3-D conv (2x / 8x channels), a pixel shuffle, and the
first output frame dropped (the causal first frame stays one frame). GroupNorm eps 1e-5.

LTX-2.x (ltx-core 1.0.0 ``ltx_core/model/upsampler``, registered as ``ltx2_5`` / ``upsampler``
with :class:`~vidax.models.ltx_video.config.LTX2UpsamplerConfig`) is the same model plus one
option: with ``rational_resampler`` (spatial-only upsamplers) the upsampling is ltx-core's
``SpatialRationalResampler`` at ``spatial_scale = up / down`` -- the per-frame 3x3 conv to
``up**2`` x mid channels, an ``up`` x ``up`` pixel shuffle, then ``BlurDownsample``: a
depthwise 5x5 conv with the stored ``upsampler.blur_down.kernel`` (the normalised binomial
``[1, 4, 6, 4, 1]`` outer product), zero padding 2, stride ``down`` (skipped at stride 1, as
ltx-core does). Its modules are named ``upsampler.conv`` and ``upsampler.blur_down`` there,
so files with it need no rename. x1.5 turns ``H`` into ``ceil(3H / 2)``.

Input: **un-normalised** latents, channels-last ``[B, F, H, W, C]``; the caller normalises
around the call as ltx-core's ``upsample_video`` does (``per_channel_statistics``
un-normalise, upsample, normalise).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx_video.config import GROUPS, LTXVideoUpsamplerConfig
from vidax.models.ltx_video.vae import depth_to_space
from vidax.nn.group_norm import GroupNorm
from vidax.nn.layers import Conv, KeyGen


class ResBlock(nnx.Module):
    """The authors' upsampler ``ResBlock``."""

    def __init__(self, channels: int, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, padding=1, param_dtype=param_dtype)
        self.conv1 = Conv(channels, channels, (3, 3, 3), **kw)
        self.norm1 = GroupNorm(GROUPS, channels, param_dtype=param_dtype)
        self.conv2 = Conv(channels, channels, (3, 3, 3), **kw)
        self.norm2 = GroupNorm(GROUPS, channels, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.silu(self.norm1(self.conv1(x)))
        return jax.nn.silu(self.norm2(self.conv2(h)) + x)


class Upsample(nnx.Module):
    """The authors' ``upsampler`` Sequential: ``conv`` then the pixel shuffle."""

    def __init__(self, channels: int, stride: tuple[int, int, int], *, keys: KeyGen,
                 param_dtype):
        self.stride = stride
        factor = stride[0] * stride[1] * stride[2]
        kernel = (3, 3) if stride[0] == 1 else (3, 3, 3)   # spatial only: a per-frame Conv2d
        self.conv = Conv(channels, factor * channels, kernel, keys=keys, padding=1,
                         param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, f = x.shape[:2]
        if self.stride[0] == 1:
            y = self.conv(x.reshape(b * f, *x.shape[2:]))
            return depth_to_space(y.reshape(b, f, *y.shape[1:]), self.stride)
        return depth_to_space(self.conv(x), self.stride)[:, 1:]


def binomial_kernel(size: int = 5) -> jnp.ndarray:
    """ltx-core's ``BlurDownsample`` kernel ``[1, 1, size, size]``: the outer product of the
    binomial row ``C(size-1, k)``, normalised to sum 1 (float32)."""
    row = jnp.asarray([math.comb(size - 1, k) for k in range(size)], jnp.float32)
    k2d = row[:, None] * row[None, :]
    return (k2d / k2d.sum())[None, None]


class BlurDownsample(nnx.Module):
    """ltx-core's ``BlurDownsample(dims=2, stride)``: the stored ``kernel`` ``[1, 1, 5, 5]``
    applied depthwise (every channel), zero padding ``5 // 2``, stride ``stride`` in H and W;
    the identity at stride 1."""

    def __init__(self, stride: int, *, param_dtype):
        self.stride = stride
        self.kernel = nnx.Param(binomial_kernel().astype(param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:   # [N, H, W, C]
        if self.stride == 1:
            return x
        c, k = x.shape[-1], self.kernel[...]
        size = k.shape[-1]
        w = jnp.broadcast_to(k[0, 0, :, :, None, None], (size, size, 1, c)).astype(x.dtype)
        pad = size // 2
        return jax.lax.conv_general_dilated(
            x, w, (self.stride, self.stride), ((pad, pad), (pad, pad)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=c,
            preferred_element_type=jnp.float32).astype(x.dtype)


class RationalResampler(nnx.Module):
    """ltx-core's ``SpatialRationalResampler``, per frame: ``conv`` (3x3, ``up**2`` x
    channels), an ``up`` x ``up`` pixel shuffle, ``blur_down`` at stride ``down``."""

    def __init__(self, channels: int, up: int, down: int, *, keys: KeyGen, param_dtype):
        self.up = up
        self.conv = Conv(channels, up * up * channels, (3, 3), keys=keys, padding=1,
                         param_dtype=param_dtype)
        self.blur_down = BlurDownsample(down, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, f = x.shape[:2]
        y = self.conv(x.reshape(b * f, *x.shape[2:]))
        y = depth_to_space(y[:, None], (1, self.up, self.up))[:, 0]
        y = self.blur_down(y)
        return y.reshape(b, f, *y.shape[1:])


class LTXVideoLatentUpsampler(nnx.Module):
    """``LatentUpsampler(dims=3)``: un-normalised latents ``[B, F, H, W, C]`` ->
    ``[B, F', sH, sW, C]`` (spatial: ``s = 2``, or ``ceil(s H)`` with the rational resampler;
    ``F' = 2F - 1`` when temporal)."""

    def __init__(self, config: LTXVideoUpsamplerConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        cfg = self.config = config
        mid, kw = cfg.mid_channels, dict(keys=keys, param_dtype=param_dtype)
        self.initial_conv = Conv(cfg.in_channels, mid, (3, 3, 3), padding=1, **kw)
        self.initial_norm = GroupNorm(GROUPS, mid, param_dtype=param_dtype)
        self.res_blocks = nnx.List([ResBlock(mid, **kw) for _ in range(cfg.num_blocks_per_stage)])
        self.upsampler = (RationalResampler(mid, *cfg.rational, **kw)
                          if cfg.uses_rational_resampler else Upsample(mid, cfg.stride, **kw))
        self.post_upsample_res_blocks = nnx.List([ResBlock(mid, **kw)
                                                  for _ in range(cfg.num_blocks_per_stage)])
        self.final_conv = Conv(mid, cfg.in_channels, (3, 3, 3), padding=1, **kw)

    def __call__(self, latents: jax.Array) -> jax.Array:
        latents = jnp.asarray(latents)
        if latents.ndim != 5 or latents.shape[-1] != self.config.in_channels:
            raise VidaxError(f"LTX-Video latent upsampler input must be [B, F, H, W, "
                             f"{self.config.in_channels}], got {tuple(latents.shape)}")
        x = jax.nn.silu(self.initial_norm(self.initial_conv(latents)))
        for block in self.res_blocks:
            x = block(x)
        x = self.upsampler(x)
        for block in self.post_upsample_res_blocks:
            x = block(x)
        return self.final_conv(x)
