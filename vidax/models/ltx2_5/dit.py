"""The LTX-2 audio-video diffusion transformer (LTX-2 19B, LTX-2.3 22B, LTX-2.5 22B), after the
authors' ``ltx_core.model.transformer.model.LTXModel`` (PyPI ``ltx-core``).

One network holds two token streams that run side by side through every block: video (inner
dim ``D``, 32 x 128 in the releases) and audio (``Da``, 32 x 64). The release file also stores,
under the same ``model.diffusion_model.`` prefix, the two text connectors
(``ltx_core.text_encoders.gemma.embeddings_connector.Embeddings1DConnector``) that turn the
text encoder's features into each stream's context; they are part of this module's tree
(:meth:`LTX2DiT.connect_text`), so the DiT section of a release file loads 1:1.

Module names are the authors', so the mapper only renames two ``nn.Sequential`` indices
(``to_out.0`` -> ``to_out``, ``ff.net.0.proj`` / ``ff.net.2`` -> ``ff.proj_in`` / ``ff.proj_out``).

The computation, as the authors' code does it (easy to get wrong, so spelled out):

* Tokens: ``patchify_proj`` (video, 128 -> D) / ``audio_patchify_proj`` (128 -> Da). Positions
  are ``[B, n_axes, T, 2]`` ``[start, end)`` bounds (video: pixel coordinates with the causal
  time fix, time divided by fps; audio: seconds), and RoPE uses their midpoint.
* Timestep: per token, ``t * timestep_scale_multiplier`` -> 256-d sinusoid (cos first) ->
  ``adaln_single.emb`` (the embedded timestep) and ``adaln_single.linear(silu(.))`` -> 6 (19B)
  or 9 (2.3+, ``cross_attention_adaln``) x D. Per block ``scale_shift_table [6|9, D]`` + those
  rows are (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp[, shift_q, scale_q,
  gate_q]).
* Block (``BasicAVTransformerBlock``), per stream: weightless RMSNorm -> modulate -> self-attn
  -> gated add; text cross-attention (19B: on the RMS-normalised stream, ungated; 2.3+: the query
  modulated by rows 6-8 and the context by ``prompt_scale_shift_table`` + ``prompt_adaln_single``
  of the scalar sigma, gated) -> add. Then the audio<->video cross-attention: both streams
  RMS-normalised once, then ``audio_to_video_attn`` (queries video, keys/values audio) and
  ``video_to_audio_attn`` (the reverse; it reads the video norm taken before that update),
  each side modulated by ``scale_shift_table_a2v_ca_{video,audio} [5, dim]``: rows 0/1 = (scale,
  shift) for a2v, 2/3 for v2a, row 4 the gate (**scale before shift**, unlike the other tables).
  The gate's timestep is the *other* stream's sigma (``av_ca_*_gate_adaln_single`` of ``sigma *
  av_ca_timestep_scale_multiplier``). The scale/shift AdaLN (``av_ca_*_scale_shift_adaln_single``)
  reads ``sigma_other * timestep_scale_multiplier`` in PyPI ltx-core 1.0.0 (the oracle of the
  tests), but this stream's per-token ``t * timestep_scale_multiplier`` in the authors' later
  code (Lightricks/LTX-2@d5b526e, which alone loads 2.5): ``av_ca_scale_shift_timestep``
  selects, "cross_sigma" for 2.0/2.3 and "own" for 2.5 by default. The two agree whenever
  every token of a stream sits at the other stream's sigma. Last, per stream: RMSNorm ->
  modulate -> FFN -> gated add.
* Attention: q/k RMSNorm with weight over the inner dim (eps ``norm_eps``), RoPE in the
  ``split`` layout (within each head, feature ``i`` pairs with ``i + head_dim/2``), then
  softmax(q k^T / sqrt(head_dim)). Self-attention uses the stream's 3-axis (video) or 1-axis
  (audio) positions; the AV cross-attentions use the time axis only, at the cross width ``Da``,
  ``max_pos = max(video time, audio time)``; queries take their own stream's table and keys the
  other's. 2.3+ gates each head's output by ``2 * sigmoid(to_gate_logits(x))``.
* RoPE angles: per axis, ``K = dim // (2 n_axes)`` frequencies ``theta^linspace(0, 1, K) * pi/2``
  (computed in float64, rounded to float32) times ``2 * pos / max_pos - 1``; ordered
  (frequency, axis); cos 1 / sin 0 padding in front up to ``dim // 2``; then split into heads.
* Output: ``scale_shift_table [2, D]`` + the embedded timestep -> (shift, scale) around a
  LayerNorm without affine, then ``proj_out``. Same for audio.
* The text connector: padded positions (mask 0) are replaced: valid tokens move to the front
  and the positions of the flipped mask take ``learnable_registers`` tiled along the sequence;
  then every token is valid. 1-axis RoPE over 0..L-1 (``max_pos`` 4096, no midpoint); blocks of
  RMSNorm -> self-attn -> add, RMSNorm -> FFN -> add; a final weightless RMSNorm.

Precision: float32 by default. The text mask becomes the authors' additive bias
``(mask - 1) * finfo.max``. The timestep sinusoid is diffusers' float32 one (shared with
LTX-Video).

Not implemented (the authors' forward has them): the ``interleaved`` RoPE layout and float32
frequency grids (every release uses ``split`` and float64; ``from_dict`` refuses the others),
and the conditioning self-attention mask (no argument for it).

Perturbations (ltx-core's ``BatchedPerturbationConfig``, for the dev pipelines' guidance):
``dit(video, audio, perturb=Perturbations(...))`` with per-block, per-sample keep factors
``[num_layers, B]`` (1 keep, 0 skip). A skipped self-attention passes its value projection
through instead of the attention output (``out * m + v * (1 - m)``, before the head gate and
``to_out``), a skipped audio<->video cross-attention adds nothing (its output times ``m``), as
ltx-core's ``Attention.forward`` and ``BasicAVTransformerBlock.forward`` do.
The 2.5 ``keyframes_abs_pos_embedding`` follows the authors' later code (added after
``patchify_proj`` to the tokens where ``keyframes_mask > 0``); ltx-core 1.0.0 predates 2.5, so
the 2.5 paths have no oracle here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx2_5.config import LTX2DiTConfig
from vidax.models.ltx_video.dit import CombinedTimestepEmbedding, TextProjection
from vidax.nn.attention import attention
from vidax.nn.layers import KeyGen, Linear, RMSNorm, init_param, layer_norm, rms_norm
from vidax.nn import offload
from vidax.nn.step_cache import run_blocks

_F32 = jnp.float32
#: ltx-core builds the connectors with their default RoPE theta, not the DiT's config value.
CONNECTOR_THETA = 10000.0


class Modality(NamedTuple):
    """One stream's inputs, as ltx-core's ``Modality``.

    latent: tokens ``[B, T, C]`` (video: the patchified latent grid in (f, h, w) order; audio:
      ``[B, frames, channels * mel_bins]``).
    sigma: ``[B]``, the stream's noise level (the other stream's AV cross-attention and the 2.3+
      prompt AdaLN read it).
    timesteps: ``[B]`` or per token ``[B, T]`` (conditioning tokens carry 0).
    positions: ``[B, n_axes, T, 2]`` ``[start, end)`` bounds (see :func:`video_positions`,
      :func:`audio_positions`).
    context: the connector's output for this stream ``[B, L, C]``.
    context_mask: ``[B, L]``, 1 on real tokens (None: all real).
    keyframes_mask: ``[B, T]`` (2.5 video only): tokens (``> 0``) that get
      ``keyframes_abs_pos_embedding``; None: no token.
    """

    latent: jax.Array
    sigma: jax.Array
    timesteps: jax.Array
    positions: jax.Array
    context: jax.Array
    context_mask: jax.Array | None = None
    keyframes_mask: jax.Array | None = None


class Perturbations(NamedTuple):
    """Per-block, per-sample keep factors ``[num_layers, B]`` (1: run, 0: skip; None: every
    block runs): ltx-core's ``PerturbationType`` ``SKIP_VIDEO_SELF_ATTN``,
    ``SKIP_AUDIO_SELF_ATTN``, ``SKIP_A2V_CROSS_ATTN``, ``SKIP_V2A_CROSS_ATTN``."""

    video_self: jax.Array | None = None
    audio_self: jax.Array | None = None
    a2v: jax.Array | None = None
    v2a: jax.Array | None = None

    @classmethod
    def make(cls, num_layers: int, batch: int, **skipped) -> Perturbations:
        """Host-side keep factors from ``{kind: [(sample, blocks or None), ...]}`` (None: every
        block), e.g. ``make(48, 3, video_self=[(2, [29])])``."""
        out = {}
        for kind, entries in skipped.items():
            keep = np.ones((num_layers, batch), np.float32)
            for sample, blocks in entries:
                keep[list(range(num_layers)) if blocks is None else list(blocks), sample] = 0.0
            out[kind] = keep
        return cls(**out)


def _keep(table: jax.Array | None, index: int, x: jax.Array) -> jax.Array | None:
    """Block ``index``'s keep factors, shaped to broadcast over ``x`` ([B, ...])."""
    if table is None:
        return None
    return jnp.asarray(table)[index].astype(x.dtype).reshape(-1, *([1] * (x.ndim - 1)))


# ---------------------------------------------------------------------------- positions
def video_positions(frames: int, height: int, width: int, fps: float, *,
                    scale_factors: Sequence[int] = (8, 32, 32),
                    causal_fix: bool = True) -> np.ndarray:
    """``[1, 3, F*H*W, 2]`` float32 bounds of a latent grid's tokens in pixel space, time in
    seconds: ``VideoLatentPatchifier.get_patch_grid_bounds`` + ``get_pixel_coords`` + ``/ fps``
    as ltx-core's ``VideoLatentTools`` builds them (patch size 1)."""
    grid = np.stack(np.meshgrid(np.arange(frames), np.arange(height), np.arange(width),
                                indexing="ij"), axis=0).reshape(3, -1)
    bounds = np.stack([grid, grid + 1], axis=-1) * np.asarray(scale_factors)[:, None, None]
    if causal_fix:
        bounds[0] = np.maximum(bounds[0] + 1 - scale_factors[0], 0)
    bounds = bounds.astype(np.float32)
    bounds[0] = bounds[0] / np.float32(fps)
    return bounds[None]


def audio_positions(frames: int, *, sample_rate: int = 16000, hop_length: int = 160,
                    downsample: int = 4, causal: bool = True, shift: int = 0) -> np.ndarray:
    """``[1, 1, frames, 2]`` float32 bounds in seconds of audio latent frames: ltx-core's
    ``AudioPatchifier.get_patch_grid_bounds``."""
    def seconds(start):
        mel = np.arange(start, start + frames, dtype=np.float32) * np.float32(downsample)
        if causal:
            mel = np.maximum(mel + np.float32(1 - downsample), np.float32(0))
        return mel * np.float32(hop_length) / np.float32(sample_rate)
    return np.stack([seconds(shift), seconds(shift + 1)], axis=-1)[None, None]


# ---------------------------------------------------------------------------- RoPE
def rope_frequencies(theta: float, n_axes: int, dim: int) -> np.ndarray:
    """``generate_freq_grid_np``: ``theta^linspace(0, 1, dim // (2 n_axes)) * pi / 2`` in
    float64, then float32."""
    lin = np.linspace(0.0, 1.0, dim // (2 * n_axes), dtype=np.float64)
    return (np.power(np.float64(theta), lin) * math.pi / 2).astype(np.float32)


def rope_tables(positions: jax.Array, *, dim: int, num_heads: int, theta: float,
                max_pos: Sequence[int], middle: bool = True) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[B, T, num_heads, dim // (2 num_heads)]`` in the ``split`` layout:
    ltx-core's ``precompute_freqs_cis`` (``generate_freqs`` + ``split_freqs_cis``), float32.

    ``positions``: ``[B, n_axes, T, 2]`` bounds (``middle``: their midpoint is used, else the
    start) or ``[B, n_axes, T]``.
    """
    pos = jnp.asarray(positions, _F32)
    if pos.ndim == 4:
        pos = (pos[..., 0] + pos[..., 1]) / 2.0 if middle else pos[..., 0]
    n_axes = pos.shape[1]
    if n_axes != len(max_pos):
        raise VidaxError(f"LTX-2 RoPE positions have {n_axes} axes, max_pos {tuple(max_pos)}")
    frac = jnp.stack([pos[:, i] / jnp.float32(max_pos[i]) for i in range(n_axes)], axis=-1)
    freqs = jnp.asarray(rope_frequencies(theta, n_axes, dim))
    angles = freqs * (frac[..., None] * 2 - 1)                  # [B, T, n_axes, K]
    angles = jnp.swapaxes(angles, -1, -2).reshape(*angles.shape[:2], -1)   # (k, axis)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    pad = dim // 2 - angles.shape[-1]
    if pad:
        cos = jnp.concatenate([jnp.ones((*cos.shape[:-1], pad), _F32), cos], axis=-1)
        sin = jnp.concatenate([jnp.zeros((*sin.shape[:-1], pad), _F32), sin], axis=-1)
    shape = (*cos.shape[:2], num_heads, -1)
    return cos.reshape(shape), sin.reshape(shape)


def apply_split_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``apply_split_rotary_emb``: ``x [B, T, inner]`` grouped into the tables' heads; in each
    head feature ``i`` (first half) and ``i + half`` (second half) turn as a pair."""
    b, t = x.shape[:2]
    halves = x.reshape(b, t, cos.shape[2], 2, -1)
    first, second = halves[..., 0, :], halves[..., 1, :]
    cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
    out = jnp.stack([first * cos - sin * second, second * cos + sin * first], axis=-2)
    return out.reshape(x.shape)


# ---------------------------------------------------------------------------- functions
def _mask_bias(mask: jax.Array | None, dtype) -> jax.Array | None:
    """A ``[B, L]`` 0/1 mask -> the authors' additive ``[B, 1, 1, L]`` bias ``(m - 1) * max``."""
    if mask is None:
        return None
    keep = jnp.asarray(mask).astype(dtype)
    return ((keep - 1) * jnp.finfo(dtype).max)[:, None, None, :]


def _rows(table: jax.Array, ada: jax.Array, rows: slice) -> list[jax.Array]:
    """``BasicAVTransformerBlock.get_ada_values``: ``table[rows] + ada``'s matching rows, each
    ``[B, 1 or T, dim]``. ``ada`` is ``[B, 1 or T, n * dim]`` with ``n = len(table)``."""
    n = table.shape[0]
    values = table[rows].astype(ada.dtype) + ada.reshape(*ada.shape[:2], n, -1)[:, :, rows]
    return [values[:, :, i] for i in range(values.shape[2])]


# ---------------------------------------------------------------------------- modules
class AdaLayerNormSingle(nnx.Module):
    """``AdaLayerNormSingle(dim, embedding_coefficient=n)``: the embedded timestep and
    ``linear(silu(.))`` -> ``n * dim``."""

    def __init__(self, dim: int, n: int, *, keys: KeyGen, param_dtype):
        self.emb = CombinedTimestepEmbedding(dim, keys=keys, param_dtype=param_dtype)
        self.linear = Linear(dim, n * dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, t: jax.Array, batch: int, dtype) -> tuple[jax.Array, jax.Array]:
        """``t`` (already scaled) of ``batch`` samples -> ``([B, -1, n*dim], [B, -1, dim])``."""
        embedded = self.emb(jnp.asarray(t, _F32).reshape(-1), dtype)
        out = self.linear(jax.nn.silu(embedded))
        return (out.reshape(batch, -1, out.shape[-1]),
                embedded.reshape(batch, -1, embedded.shape[-1]))


class Attention(nnx.Module):
    """ltx-core's ``Attention``: q/k RMSNorm with weight, split RoPE, optional per-head gate."""

    def __init__(self, query_dim: int, heads: int, head_dim: int, *, context_dim: int | None,
                 gated: bool, eps: float, keys: KeyGen, param_dtype):
        inner = heads * head_dim
        context_dim = query_dim if context_dim is None else context_dim
        self.heads = heads
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.q_norm = RMSNorm(inner, eps=eps, param_dtype=param_dtype)
        self.k_norm = RMSNorm(inner, eps=eps, param_dtype=param_dtype)
        self.to_q = Linear(query_dim, inner, **kw)
        self.to_k = Linear(context_dim, inner, **kw)
        self.to_v = Linear(context_dim, inner, **kw)
        self.to_gate_logits = Linear(query_dim, heads, **kw) if gated else None
        self.to_out = Linear(inner, query_dim, **kw)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:2], self.heads, -1)

    def __call__(self, x: jax.Array, context: jax.Array | None = None, *,
                 rope: tuple[jax.Array, jax.Array] | None = None,
                 k_rope: tuple[jax.Array, jax.Array] | None = None,
                 bias: jax.Array | None = None,
                 keys_sequence_parallel: bool = False,
                 keep: jax.Array | None = None) -> jax.Array:
        """``keep`` ``[B, 1, 1]`` (self-attention only): 0 passes the value projection
        through instead of the attention output (ltx-core's ``perturbation_mask``)."""
        context = x if context is None else context
        q = self.q_norm(self.to_q(x))
        k = self.k_norm(self.to_k(context))
        v = self.to_v(context)
        if rope is not None:
            q = apply_split_rope(q, *rope)
            k = apply_split_rope(k, *(rope if k_rope is None else k_rope))
        out = attention(self._heads(q), self._heads(k), self._heads(v), bias=bias,
                        keys_sequence_parallel=keys_sequence_parallel)
        if keep is not None:
            out = out * keep[..., None] + self._heads(v) * (1 - keep[..., None])
        if self.to_gate_logits is not None:
            out = out * (2.0 * jax.nn.sigmoid(self.to_gate_logits(x)))[..., None]
        return self.to_out(out.reshape(*x.shape[:2], -1))


class FeedForward(nnx.Module):
    """``FeedForward``: ``net.0.proj`` Linear + GELU(tanh) -> ``net.2`` Linear, 4x."""

    def __init__(self, dim: int, *, bias: bool = True, keys: KeyGen, param_dtype):
        self.proj_in = Linear(dim, 4 * dim, bias=bias, keys=keys, param_dtype=param_dtype)
        self.proj_out = Linear(4 * dim, dim, bias=bias, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj_out(jax.nn.gelu(self.proj_in(x), approximate=True))


class _Stream(NamedTuple):
    """One stream's per-call state inside the blocks (ltx-core's ``TransformerArgs``)."""

    x: jax.Array
    context: jax.Array
    context_bias: jax.Array | None
    ada: jax.Array                       # [B, 1|T, num_ada * dim]
    prompt_ada: jax.Array | None         # [B, 1, 2 * dim] (2.3+)
    rope: tuple[jax.Array, jax.Array]
    cross_rope: tuple[jax.Array, jax.Array] | None
    cross_ada: jax.Array | None          # [B, 1, 4 * dim]
    cross_gate: jax.Array | None         # [B, 1, dim]


class BasicAVTransformerBlock(nnx.Module):
    """ltx-core's ``BasicAVTransformerBlock`` (see the module docstring)."""

    def __init__(self, cfg: LTX2DiTConfig, *, keys: KeyGen, param_dtype):
        d, da = cfg.inner_dim, cfg.audio_inner_dim
        kw = dict(keys=keys, param_dtype=param_dtype)
        attn = dict(gated=cfg.apply_gated_attention, eps=cfg.norm_eps, **kw)
        self.eps = cfg.norm_eps
        self.cross_attention_adaln = cfg.cross_attention_adaln
        vh, vd = cfg.num_attention_heads, cfg.attention_head_dim
        ah, ad = cfg.audio_num_attention_heads, cfg.audio_attention_head_dim
        self.attn1 = Attention(d, vh, vd, context_dim=None, **attn)
        self.attn2 = Attention(d, vh, vd, context_dim=cfg.cross_attention_dim, **attn)
        self.ff = FeedForward(d, bias=cfg.ff_bias, **kw)
        self.scale_shift_table = init_param(keys, (cfg.num_ada, d), std=d ** -0.5,
                                            dtype=param_dtype)
        self.audio_attn1 = Attention(da, ah, ad, context_dim=None, **attn)
        self.audio_attn2 = Attention(da, ah, ad, context_dim=cfg.audio_cross_attention_dim,
                                     **attn)
        self.audio_ff = FeedForward(da, **kw)
        self.audio_scale_shift_table = init_param(keys, (cfg.num_ada, da), std=da ** -0.5,
                                                  dtype=param_dtype)
        self.audio_to_video_attn = Attention(d, ah, ad, context_dim=da, **attn)
        self.video_to_audio_attn = Attention(da, ah, ad, context_dim=d, **attn)
        self.scale_shift_table_a2v_ca_audio = init_param(keys, (5, da), std=da ** -0.5,
                                                         dtype=param_dtype)
        self.scale_shift_table_a2v_ca_video = init_param(keys, (5, d), std=d ** -0.5,
                                                         dtype=param_dtype)
        if cfg.cross_attention_adaln:
            self.prompt_scale_shift_table = init_param(keys, (2, d), std=d ** -0.5,
                                                       dtype=param_dtype)
            self.audio_prompt_scale_shift_table = init_param(keys, (2, da), std=da ** -0.5,
                                                             dtype=param_dtype)
        else:
            self.prompt_scale_shift_table = self.audio_prompt_scale_shift_table = None

    def _self_and_text(self, s: _Stream, attn1: Attention, attn2: Attention, table: jax.Array,
                       prompt_table: jax.Array | None, keep: jax.Array | None) -> jax.Array:
        shift, scale, gate = _rows(table, s.ada, slice(0, 3))
        x = s.x + attn1(rms_norm(s.x, self.eps) * (1 + scale) + shift, rope=s.rope,
                        keep=keep) * gate
        if not self.cross_attention_adaln:
            return x + attn2(rms_norm(x, self.eps), s.context, bias=s.context_bias)
        # apply_cross_attention_adaln
        shift_q, scale_q, gate_q = _rows(table, s.ada, slice(6, 9))
        shift_kv, scale_kv = _rows(prompt_table, s.prompt_ada, slice(0, 2))
        q_in = rms_norm(x, self.eps) * (1 + scale_q) + shift_q
        return x + attn2(q_in, s.context * (1 + scale_kv) + shift_kv, bias=s.context_bias) * gate_q

    def _feed_forward(self, x: jax.Array, ada: jax.Array, table: jax.Array,
                      ff: FeedForward) -> jax.Array:
        shift, scale, gate = _rows(table, ada, slice(3, 6))
        return x + ff(rms_norm(x, self.eps) * (1 + scale) + shift) * gate

    def _av_values(self, table: jax.Array, s: _Stream, rows: slice):
        """``get_av_ca_ada_values``: (scale, shift) from rows 0:4 and the gate from row 4."""
        scale, shift = _rows(table[:4], s.cross_ada, rows)
        (gate,) = _rows(table[4:], s.cross_gate, slice(None))
        return scale, shift, gate

    def __call__(self, video: _Stream | None, audio: _Stream | None,
                 perturb: Perturbations | None = None, index: int = 0):
        vx = ax = None
        p = perturb or Perturbations()
        if video is not None:
            vx = self._self_and_text(video, self.attn1, self.attn2, self.scale_shift_table[...],
                                     _value(self.prompt_scale_shift_table),
                                     _keep(p.video_self, index, video.x))
        if audio is not None:
            ax = self._self_and_text(audio, self.audio_attn1, self.audio_attn2,
                                     self.audio_scale_shift_table[...],
                                     _value(self.audio_prompt_scale_shift_table),
                                     _keep(p.audio_self, index, audio.x))
        if video is not None and audio is not None:
            v_table = self.scale_shift_table_a2v_ca_video[...]
            a_table = self.scale_shift_table_a2v_ca_audio[...]
            vx_norm, ax_norm = rms_norm(vx, self.eps), rms_norm(ax, self.eps)
            # audio -> video: queries video, keys/values audio
            v_scale, v_shift, v_gate = self._av_values(v_table, video, slice(0, 2))
            a_scale, a_shift, _ = self._av_values(a_table, audio, slice(0, 2))
            vx = vx + self.audio_to_video_attn(
                vx_norm * (1 + v_scale) + v_shift, ax_norm * (1 + a_scale) + a_shift,
                rope=video.cross_rope, k_rope=audio.cross_rope) * v_gate * _ones(
                    _keep(p.a2v, index, vx))
            # video -> audio, from the norms taken before the update above
            a_scale, a_shift, a_gate = self._av_values(a_table, audio, slice(2, 4))
            v_scale, v_shift, _ = self._av_values(v_table, video, slice(2, 4))
            ax = ax + self.video_to_audio_attn(
                ax_norm * (1 + a_scale) + a_shift, vx_norm * (1 + v_scale) + v_shift,
                rope=audio.cross_rope, k_rope=video.cross_rope,
                keys_sequence_parallel=True) * a_gate * _ones(   # video tokens: split
                    _keep(p.v2a, index, ax))
        if video is not None:
            vx = self._feed_forward(vx, video.ada, self.scale_shift_table[...], self.ff)
        if audio is not None:
            ax = self._feed_forward(ax, audio.ada, self.audio_scale_shift_table[...],
                                    self.audio_ff)
        return (None if video is None else video._replace(x=vx),
                None if audio is None else audio._replace(x=ax))


def _ones(keep: jax.Array | None):
    return 1.0 if keep is None else keep


def _value(p: nnx.Param | None) -> jax.Array | None:
    return None if p is None else p[...]


class _ConnectorBlock(nnx.Module):
    """``_BasicTransformerBlock1D``: RMSNorm -> self-attention -> add; RMSNorm -> FFN -> add."""

    def __init__(self, dim: int, heads: int, head_dim: int, *, gated: bool, keys: KeyGen,
                 param_dtype):
        self.attn1 = Attention(dim, heads, head_dim, context_dim=None, gated=gated, eps=1e-6,
                               keys=keys, param_dtype=param_dtype)
        self.ff = FeedForward(dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x, rope, bias):
        x = x + self.attn1(rms_norm(x, 1e-6), rope=rope, bias=bias)
        return x + self.ff(rms_norm(x, 1e-6))


class EmbeddingsConnector(nnx.Module):
    """``Embeddings1DConnector``: text features -> one stream's context (see the module
    docstring)."""

    def __init__(self, heads: int, head_dim: int, layers: int, *, registers: int,
                 max_pos: Sequence[int], gated: bool, keys: KeyGen, param_dtype):
        dim = heads * head_dim
        self.heads, self.max_pos = heads, tuple(max_pos)
        self.transformer_1d_blocks = nnx.List([
            _ConnectorBlock(dim, heads, head_dim, gated=gated, keys=keys,
                            param_dtype=param_dtype) for _ in range(layers)])
        self.learnable_registers = (init_param(keys, (registers, dim), std=1.0,
                                               dtype=param_dtype) if registers else None)

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """``x [B, L, dim]``, ``mask [B, L]`` (1 = real token) -> ``[B, L, dim]``; with
        registers every output token is valid."""
        b, n, dim = x.shape
        bias = _mask_bias(mask, x.dtype)
        if self.learnable_registers is not None:
            registers = self.learnable_registers[...].astype(x.dtype)
            if n % registers.shape[0]:
                raise VidaxError(f"LTX-2 text connector: the sequence length {n} must be a "
                                 f"multiple of its {registers.shape[0]} learnable registers")
            keep = (jnp.ones((b, n)) if mask is None else jnp.asarray(mask)) != 0
            # _replace_padded_with_learnable_registers
            order = jnp.argsort(~keep, axis=1, stable=True)          # valid tokens first
            moved = jnp.take_along_axis(x, order[..., None], axis=1)
            moved = jnp.where((jnp.arange(n) < keep.sum(1, keepdims=True))[..., None], moved, 0)
            flipped = keep[:, ::-1, None].astype(x.dtype)
            x = flipped * moved + (1 - flipped) * jnp.tile(registers, (n // registers.shape[0], 1))
            bias = None
        rope = rope_tables(jnp.arange(n, dtype=_F32)[None, None], dim=dim, num_heads=self.heads,
                           theta=CONNECTOR_THETA, max_pos=self.max_pos, middle=False)
        for block in self.transformer_1d_blocks:
            x = block(x, rope, bias)
        return rms_norm(x, 1e-6)


class LTX2DiT(nnx.Module):
    """The LTX-2.x audio-video DiT (``LTXModel``, AudioVideo) and its two text connectors."""

    def __init__(self, config: LTX2DiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        cfg = self.config = config
        d, da = cfg.inner_dim, cfg.audio_inner_dim
        kw = dict(keys=keys, param_dtype=param_dtype)
        # video
        self.patchify_proj = Linear(cfg.in_channels, d, **kw)
        self.adaln_single = AdaLayerNormSingle(d, cfg.num_ada, **kw)
        self.scale_shift_table = init_param(keys, (2, d), std=d ** -0.5, dtype=param_dtype)
        self.proj_out = Linear(d, cfg.out_channels, **kw)
        # audio
        self.audio_patchify_proj = Linear(cfg.audio_in_channels, da, **kw)
        self.audio_adaln_single = AdaLayerNormSingle(da, cfg.num_ada, **kw)
        self.audio_scale_shift_table = init_param(keys, (2, da), std=da ** -0.5,
                                                  dtype=param_dtype)
        self.audio_proj_out = Linear(da, cfg.audio_out_channels, **kw)
        # 19B: the text projections; 2.3+: prompt AdaLN
        if cfg.caption_proj_before_connector:
            self.caption_projection = self.audio_caption_projection = None
        else:
            self.caption_projection = TextProjection(cfg.caption_channels, d, **kw)
            self.audio_caption_projection = TextProjection(cfg.caption_channels, da, **kw)
        if cfg.cross_attention_adaln:
            self.prompt_adaln_single = AdaLayerNormSingle(d, 2, **kw)
            self.audio_prompt_adaln_single = AdaLayerNormSingle(da, 2, **kw)
        else:
            self.prompt_adaln_single = self.audio_prompt_adaln_single = None
        self.keyframes_abs_pos_embedding = (
            init_param(keys, (1, d), dtype=param_dtype)
            if cfg.use_keyframes_abs_pos_embedding else None)
        # audio <-> video cross-attention modulation
        self.av_ca_video_scale_shift_adaln_single = AdaLayerNormSingle(d, 4, **kw)
        self.av_ca_audio_scale_shift_adaln_single = AdaLayerNormSingle(da, 4, **kw)
        self.av_ca_a2v_gate_adaln_single = AdaLayerNormSingle(d, 1, **kw)
        self.av_ca_v2a_gate_adaln_single = AdaLayerNormSingle(da, 1, **kw)
        self.transformer_blocks = nnx.List([BasicAVTransformerBlock(cfg, **kw)
                                            for _ in range(cfg.num_layers)])
        # the text connectors (stored under the DiT's prefix)
        conn = dict(registers=cfg.connector_num_learnable_registers,
                    max_pos=cfg.connector_positional_embedding_max_pos,
                    gated=cfg.connector_apply_gated_attention, **kw)
        self.video_embeddings_connector = EmbeddingsConnector(
            cfg.connector_num_attention_heads, cfg.connector_attention_head_dim,
            cfg.connector_num_layers, **conn)
        self.audio_embeddings_connector = EmbeddingsConnector(
            cfg.audio_connector_num_attention_heads, cfg.audio_connector_attention_head_dim,
            cfg.audio_connector_num_layers, **conn)

    # ------------------------------------------------------------------ text
    def connect_text(self, video_features: jax.Array, audio_features: jax.Array,
                     mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """The connectors: text-encoder features (after ``text_embedding_projection``) ->
        the video and audio contexts. With registers (every release) all output tokens are
        valid, so the DiT then takes ``context_mask=None``. Run where the DiT's weights lie
        in host memory (``--offload model``), the connectors are fetched alone."""
        video, audio = offload.fetch((self.video_embeddings_connector,
                                      self.audio_embeddings_connector))
        return video(jnp.asarray(video_features), mask), audio(jnp.asarray(audio_features), mask)

    # ------------------------------------------------------------------ forward
    def _prepare(self, m: Modality, other: Modality | None,
                 audio: bool) -> tuple[_Stream, jax.Array]:
        """``MultiModalTransformerArgsPreprocessor.prepare``: the stream's block inputs and its
        embedded timestep."""
        cfg = self.config
        pre = "audio_" if audio else ""
        latent = jnp.asarray(m.latent)
        b, n, _ = latent.shape
        dtype = latent.dtype
        x = getattr(self, pre + "patchify_proj")(latent)
        if (not audio and self.keyframes_abs_pos_embedding is not None
                and m.keyframes_mask is not None):
            # apply_keyframes_absolute_embedding (the authors' later code; None: no token)
            keyframes = (jnp.asarray(m.keyframes_mask).reshape(b, n, 1) > 0).astype(dtype)
            x = x + keyframes * self.keyframes_abs_pos_embedding[...].astype(dtype)
        scale = jnp.float32(cfg.timestep_scale_multiplier)
        t = jnp.asarray(m.timesteps, _F32).reshape(b, -1)
        if t.shape[1] not in (1, n):
            raise VidaxError(f"LTX-2 DiT timesteps {tuple(t.shape)} are neither per sample "
                             f"({b}) nor per token ({b} x {n})")
        ada, embedded = getattr(self, pre + "adaln_single")(t * scale, b, dtype)
        prompt_ada = None
        prompt_adaln = getattr(self, pre + "prompt_adaln_single")
        if prompt_adaln is not None:
            prompt_ada, _ = prompt_adaln(jnp.asarray(m.sigma, _F32) * scale, b, dtype)
        context = jnp.asarray(m.context, dtype)
        projection = getattr(self, pre + "caption_projection")
        if projection is not None:
            context = projection(context)
        dim = cfg.audio_inner_dim if audio else cfg.inner_dim
        heads = cfg.audio_num_attention_heads if audio else cfg.num_attention_heads
        max_pos = (cfg.audio_positional_embedding_max_pos if audio
                   else cfg.positional_embedding_max_pos)
        positions = jnp.asarray(m.positions, _F32)
        rope = rope_tables(positions, dim=dim, num_heads=heads,
                           theta=cfg.positional_embedding_theta, max_pos=max_pos)
        stream = _Stream(x, context, _mask_bias(m.context_mask, dtype), ada, prompt_ada, rope,
                         None, None, None)
        if other is None:
            return stream, embedded
        # the AV cross-attention inputs, from the other stream's sigma
        cross_max = max(cfg.positional_embedding_max_pos[0],
                        cfg.audio_positional_embedding_max_pos[0])
        cross_rope = rope_tables(positions[:, :1], dim=cfg.audio_cross_attention_dim,
                                 num_heads=heads, theta=cfg.positional_embedding_theta,
                                 max_pos=(cross_max,))
        sigma = jnp.asarray(other.sigma, _F32).reshape(b, 1) * scale
        factor = jnp.float32(cfg.av_ca_timestep_scale_multiplier / cfg.timestep_scale_multiplier)
        kind = "audio" if audio else "video"
        own = cfg.av_ca_scale_shift_timestep == "own"
        cross_ada, _ = getattr(self, f"av_ca_{kind}_scale_shift_adaln_single")(
            t * scale if own else sigma, b, dtype)
        gate = getattr(self, "av_ca_v2a_gate_adaln_single" if audio
                       else "av_ca_a2v_gate_adaln_single")
        cross_gate, _ = gate(sigma * factor, b, dtype)
        return stream._replace(cross_rope=cross_rope, cross_ada=cross_ada,
                               cross_gate=cross_gate), embedded

    def _output(self, x, embedded, audio: bool) -> jax.Array:
        """``LTXModel._process_output``."""
        pre = "audio_" if audio else ""
        table = getattr(self, pre + "scale_shift_table")[...].astype(x.dtype)
        values = table[None, None] + embedded[:, :, None]
        shift, scale = values[:, :, 0], values[:, :, 1]
        x = layer_norm(x, self.config.norm_eps) * (1 + scale) + shift
        return getattr(self, pre + "proj_out")(x)

    def __call__(self, video: Modality | None, audio: Modality | None = None, *,
                 perturb: Perturbations | None = None
                 ) -> tuple[jax.Array | None, jax.Array | None]:
        """The velocities ``(video [B, Tv, out_channels], audio [B, Ta, audio_out_channels])``
        of ``LTXModel.forward``; a stream passed as None is not run (its output is None), and
        then the audio<->video attention is skipped. ``perturb``: attention skipped per block
        and sample (:class:`Perturbations`; the module docstring)."""
        if video is None and audio is None:
            raise VidaxError("LTX-2 DiT: pass a video or an audio Modality (or both)")
        v = a = v_emb = a_emb = None
        if video is not None:
            v, v_emb = self._prepare(video, audio, audio=False)
        if audio is not None:
            a, a_emb = self._prepare(audio, video, audio=True)

        def run_block(numbered, xs):  # the carry: the streams' tokens (video, audio)
            index, block = numbered
            vs, as_ = block(None if v is None else v._replace(x=xs[0]),
                            None if a is None else a._replace(x=xs[1]), perturb, index)
            return (None if vs is None else vs.x, None if as_ is None else as_.x)

        vx, ax = run_blocks((None if v is None else v.x, None if a is None else a.x),
                            (list(enumerate(self.transformer_blocks)), run_block))
        return (None if v is None else self._output(vx, v_emb, audio=False),
                None if a is None else self._output(ax, a_emb, audio=True))
