"""LTX-2.5's diffusion video VAE (``ltx-2.5-video-vae-bf16``, ``CausalDiffusionVAE``).

The encoder is the conv VAE's (:class:`vidax.models.ltx_video.vae.Encoder` at the 2.3 stack);
the decoder is ltx-core's ``DiffusionVideoDecoder`` (the authors' ``NADiffusionDecoder``),
computed as diffusers 0.42.1 ``LTX2VideoDiffusionDecoder3d`` does
(``models/autoencoders/ltx2_diffusion_decoder.py``, the tested oracle). Module names are the
authors' after their loader's renames (ltx-core @400fd31 ``model_configurator.py``,
``_build_diffusion_vae_decoder_sd_ops``): the fused ``attn.qkv`` is split into
``attn.qkv.to_q / to_k / to_v`` and ``t_embedder.mlp.0 / .2`` are
``t_embedder.timestep_embedder.linear_1 / linear_2``.

Layout: channels-last. Latents ``[B, F', H', W', 128]`` -> video ``[B, 1 + 8(F'-1), 32 H',
32 W', 3]``, unclamped (nominally [-1, 1]).

The decoder, as the oracle computes it:

* The last latent frame is repeated ``(K_t // 2) * 2`` times (stage 1's kernel; 2) at the
  end; ``conv_in`` (a Linear) widens to stage 1; four deterministic stages of ``NABlock``
  (pre-norm RMSNorm with weight, eps 1e-6; neighborhood attention; pre-norm SwiGLU
  ``w_down(silu(w_gate x) * w_up x)``, hidden ``4C`` rounded up to 16, no biases), each
  followed by ``upsamples.i.proj`` (a Linear to ``prod(stride) C / r``) and a pixel shuffle
  (channel ``c * prod(s) + (i_t s_h + i_h) s_w + i_w``); a time stride of 2 drops the first
  output frame. After stage 4 the ghost frames (``pad * 8`` pixel frames) are cropped, keeping
  at least stage 5's ``K_t`` frames: the result is the stage-5 context
  ``[B, F, H/4, W/4, C_ctx]``.
* Stage 5 denoises patchified pixels (patch 4, channel ``c*16 + w_off*4 + h_off``):
  ``conv_in_x_t``, 8 ``DiffusionNABlock``: ``h += context_proj(ctx)``;
  ``h += attn(norm1(h) (1 + scale_msa) + shift_msa)``; ``h += mlp(norm2(h) (1 + scale_mlp) +
  shift_mlp)``, where the 7 rows of ``shared_adaln.proj(silu(t_embedder(1000 t)))`` +
  the block's ``scale_shift_table [7, C]`` are read as (scale_msa, shift_msa, -, scale_mlp,
  shift_mlp, -, -) (ungated residuals: the authors fold static gates into the weights at
  load; this file has none). Then ``norm_out``, ``conv_out``, unpatchify.
* Sampling: ``num_steps`` timesteps ``linspace(1, 1/n, n)`` from the noise ``x_1``; with
  ``model_output_type="x0"`` and one step (the release) the prediction is the video;
  otherwise Euler steps ``x <- x - (t - t_next) v`` with ``v = (x - x0) / t`` for an x0
  model, to ``t = 0``.
* Attention: heads of 64; q/k RMSNorm over the head (weight, eps 1e-6), q scaled by
  ``1/sqrt(64)``, then a 3-axis RoPE (interleaved pairs; head dims split ``(d_t, d_hw,
  d_hw)`` = (16, 24, 24) for 64; positions are the grid's 0-based indices; theta 1e4).
  Each query attends to a ``K_t x K_h x K_w`` window that is centered where it fits and
  **shifted inward at the borders** (NATTEN's ``na3d``, diffusers' flex mask): along an axis
  of length n the window of position q starts at ``clip(q - K // 2, 0, n - K)``. Every grid
  axis must be at least its kernel: latents under ``min_latent_shape`` (3 x 7 x 7 latent
  frames x rows x columns for LTX-2.5) are edge-padded first and the pixels cropped back, as
  the authors' decoder does (diffusers raises on such grids, and decodes 2-frame latents
  unpadded, which the authors pad to 3: there the two differ and vidax is the authors').
  Checked against the authors' ltx-core @400fd31 ``DiffusionVideoDecoder`` (its eager
  neighborhood attention) outside the test suite, which has diffusers as its oracle.

Neighborhood attention here is blocked: the queries are cut into blocks (``NA_BLOCK``, at
most 4 x 8 x 8 tokens); the windows of a block's queries all lie in one box of
``block + K - 1`` positions per axis, so each block attends densely to its box under the exact
window mask (``lax.map`` over the blocks). Its cost per query is the box size, not the
whole grid: at 121 frames, 512 x 768, stage 5 (K = 11^3) has 3.0M tokens and each reads a
box of 14 x 18 x 18 = 4,536 keys (a dense mask would be 3.0M keys, and a ``[L, L]`` mask of
9e12 entries); NATTEN reads exactly 1,331.

Decode noise: :meth:`LTX2DiffusionVAE.decode` takes the noise ``x_1`` as an array
``[B, F, H, W, 3]`` (standard normal, what diffusers draws as ``randn(B, 3, F, H, W)``,
channels-last) or a PRNG ``key`` (``jax.random.normal(key, shape)``); :meth:`noise_shape`
gives the shape.

Precision: the computation runs in the latents' dtype; parameters are cast at use, norms
and attention logits / softmax in float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx2_5.config import LTX2DiffusionDecoderConfig, LTX2DiffusionVAEConfig
from vidax.models.ltx_video.dit import CombinedTimestepEmbedding
from vidax.models.ltx_video.vae import (Encoder, PerChannelStatistics, depth_to_space, patchify,
                                        unpatchify)
from vidax.nn.attention import attention
from vidax.nn.layers import KeyGen, Linear, RMSNorm, init_param
from vidax.nn.rope import apply_rope, axial_rope

_F32 = jnp.float32
NORM_EPS = 1e-6
ROPE_THETA = 10000.0
#: Query block of the blocked neighborhood attention (T, H, W), capped by the grid.
NA_BLOCK = (4, 8, 8)
#: Query blocks computed together (``lax.map``'s ``batch_size``) aim at this many queries.
NA_QUERIES_PER_STEP = 8192
#: The kernel of each block's masked attention: XLA's (its logits are one block's, bounded);
#: cuDNN's masked path is untested here (no GPU in this project's CI).
NA_IMPLEMENTATION = "xla"


# ---------------------------------------------------------------------------- attention
def rope_split(head_dim: int) -> tuple[int, int, int]:
    """The head's (T, H, W) RoPE dims: a quarter (even) to time, the rest halved, each half
    even (diffusers' ``LTX2VideoVaeRotaryPosEmbed3D``: (16, 24, 24) for 64)."""
    d_t = (head_dim // 4) // 2 * 2
    d_hw = (head_dim - d_t) // 2
    if d_hw % 2:
        d_t -= 2
        d_hw = (head_dim - d_t) // 2
    return d_t, d_hw, d_hw


def window_starts(n: int, k: int) -> np.ndarray:
    """First position of each query's window along an axis of ``n``: centered, shifted
    inward at the borders so it always holds ``k`` positions (NATTEN)."""
    return np.clip(np.arange(n) - k // 2, 0, n - k)


def axis_blocks(n: int, k: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Along one axis, for query blocks of ``b``: each block's key-box start ``[nb]`` and the
    window mask ``[nb, b, L]`` of its queries over the box (``L = min(b + k - 1, n)``).
    Queries past ``n`` (the last block's padding) get the last window."""
    nb, size = -(-n // b), min(b + k - 1, n)
    q = np.minimum(np.arange(nb * b), n - 1).reshape(nb, b)
    start = window_starts(n, k)[q]                                     # [nb, b]
    box = np.minimum(start[:, 0], n - size)                            # [nb]
    pos = box[:, None, None] + np.arange(size)[None, None, :]          # [nb, 1, L]
    mask = (pos >= start[..., None]) & (pos < start[..., None] + k)
    return box, mask


def dense_neighborhood_mask(grid, kernel) -> np.ndarray:
    """The full ``[N, N]`` window mask of a row-major (T, H, W) grid (tests, small grids)."""
    axes = []
    for n, k in zip(grid, kernel):
        start = window_starts(n, k)
        p = np.arange(n)
        axes.append((p[None, :] >= start[:, None]) & (p[None, :] < start[:, None] + k))
    t, h, w = axes
    m = t[:, None, None, :, None, None] & h[None, :, None, None, :, None] & w[None, None, :, None,
                                                                           None, :]
    n = int(np.prod(grid))
    return m.reshape(n, n)


def neighborhood_attention(q: jax.Array, k: jax.Array, v: jax.Array, kernel,
                           block=NA_BLOCK) -> jax.Array:
    """3-D neighborhood attention of ``[B, T, H, W, heads, D]`` (q already scaled: the logit
    scale is 1) with NATTEN's inward-shifted windows, computed in query blocks."""
    b_, *grid, heads, d = q.shape
    for n, kk in zip(grid, kernel):
        if kk > n:
            raise VidaxError(f"neighborhood attention over a {tuple(grid)} grid with kernel "
                             f"{tuple(kernel)}: every axis must be at least its kernel")
    bs = tuple(min(bb, n) for bb, n in zip(block, grid))
    axes = [axis_blocks(n, kk, bb) for n, kk, bb in zip(grid, kernel, bs)]
    nbs = tuple(m.shape[0] for _, m in axes)
    size = tuple(m.shape[2] for _, m in axes)
    pad = [(0, 0)] + [(0, nb * bb - n) for nb, bb, n in zip(nbs, bs, grid)] + [(0, 0), (0, 0)]
    qp = jnp.pad(q, pad)
    it, ih, iw = (a.reshape(-1) for a in np.meshgrid(*[np.arange(nb) for nb in nbs],
                                                       indexing="ij"))
    boxes = np.stack([axes[0][0][it], axes[1][0][ih], axes[2][0][iw]], -1).astype(np.int32)
    q_starts = np.stack([it * bs[0], ih * bs[1], iw * bs[2]], -1).astype(np.int32)
    masks = [jnp.asarray(m) for _, m in axes]
    bq, lk = int(np.prod(bs)), int(np.prod(size))

    def one(args):
        qs, box, i = args
        qb = jax.lax.dynamic_slice(qp, (0, *qs, 0, 0), (b_, *bs, heads, d))
        kb = jax.lax.dynamic_slice(k, (0, *box, 0, 0), (b_, *size, heads, d))
        vb = jax.lax.dynamic_slice(v, (0, *box, 0, 0), (b_, *size, heads, d))
        mt, mh, mw = (m[j] for m, j in zip(masks, i))
        mask = (mt[:, None, None, :, None, None] & mh[None, :, None, None, :, None]
                & mw[None, None, :, None, None, :]).reshape(1, 1, bq, lk)
        out = attention(qb.reshape(b_, bq, heads, d), kb.reshape(b_, lk, heads, d),
                        vb.reshape(b_, lk, heads, d), mask=mask, scale=1.0,
                        implementation=NA_IMPLEMENTATION, sequence_parallel=False)
        return out.reshape(b_, *bs, heads, d)

    index = np.stack([it, ih, iw], -1).astype(np.int32)
    xs = (jnp.asarray(q_starts), jnp.asarray(boxes), jnp.asarray(index))
    per_step = max(1, NA_QUERIES_PER_STEP // bq)
    out = (jax.vmap(one)(xs) if len(index) <= per_step
           else jax.lax.map(one, xs, batch_size=per_step))
    out = out.reshape(*nbs, b_, *bs, heads, d).transpose(3, 0, 4, 1, 5, 2, 6, 7, 8)
    out = out.reshape(b_, *(nb * bb for nb, bb in zip(nbs, bs)), heads, d)
    return out[:, :grid[0], :grid[1], :grid[2]]


class QKV(nnx.Module):
    """ltx-core's ``QKVProjections``: ``to_q`` / ``to_k`` / ``to_v`` (stored fused as
    ``qkv`` [3C, C], split q | k | v at load)."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        self.to_q = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.to_k = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.to_v = Linear(dim, dim, keys=keys, param_dtype=param_dtype)


class NeighborhoodAttention(nnx.Module):
    """``attn``: ``qkv``, per-head ``q_norm`` / ``k_norm``, 3-axis RoPE, neighborhood
    attention over ``kernel``, ``proj``."""

    def __init__(self, dim: int, kernel, head_dim: int, *, keys: KeyGen, param_dtype):
        self.kernel, self.head_dim, self.heads = tuple(kernel), head_dim, dim // head_dim
        self.qkv = QKV(dim, keys=keys, param_dtype=param_dtype)
        self.q_norm = RMSNorm(head_dim, eps=NORM_EPS, param_dtype=param_dtype)
        self.k_norm = RMSNorm(head_dim, eps=NORM_EPS, param_dtype=param_dtype)
        self.proj = Linear(dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, h, w, c = x.shape
        shape = (b, t * h * w, self.heads, self.head_dim)
        q = self.q_norm(self.qkv.to_q(x).reshape(shape)) * jnp.asarray(self.head_dim ** -0.5,
                                                                        x.dtype)
        k = self.k_norm(self.qkv.to_k(x).reshape(shape))
        v = self.qkv.to_v(x).reshape(b, t, h, w, self.heads, self.head_dim)
        cos, sin = axial_rope((t, h, w), rope_split(self.head_dim), theta=ROPE_THETA, dtype=_F32)
        grid = (b, t, h, w, self.heads, self.head_dim)
        q = apply_rope(q, cos, sin).reshape(grid)
        k = apply_rope(k, cos, sin).reshape(grid)
        return self.proj(neighborhood_attention(q, k, v, self.kernel).reshape(b, t, h, w, c))


def swiglu_hidden(dim: int, ratio: float = 4.0) -> int:
    return (int(dim * ratio) + 15) // 16 * 16


class SwiGLU(nnx.Module):
    """``mlp``: ``w_down(silu(w_gate x) * w_up x)``, no biases."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        hidden = swiglu_hidden(dim)
        kw = dict(keys=keys, bias=False, param_dtype=param_dtype)
        self.w_gate, self.w_up = Linear(dim, hidden, **kw), Linear(dim, hidden, **kw)
        self.w_down = Linear(hidden, dim, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.w_down(jax.nn.silu(self.w_gate(x)) * self.w_up(x))


class NABlock(nnx.Module):
    """A deterministic stage's block: pre-norm attention and SwiGLU residuals."""

    def __init__(self, dim: int, kernel, head_dim: int, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.norm1 = RMSNorm(dim, eps=NORM_EPS, param_dtype=param_dtype)
        self.attn = NeighborhoodAttention(dim, kernel, head_dim, **kw)
        self.norm2 = RMSNorm(dim, eps=NORM_EPS, param_dtype=param_dtype)
        self.mlp = SwiGLU(dim, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DiffusionNABlock(NABlock):
    """A stage-5 block: the context added through ``context_proj``, then the NA block with
    its norms modulated by the shared AdaLN + ``scale_shift_table [7, C]``."""

    def __init__(self, dim: int, kernel, head_dim: int, context_channels: int, *,
                 keys: KeyGen, param_dtype):
        super().__init__(dim, kernel, head_dim, keys=keys, param_dtype=param_dtype)
        self.context_proj = Linear(context_channels, dim, keys=keys, param_dtype=param_dtype)
        self.scale_shift_table = init_param(keys, (7, dim), std=dim ** -0.5, dtype=param_dtype)

    def __call__(self, x: jax.Array, context: jax.Array, modulation: jax.Array) -> jax.Array:
        ada = modulation + self.scale_shift_table[...].astype(modulation.dtype)   # [B, 7, C]
        ada = ada[:, None, None, None].astype(x.dtype)                            # [B,1,1,1,7,C]
        x = x + self.context_proj(context)
        x = x + self.attn(self.norm1(x) * (1 + ada[..., 0, :]) + ada[..., 1, :])
        return x + self.mlp(self.norm2(x) * (1 + ada[..., 3, :]) + ada[..., 4, :])


class PixelShuffleUpsample(nnx.Module):
    """``upsamples.i``: ``proj`` (Linear) and a pixel shuffle by ``stride``; a time stride of
    2 drops the duplicated first frame."""

    def __init__(self, dim: int, stride, reduction: int, *, keys: KeyGen, param_dtype):
        self.stride = tuple(stride)
        self.proj = Linear(dim, int(np.prod(stride)) * dim // reduction, keys=keys,
                           param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = depth_to_space(self.proj(x), self.stride)
        return x[:, 1:] if self.stride[0] == 2 else x


class DiffusionDecoder(nnx.Module):
    """The authors' ``NADiffusionDecoder`` (module names after their loader's renames)."""

    def __init__(self, cfg: LTX2DiffusionDecoderConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.cfg = cfg
        chans = cfg.stage_channels
        self.conv_in = Linear(cfg.in_channels, chans[0], **kw)
        self.det_stages = nnx.List([
            nnx.List([NABlock(chans[i], cfg.stage_kernels[i], cfg.head_dim, **kw)
                      for _ in range(cfg.stage_depths[i])])
            for i in range(len(cfg.upsamples))])
        self.upsamples = nnx.List([PixelShuffleUpsample(chans[i], stride, reduction, **kw)
                                   for i, (stride, reduction) in enumerate(cfg.upsamples)])
        width, pixels = cfg.stage5_width, cfg.out_channels * cfg.patch_size ** 2
        self.t_embedder = CombinedTimestepEmbedding(cfg.t_emb_dim, **kw)
        self.conv_in_x_t = Linear(pixels, width, **kw)
        self.shared_adaln = _AdaLN(cfg.t_emb_dim, width, **kw)
        self.diff_blocks = nnx.List([
            DiffusionNABlock(width, cfg.stage5_kernel, cfg.head_dim, chans[-1], **kw)
            for _ in range(cfg.stage_depths[-1])])
        self.norm_out = RMSNorm(width, eps=NORM_EPS, param_dtype=param_dtype)
        self.conv_out = Linear(width, pixels, **kw)

    def context(self, z: jax.Array) -> jax.Array:
        """Stages 1-4: un-normalised latents ``[B, F', H', W', C]`` -> the stage-5 context
        ``[B, F, H / p, W / p, C_ctx]``."""
        pad = self.cfg.trailing_pad_latent_frames
        if pad:
            z = jnp.concatenate([z, jnp.repeat(z[:, -1:], pad, axis=1)], axis=1)
        x = self.conv_in(z)
        for blocks, up in zip(self.det_stages, self.upsamples):
            for block in blocks:
                x = block(x)
            x = up(x)
        if not pad:
            return x
        # the ghost frames cropped, keeping at least stage 5's K_t frames (the authors'
        # crop_trailing_context_natten_pad)
        content = max(x.shape[1] - pad * self.cfg.temporal_upscale, 1)
        return x[:, :min(x.shape[1], max(content, self.cfg.stage5_kernel[0]))]

    def step(self, context: jax.Array, x_t: jax.Array, t: jax.Array) -> jax.Array:
        """One stage-5 evaluation: the prediction (x0 or v) ``[B, F, H, W, 3]`` from the
        noisy pixels ``x_t`` at time ``t`` ``[B]`` (in [0, 1])."""
        emb = self.t_embedder(self.cfg.timestep_scale_multiplier * t.astype(_F32), x_t.dtype)
        modulation = self.shared_adaln(emb)
        h = self.conv_in_x_t(patchify(x_t, self.cfg.patch_size))
        for block in self.diff_blocks:
            h = block(h, context, modulation)
        return unpatchify(self.conv_out(self.norm_out(h)), self.cfg.patch_size)

    def sample(self, context: jax.Array, noise: jax.Array, num_steps: int) -> jax.Array:
        """The pixels from the noise ``x_1`` in ``num_steps`` (diffusers' ``denoise``)."""
        b = context.shape[0]
        ts = np.linspace(1.0, 1.0 / num_steps, num_steps, dtype=np.float32)
        x = noise
        if num_steps == 1 and self.cfg.model_output_type == "x0":
            return self.step(context, x, jnp.full((b,), ts[0], _F32))
        for i, t in enumerate(ts):
            t_next = ts[i + 1] if i + 1 < num_steps else np.float32(0.0)
            out = self.step(context, x, jnp.full((b,), t, _F32)).astype(_F32)
            xf = x.astype(_F32)
            if self.cfg.model_output_type == "x0":
                out = (xf - out) / t
            x = (xf - (t - t_next) * out).astype(x.dtype)
        return x


class _AdaLN(nnx.Module):
    """``shared_adaln``: ``proj(silu(t_emb))`` -> 7 rows ``[B, 7, C]``."""

    def __init__(self, t_emb_dim: int, dim: int, *, keys: KeyGen, param_dtype):
        self.proj = Linear(t_emb_dim, 7 * dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, emb: jax.Array) -> jax.Array:
        return self.proj(jax.nn.silu(emb)).reshape(emb.shape[0], 7, -1)


# ---------------------------------------------------------------------------- the model
class LTX2DiffusionVAE(nnx.Module):
    """LTX-2.5's ``CausalDiffusionVAE``: ``encoder`` (the conv VAE's), ``decoder`` (the
    neighborhood-attention diffusion decoder), ``per_channel_statistics``. Channels-last."""

    #: What the pipelines check to tell this VAE from the conv one.
    decoder_kind = "diffusion"

    def __init__(self, config: LTX2DiffusionVAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        self.config = config
        self.encoder = Encoder(config.encoder, keys=keys, param_dtype=param_dtype)
        self.decoder = DiffusionDecoder(config.decoder, keys=keys, param_dtype=param_dtype)
        self.per_channel_statistics = PerChannelStatistics(config.latent_channels, param_dtype)

    # ------------------------------------------------------------------ encode
    def encode(self, video: jax.Array, noise: jax.Array | None = None) -> jax.Array:
        """Un-normalised latents ``[B, 1 + (F-1)/8, H/32, W/32, C]`` of ``video
        [B, F, H, W, 3]`` in [-1, 1]: the means (what ltx-core's encoder keeps); with
        ``noise`` (standard normal, the latents' shape) ``mean + exp(logvar / 2) noise``,
        logvar the stored channel (``uniform``), the config's ``latent_log_var_value``
        (``constant``) or per channel."""
        cfg = self.config.encoder
        video = jnp.asarray(video)
        b, f, h, w, c = video.shape
        ts, ss = cfg.temporal_downscale_factor, cfg.spatial_downscale_factor
        if c != cfg.in_channels or (f - 1) % ts or h % ss or w % ss:
            raise VidaxError(f"LTX-2.5 diffusion VAE input {tuple(video.shape)} must be "
                             f"[B, F, H, W, {cfg.in_channels}] with F = 1 + {ts}k frames and "
                             f"H, W multiples of {ss}")
        moments = self.encoder(video)
        mean = moments[..., :cfg.latent_channels]
        if noise is None:
            return mean
        if self.config.latent_log_var == "constant":
            logvar = jnp.asarray(self.config.latent_log_var_value, mean.dtype)
        else:
            logvar = moments[..., cfg.latent_channels:]
        std = jnp.exp(0.5 * jnp.clip(logvar, -30.0, 20.0))
        return mean + std * jnp.asarray(noise, mean.dtype)

    # ------------------------------------------------------------------ decode
    def noise_shape(self, latent_shape) -> tuple[int, int, int, int, int]:
        """The decode noise's shape ``[B, F, H, W, 3]`` for latents of ``latent_shape``: the
        stage-5 canvas, which for latents under the decoder's minimum is that of the padded
        latents (see :meth:`decode`)."""
        cfg = self.config.decoder
        b, f, h, w = _padded(cfg, tuple(latent_shape[:4]))[0]
        t = max(_frames(cfg, f), cfg.stage5_kernel[0])
        s = cfg.spatial_upscale
        return (b, t, h * s, w * s, cfg.out_channels)

    def decode(self, z: jax.Array, noise: jax.Array | None = None, *,
               key: jax.Array | None = None, num_steps: int | None = None) -> jax.Array:
        """Video ``[B, 1 + 8(F'-1), 32 H', 32 W', 3]`` (unclamped) from un-normalised
        latents ``z [B, F', H', W', C]``: stages 1-4, then ``num_steps`` (default: the
        config's, 1) of stage 5 from the noise -- ``noise`` (``noise_shape(z.shape)``,
        standard normal) or drawn from ``key``; give exactly one.

        Latents smaller than every stage's kernel needs (``min_latent_shape``: 3 x 7 x 7
        for LTX-2.5; a single frame, say) are first padded as the authors' decoder does
        (ltx-core @400fd31 ``diffusion_tiling.ensure_min_latent_shape``): frames by
        repeating the last, H and W by repeating the edges (half before, the rest after),
        and the pixels are cropped back. diffusers refuses such latents instead."""
        cfg = self.config.decoder
        z = jnp.asarray(z)
        if z.ndim != 5 or z.shape[-1] != cfg.in_channels:
            raise VidaxError(f"LTX-2.5 diffusion VAE latents must be [B, F, H, W, "
                             f"{cfg.in_channels}], got {tuple(z.shape)}")
        shape = self.noise_shape(z.shape)
        if (noise is None) == (key is None):
            raise VidaxError("the LTX-2.5 diffusion decoder samples: pass the decode noise "
                             f"{shape} or a PRNG key (exactly one)")
        noise = (jax.random.normal(key, shape, z.dtype) if noise is None
                 else jnp.asarray(noise, z.dtype))
        if tuple(noise.shape) != shape:
            raise VidaxError(f"decode noise {tuple(noise.shape)}: expected {shape}")
        steps = cfg.default_num_inference_steps if num_steps is None else int(num_steps)
        if steps < 1:
            raise VidaxError(f"num_steps must be >= 1, got {steps}")
        _, f, h, w = z.shape[:4]
        _, (pad_t, (hb, ha), (wb, wa)) = _padded(cfg, z.shape[:4])
        if pad_t:
            z = jnp.concatenate([z, jnp.repeat(z[:, -1:], pad_t, axis=1)], axis=1)
        z = jnp.pad(z, ((0, 0), (0, 0), (hb, ha), (wb, wa), (0, 0)), mode="edge")
        self._check_grid(z.shape)
        video = self.decoder.sample(self.decoder.context(z), noise, steps)
        s = cfg.spatial_upscale
        return video[:, :_frames(cfg, f), hb * s:(hb + h) * s, wb * s:(wb + w) * s]

    def decode_normalized(self, latents: jax.Array, noise: jax.Array | None = None, *,
                          key: jax.Array | None = None,
                          num_steps: int | None = None) -> jax.Array:
        """The pipeline decode: ``latents`` normalised per channel (what the DiT produces)
        -> :meth:`denormalize` -> :meth:`decode` (ltx-core's decoder un-normalises first)."""
        return self.decode(self.denormalize(jnp.asarray(latents)), noise, key=key,
                           num_steps=num_steps)

    def _check_grid(self, latent_shape) -> None:
        cfg = self.config.decoder
        grids = _stage_grids(cfg, tuple(latent_shape[1:4]))
        kernels = [*cfg.stage_kernels[:len(cfg.upsamples)], cfg.stage5_kernel]
        for i, (grid, kernel) in enumerate(zip(grids, kernels)):
            if any(k > n for n, k in zip(grid, kernel)):
                raise VidaxError(
                    f"LTX-2.5 diffusion decoder: latents {tuple(latent_shape[1:4])} give a "
                    f"stage-{i + 1} grid {grid} smaller than its kernel {kernel}")

    # ------------------------------------------------------------------ statistics
    def normalize(self, z: jax.Array) -> jax.Array:
        """``(z - mean-of-means) / std-of-means`` per channel."""
        stats = self.per_channel_statistics
        return ((z - stats.mean_of_means[...].astype(z.dtype))
                / stats.std_of_means[...].astype(z.dtype))

    def denormalize(self, z: jax.Array) -> jax.Array:
        """The inverse of :meth:`normalize`."""
        stats = self.per_channel_statistics
        return (z * stats.std_of_means[...].astype(z.dtype)
                + stats.mean_of_means[...].astype(z.dtype))


def min_latent_shape(cfg: LTX2DiffusionDecoderConfig) -> tuple[int, int, int]:
    """The smallest latent (T, H, W) whose every stage grid holds its kernel, counted without
    the ghost frames (the authors' ``all_stages_min_tile_size``)."""
    mins, scale = [1, 1, 1], [1, 1, 1]
    for kernel, (stride, _) in zip(cfg.stage_kernels, cfg.upsamples):
        mins = [max(m, -(-k // c)) for m, k, c in zip(mins, kernel, scale)]
        scale = [c * st for c, st in zip(scale, stride)]
    return tuple(max(m, -(-k // c)) for m, k, c in zip(mins, cfg.stage5_kernel, scale))


def _padded(cfg: LTX2DiffusionDecoderConfig, shape):
    """``(B, F, H, W)`` padded to :func:`min_latent_shape`, and the pads: frames after, and
    (before, after) on H and W."""
    b, f, h, w = shape
    min_t, min_h, min_w = min_latent_shape(cfg)
    pad_t, need_h, need_w = max(0, min_t - f), max(0, min_h - h), max(0, min_w - w)
    pads = (pad_t, (need_h // 2, need_h - need_h // 2), (need_w // 2, need_w - need_w // 2))
    return (b, f + pad_t, h + need_h, w + need_w), pads


def _frames(cfg: LTX2DiffusionDecoderConfig, f: int) -> int:
    """Pixel frames of ``f`` latent frames (1 + 8 (f - 1) for LTX-2.5)."""
    for (st, _, _), _ in cfg.upsamples:
        f = f * st - (1 if st == 2 else 0)
    return f


@functools.lru_cache(maxsize=64)
def _stage_grids(cfg: LTX2DiffusionDecoderConfig, latent: tuple[int, int, int]):
    """The (T, H, W) token grid each stage attends over (stages 1-4 with the ghost frames)."""
    t, h, w = latent[0] + cfg.trailing_pad_latent_frames, latent[1], latent[2]
    grids = []
    for (st, sh, sw), _ in cfg.upsamples:
        grids.append((t, h, w))
        t, h, w = t * st - (1 if st == 2 else 0), h * sh, w * sw
    content = max(t - cfg.trailing_pad_latent_frames * cfg.temporal_upscale, 1)
    grids.append((min(t, max(content, cfg.stage5_kernel[0])), h, w))
    return tuple(grids)
