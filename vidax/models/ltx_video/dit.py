"""The LTX-Video diffusion transformer, after the authors' ``Transformer3DModel``.

Mirrors Lightricks/LTX-Video ``ltx_video/models/transformers/transformer3d.py`` and
``attention.py`` (``BasicTransformerBlock``, ``Attention``, ``AttnProcessor2_0``) at the
settings every 0.9.x release uses (``adaptive_norm="single_scale_shift"``, RMS-normalised
blocks without weights, q/k RMSNorm, GELU-tanh FFN, interleaved 3-axis RoPE); other settings
are refused by :meth:`LTXVideoDiTConfig.from_dict`. Module names are the authors', so the
mapper is a rename of two ``nn.Sequential`` indices:

================================  ==============================
authors (torch)                   vidax
================================  ==============================
``*.attn{1,2}.to_out.0``          ``*.attn{1,2}.to_out``
``*.ff.net.0.proj`` / ``.net.2``  ``*.ff.proj_in`` / ``.proj_out``
================================  ==============================

The computation, as the authors' code does it (easy to get wrong, so spelled out):

* Every token is one latent voxel (patch size 1): ``patchify_proj`` 128 -> D, tokens in
  (frame, row, column) order.
* Timestep: ``sigma * timestep_scale_multiplier`` (1000) -> diffusers' float32 sinusoid (256,
  cos first) -> ``adaln_single.emb.timestep_embedder`` (Linear, SiLU, Linear) = the embedded
  timestep; ``adaln_single.linear(silu(.))`` gives 6D per block. The timestep may be per token
  (conditioning tokens carry their own). Per block, ``scale_shift_table [6, D]`` + those 6D
  unbind as (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp).
* Block: weightless RMSNorm (``norm_eps``) -> ``x * (1 + scale) + shift`` -> self-attention ->
  ``x += gate * out``; cross-attention to the projected text on the *un-normalised* stream
  (``attn_input = hidden_states`` in the authors' code: no norm, no modulation) -> add;
  weightless RMSNorm -> modulation -> FFN -> gated add.
* Attention: q/k RMSNorm (weight, eps 1e-5) over the full inner dim, then (self-attention only)
  RoPE over the full inner dim before the head split; ``1/sqrt(head_dim)`` scaling; the text
  padding mask enters as the authors' additive bias ``(1 - mask) * -10000``.
* RoPE positions are pixel coordinates: latent (f, h, w) x the VAE's (8, 32, 32), the time
  axis with the causal fix ``max(8 f + 1 - 8, 0)`` and divided by ``frame_rate``; each axis
  divided by ``positional_embedding_max_pos`` (20, 2048, 2048). The angle of frequency ``k`` on
  an axis is ``theta^(k/(K-1)) * pi/2 * (2 * pos - 1)`` with ``K = D // 6`` per axis; angles are
  interleaved (k, axis), each used for a pair of features (``repeat_interleave(2)``), and the
  ``D % 6`` leading features are left unrotated (cos 1, sin 0).
* Output: ``scale_shift_table [2, D]`` + the embedded timestep -> (shift, scale) around a
  LayerNorm without affine (eps 1e-6), then ``proj_out`` D -> 128.
* Spatio-temporal guidance (STG): ``skip_layer_mask [num_layers, B]`` (0 = skip this block for
  this sample) with the authors' four strategies. ``attention_values`` replaces the
  self-attention output by its values, ``attention_skip`` by its input, ``transformer_block``
  bypasses the whole block; ``residual`` changes nothing in this model, exactly as in the
  authors' code (it only acts on attention layers built with ``residual_connection=True``).

Precision: float32 throughout by default (the RoPE angles and the timestep sinusoid in
float32 with the authors' operation order, since at ~1e4 rad their rounding is part of the
function). The parameters are cast to the activations' dtype at use. The RoPE frequency table
is built on the host from correctly rounded float32 values; torch's float32 ``linspace`` /
``pow`` may differ from it by an ulp at the real sizes (D // 6 = 341, 682), i.e. ~1e-3 rad on
the highest frequencies, within what float32 RoPE at these angles can resolve anyway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx_video.config import LTXVideoDiTConfig
from vidax.nn.attention import attention
from vidax.nn.embeddings import diffusers_timestep_embedding
from vidax.nn.layers import KeyGen, Linear, RMSNorm, init_param, layer_norm, rms_norm
from vidax.nn import offload
from vidax.nn.step_cache import run_blocks

_F32 = jnp.float32
#: The 0.9.x causal VAE's (time, height, width) compression: latent -> pixel coordinates.
VAE_SCALE_FACTORS = (8, 32, 32)
#: The authors' ``SkipLayerStrategy`` values (``stg_mode`` in their configs).
SKIP_LAYER_STRATEGIES = ("attention_values", "attention_skip", "residual", "transformer_block")


def skip_layer_mask(num_layers: int, num_conds: int, blocks) -> np.ndarray | None:
    """The authors' ``Transformer3DModel.create_skip_layer_mask(1, num_conds, num_conds - 1,
    blocks)``: ``[layers, num_conds]``, 0 for the listed blocks in the last (perturbed) sample
    (STG), or None without blocks."""
    if not blocks:
        return None
    mask = np.ones((num_layers, num_conds), np.float32)
    for b in blocks:
        if not -num_layers <= b < num_layers:
            raise VidaxError(f"skip block {b} does not exist in a DiT of {num_layers} blocks")
        mask[b, num_conds - 1] = 0
    return mask


# Fixed in the authors' code, not in the config: the sinusoid width of AdaLayerNormSingle,
# the q/k RMSNorm eps, the final LayerNorm eps, the text mask's additive bias.
TIMESTEP_CHANNELS = 256
QK_NORM_EPS = 1e-5
NORM_OUT_EPS = 1e-6
MASK_BIAS = -10000.0


# ---------------------------------------------------------------------------- functions
def latent_pixel_coords(frames: int, height: int, width: int, *,
                        scale_factors: Sequence[int] = VAE_SCALE_FACTORS,
                        causal_fix: bool = True) -> np.ndarray:
    """Pixel coordinates ``[frames*height*width, 3]`` (float32) of a latent grid's tokens in
    (f, h, w) order: the authors' ``get_latent_coords`` + ``latent_to_pixel_coords``.

    ``causal_fix`` (the config's ``causal_temporal_positioning``): the first latent frame holds
    one pixel frame, so time is ``max(f * s_t + 1 - s_t, 0)``.
    """
    grid = np.stack(np.meshgrid(np.arange(frames), np.arange(height), np.arange(width),
                                indexing="ij"), axis=-1).reshape(-1, 3)
    coords = grid * np.asarray(scale_factors, np.int64)
    if causal_fix:
        coords[:, 0] = np.maximum(coords[:, 0] + 1 - scale_factors[0], 0)
    return coords.astype(np.float32)


def rope_frequency_table(dim: int, theta: float) -> np.ndarray:
    """float32 ``[dim // 6]``: ``theta^linspace(0, 1, dim // 6) * pi / 2`` with the authors'
    roundings (``precompute_freqs_cis``: the power in float32, then ``* pi``, then ``/ 2``)."""
    lin = np.linspace(0.0, 1.0, dim // 6).astype(np.float32)
    powers = np.power(np.float64(theta), lin.astype(np.float64)).astype(np.float32)
    return (powers * np.float32(math.pi)) / np.float32(2)


def rope_cos_sin(pixel_coords: jax.Array, frame_rate, *, dim: int, theta: float,
                 max_pos: Sequence[int]) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[B, N, dim]`` for tokens at ``pixel_coords [B, N, 3]`` (t, y, x).

    Mirrors the authors' pipeline (time x ``1 / frame_rate``) and ``precompute_freqs_cis``
    (``spacing="exp"``), in float32.
    """
    coords = jnp.asarray(pixel_coords, _F32)
    t = coords[..., 0] * jnp.asarray(1.0 / frame_rate, _F32)
    frac = jnp.stack([t / jnp.float32(max_pos[0]), coords[..., 1] / jnp.float32(max_pos[1]),
                      coords[..., 2] / jnp.float32(max_pos[2])], axis=-1)      # [B, N, 3]
    freqs = jnp.asarray(rope_frequency_table(dim, theta))                      # [K]
    angles = freqs[:, None] * (frac[..., None, :] * 2 - 1)                     # [B, N, K, 3]
    angles = angles.reshape(*angles.shape[:-2], -1)                            # (k, axis)
    cos = jnp.repeat(jnp.cos(angles), 2, axis=-1)
    sin = jnp.repeat(jnp.sin(angles), 2, axis=-1)
    pad = dim % 6
    if pad:
        cos = jnp.concatenate([jnp.ones((*cos.shape[:-1], pad), _F32), cos], axis=-1)
        sin = jnp.concatenate([jnp.zeros((*sin.shape[:-1], pad), _F32), sin], axis=-1)
    return cos, sin


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``x * cos + rot(x) * sin`` with ``rot`` turning each pair ``(a, b)`` into ``(-b, a)``:
    the authors' ``Attention.apply_rotary_emb`` over the full inner dim."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
    return x * cos.astype(x.dtype) + rotated * sin.astype(x.dtype)


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


# ---------------------------------------------------------------------------- modules
class TimestepEmbedding(nnx.Module):
    """diffusers' ``TimestepEmbedding``: Linear -> SiLU -> Linear."""

    def __init__(self, in_channels: int, dim: int, *, keys: KeyGen, param_dtype):
        self.linear_1 = Linear(in_channels, dim, keys=keys, param_dtype=param_dtype)
        self.linear_2 = Linear(dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(jax.nn.silu(self.linear_1(x)))


class CombinedTimestepEmbedding(nnx.Module):
    """diffusers' ``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)`` as LTX-Video builds it
    (no size / aspect-ratio conditions): ``Timesteps(256, flip_sin_to_cos=True, shift=0)`` ->
    ``timestep_embedder``. Also the VAE decoder's ``time_embedder``."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        self.timestep_embedder = TimestepEmbedding(TIMESTEP_CHANNELS, dim, keys=keys,
                                                   param_dtype=param_dtype)

    def __call__(self, t: jax.Array, dtype=_F32) -> jax.Array:
        proj = diffusers_timestep_embedding(t, TIMESTEP_CHANNELS, flip_sin_to_cos=True,
                                            downscale_freq_shift=0.0)
        return self.timestep_embedder(proj.astype(dtype))


class AdaLayerNormSingle(nnx.Module):
    """diffusers' ``AdaLayerNormSingle``: embedded timestep, and ``linear(silu(.))`` -> 6D."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        self.emb = CombinedTimestepEmbedding(dim, keys=keys, param_dtype=param_dtype)
        self.linear = Linear(dim, 6 * dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, t: jax.Array, dtype=_F32) -> tuple[jax.Array, jax.Array]:
        embedded = self.emb(t, dtype)
        return self.linear(jax.nn.silu(embedded)), embedded


class TextProjection(nnx.Module):
    """diffusers' ``PixArtAlphaTextProjection``: Linear -> GELU(tanh) -> Linear."""

    def __init__(self, in_features: int, dim: int, *, keys: KeyGen, param_dtype):
        self.linear_1 = Linear(in_features, dim, keys=keys, param_dtype=param_dtype)
        self.linear_2 = Linear(dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(_gelu_tanh(self.linear_1(x)))


class Attention(nnx.Module):
    """The authors' ``Attention`` with ``AttnProcessor2_0`` (self- or cross-attention)."""

    def __init__(self, dim: int, num_heads: int, head_dim: int, *, kv_dim: int, bias: bool,
                 keys: KeyGen, param_dtype):
        inner = num_heads * head_dim
        self.num_heads = num_heads
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.to_q = Linear(dim, inner, bias=bias, **kw)
        self.to_k = Linear(kv_dim, inner, bias=bias, **kw)
        self.to_v = Linear(kv_dim, inner, bias=bias, **kw)
        self.to_out = Linear(inner, dim, **kw)
        self.q_norm = RMSNorm(inner, eps=QK_NORM_EPS, param_dtype=param_dtype)
        self.k_norm = RMSNorm(inner, eps=QK_NORM_EPS, param_dtype=param_dtype)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:2], self.num_heads, -1)

    def __call__(self, x: jax.Array, context: jax.Array | None = None, *,
                 rope: tuple[jax.Array, jax.Array] | None = None,
                 bias: jax.Array | None = None, skip: jax.Array | None = None,
                 skip_strategy: str | None = None) -> jax.Array:
        """``x [B, N, dim]``; ``context`` None for self-attention (then ``rope`` applies);
        ``bias`` an additive logit bias broadcastable to ``[B, heads, N, L]``; ``skip [B]``
        the STG keep-mask (1 keep, 0 skip) for ``skip_strategy``."""
        source = x if context is None else context
        q = self.q_norm(self.to_q(x))
        k = self.k_norm(self.to_k(source))
        v = self.to_v(source)
        if context is None and rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        out = attention(self._heads(q), self._heads(k), self._heads(v), bias=bias)
        out = out.reshape(*x.shape[:2], -1)
        if skip is not None and skip_strategy in ("attention_skip", "attention_values"):
            keep = skip.astype(out.dtype)[:, None, None]
            out = out * keep + (x if skip_strategy == "attention_skip" else v) * (1 - keep)
        return self.to_out(out)


class FeedForward(nnx.Module):
    """The authors' ``FeedForward(activation_fn="gelu-approximate")``: ``net.0`` (diffusers'
    ``GELU(approximate="tanh")``, a Linear then the activation) -> ``net.2`` Linear, 4x."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        self.proj_in = Linear(dim, 4 * dim, keys=keys, param_dtype=param_dtype)
        self.proj_out = Linear(4 * dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj_out(_gelu_tanh(self.proj_in(x)))


class BasicTransformerBlock(nnx.Module):
    """The authors' ``BasicTransformerBlock`` at the 0.9.x settings (see the module docstring)."""

    def __init__(self, cfg: LTXVideoDiTConfig, *, keys: KeyGen, param_dtype):
        dim, kw = cfg.inner_dim, dict(keys=keys, param_dtype=param_dtype)
        self.eps = cfg.norm_eps
        self.attn1 = Attention(dim, cfg.num_attention_heads, cfg.attention_head_dim, kv_dim=dim,
                               bias=cfg.attention_bias, **kw)
        self.attn2 = Attention(dim, cfg.num_attention_heads, cfg.attention_head_dim,
                               kv_dim=cfg.cross_attention_dim, bias=cfg.attention_bias, **kw)
        self.ff = FeedForward(dim, **kw)
        self.scale_shift_table = init_param(keys, (6, dim), std=dim ** -0.5, dtype=param_dtype)

    def _values(self, x: jax.Array, ada: jax.Array) -> list[jax.Array]:
        """(shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp), each
        ``[B, 1 or N, D]``: ``scale_shift_table`` + ``ada [B, 1 or N, 6D]``."""
        b, t = ada.shape[0], ada.shape[1]
        values = self.scale_shift_table[...].astype(x.dtype) + ada.reshape(b, t, 6, -1)
        return [values[:, :, i] for i in range(6)]

    def modulated_input(self, x: jax.Array, ada: jax.Array) -> jax.Array:
        """``norm1(x) * (1 + scale_msa) + shift_msa``: what the self-attention reads (and
        TeaCache measures on the first block)."""
        shift_msa, scale_msa = self._values(x, ada)[:2]
        return rms_norm(x, self.eps) * (1 + scale_msa) + shift_msa

    def __call__(self, x: jax.Array, ada: jax.Array, context: jax.Array,
                 context_bias: jax.Array | None, rope: tuple[jax.Array, jax.Array],
                 skip: jax.Array | None = None, skip_strategy: str | None = None) -> jax.Array:
        """``x [B, N, D]``; ``ada [B, 1 or N, 6D]`` (``adaln_single``'s projection)."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self._values(x, ada)
        h = rms_norm(x, self.eps) * (1 + scale_msa) + shift_msa
        out = x + gate_msa * self.attn1(h, rope=rope, skip=skip, skip_strategy=skip_strategy)
        out = out + self.attn2(out, context, bias=context_bias)
        h = rms_norm(out, self.eps) * (1 + scale_mlp) + shift_mlp
        out = out + gate_mlp * self.ff(h)
        if skip is not None and skip_strategy == "transformer_block":
            keep = skip.astype(out.dtype)[:, None, None]
            out = out * keep + x * (1 - keep)
        return out


class LTXVideoDiT(nnx.Module):
    """The LTX-Video 0.9.x DiT: ``Transformer3DModel`` in Flax NNX, channels-last."""

    def __init__(self, config: LTXVideoDiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        cfg = self.config = config
        dim, kw = cfg.inner_dim, dict(keys=keys, param_dtype=param_dtype)
        self.patchify_proj = Linear(cfg.in_channels, dim, **kw)
        self.adaln_single = AdaLayerNormSingle(dim, **kw)
        self.caption_projection = TextProjection(cfg.caption_channels, dim, **kw)
        self.transformer_blocks = nnx.List([BasicTransformerBlock(cfg, **kw)
                                            for _ in range(cfg.num_layers)])
        self.scale_shift_table = init_param(keys, (2, dim), std=dim ** -0.5, dtype=param_dtype)
        self.proj_out = Linear(dim, cfg.out_channels, **kw)

    def __call__(self, latents: jax.Array, timestep: jax.Array, context: jax.Array,
                 context_mask: jax.Array | None = None, *, frame_rate: float,
                 pixel_coords: jax.Array | None = None,
                 skip_layer_mask: jax.Array | None = None,
                 skip_layer_strategy: str = "attention_values",
                 vae_scale_factors: Sequence[int] = VAE_SCALE_FACTORS) -> jax.Array:
        """The velocity for ``latents``; mirrors ``Transformer3DModel.forward`` plus the
        position bookkeeping of the authors' pipeline (pixel coordinates, ``/ frame_rate``).

        Args:
          latents: a latent grid ``[B, F, H, W, C]`` (tokens in (f, h, w) order, positions
            from the grid), or tokens ``[B, N, C]`` with ``pixel_coords``.
          timestep: sigma in [0, 1] (scaled by ``timestep_scale_multiplier`` here): a scalar,
            ``[B]``, or per token ``[B, N]`` / ``[B, F, H, W]``.
          context: T5 hidden states ``[B, L, caption_channels]``.
          context_mask: ``[B, L]``, 1 on real tokens, 0 on padding (None: all real).
          frame_rate: frames per second; the RoPE time coordinate is divided by it.
          pixel_coords: ``[N, 3]`` or ``[B, N, 3]`` pixel coordinates (t, y, x) of the tokens,
            before the frame-rate division (the authors' pipeline ``pixel_coords``); default:
            :func:`latent_pixel_coords` of the grid.
          skip_layer_mask: ``[num_layers, B]``, 0 where a block is skipped for a sample (STG);
            ``skip_layer_strategy`` one of ``SKIP_LAYER_STRATEGIES``.
          vae_scale_factors: latent -> pixel scale (time, height, width) for the default
            positions.

        Returns:
          ``[B, F, H, W, out_channels]`` for a grid, ``[B, N, out_channels]`` for tokens.
        """
        cfg = self.config
        latents = jnp.asarray(latents)
        grid = latents.ndim == 5
        if grid:
            b, f, h, w, c = latents.shape
            tokens = latents.reshape(b, f * h * w, c)
            if pixel_coords is None:
                pixel_coords = latent_pixel_coords(
                    f, h, w, scale_factors=vae_scale_factors,
                    causal_fix=cfg.causal_temporal_positioning)
        elif latents.ndim == 3:
            tokens = latents
            if pixel_coords is None:
                raise VidaxError("LTX-Video DiT: token input [B, N, C] needs pixel_coords")
        else:
            raise VidaxError(f"LTX-Video DiT latents must be [B, F, H, W, C] or [B, N, C], "
                             f"got {tuple(latents.shape)}")
        b, n, c = tokens.shape
        if c != cfg.in_channels:
            raise VidaxError(f"LTX-Video DiT expects {cfg.in_channels} latent channels, got {c}")
        coords = jnp.asarray(pixel_coords, _F32)
        if coords.ndim == 2:
            coords = jnp.broadcast_to(coords[None], (b, *coords.shape))
        if coords.shape != (b, n, 3):
            raise VidaxError(f"LTX-Video DiT pixel_coords {tuple(coords.shape)} do not fit "
                             f"{n} tokens (expected [N, 3] or [B, N, 3])")
        if skip_layer_mask is not None and skip_layer_strategy not in SKIP_LAYER_STRATEGIES:
            raise VidaxError(f"unknown skip_layer_strategy {skip_layer_strategy!r}; choose one "
                             f"of {SKIP_LAYER_STRATEGIES}")

        dtype = tokens.dtype
        x = self.patchify_proj(tokens)
        t = jnp.asarray(timestep, _F32)
        t = jnp.broadcast_to(t.reshape(1, 1), (b, 1)) if t.size == 1 else t.reshape(b, -1)
        if t.shape[1] not in (1, n):
            raise VidaxError(f"LTX-Video DiT timestep {tuple(jnp.shape(timestep))} is neither "
                             f"per sample ({b}) nor per token ({b} x {n})")
        if cfg.timestep_scale_multiplier:
            t = jnp.float32(cfg.timestep_scale_multiplier) * t
        ada, embedded = self.adaln_single(t.reshape(-1), dtype)
        ada = ada.reshape(b, -1, ada.shape[-1])
        embedded = embedded.reshape(b, -1, embedded.shape[-1])

        context = self.caption_projection(jnp.asarray(context, dtype))
        context_bias = None
        if context_mask is not None:
            keep = jnp.asarray(context_mask).astype(dtype)
            context_bias = ((1 - keep) * jnp.asarray(MASK_BIAS, dtype))[:, None, None, :]

        rope = rope_cos_sin(coords, frame_rate, dim=cfg.inner_dim,
                            theta=cfg.positional_embedding_theta,
                            max_pos=cfg.positional_embedding_max_pos)
        def run_block(numbered, x):  # the block's index picks its row of the STG mask
            i, block = numbered
            skip = None if skip_layer_mask is None else jnp.asarray(skip_layer_mask)[i]
            return block(x, ada, context, context_bias, rope, skip, skip_layer_strategy)

        # TeaCache measures the first block's modulated input (the authors' TeaCache4LTX-Video:
        # ``transformer_blocks[0].norm1`` of the stream, times ``1 + scale_msa``, plus
        # ``shift_msa``), one row per batch row
        x = run_blocks(x, (list(enumerate(self.transformer_blocks)), run_block),
                       signal=offload.fetch(self.transformer_blocks[0]).modulated_input(x, ada))

        values = self.scale_shift_table[...].astype(dtype)[None, None] + embedded[:, :, None]
        shift, scale = values[:, :, 0], values[:, :, 1]
        x = layer_norm(x, NORM_OUT_EPS) * (1 + scale) + shift
        out = self.proj_out(x)
        return out.reshape(*latents.shape[:-1], cfg.out_channels) if grid else out
