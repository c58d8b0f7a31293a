"""The CogVideoX / CogVideoX1.5 diffusion transformer, after diffusers'
``CogVideoXTransformer3DModel`` (``models/transformers/cogvideox_transformer_3d.py``).

One class covers the five released DiTs; the config decides the structural kind:

==============  =============================  ==============================================
variant          patch embedding                position information
==============  =============================  ==============================================
2b               Conv2d p x p per latent frame  3D sincos table added to the tokens
5b               Conv2d p x p per latent frame  3D RoPE (linspace grid over a crop region)
5b-i2v           Conv2d, 32 input channels      3D RoPE + learned table ``pos_embedding``
1.5-5b           Linear over (C, p_t, p, p)     3D RoPE (integer "slice" grid)
1.5-5b-i2v       Linear, 32 input channels      3D RoPE, plus the ``ofs`` embedding
==============  =============================  ==============================================

Module attribute names follow diffusers' modules so the mapper is three renames; where torch
uses ``nn.Sequential`` / ``ModuleList`` indices the names here are ``attn1.to_out``
(``attn1.to_out.0``) and ``ff.proj_in`` / ``ff.proj_out`` (``ff.net.0.proj`` / ``ff.net.2``),
as in the LTX-Video port.

Layout: channels-last. Latents are ``[B, T, H, W, C]`` (image-to-video: the noisy latents
then the image latents on channels, as the pipelines concatenate them); tokens are the
patch grid in (frame, row, column) order, after the text tokens. Text and video tokens are
kept apart between blocks (diffusers does the same) and joined for the one joint attention
and the shared FFN.

Apart from the 5b-i2v learned table (a parameter, stored in its file) the model holds no
positional table: the sincos table (:func:`sincos_pos_embed`) and the RoPE tables
(:func:`rope_tables`) are computed on the host (numpy, float64) from the token grid at call
time; a pipeline can call the same functions.

Precision (``compute_dtype`` of :meth:`CogVideoXDiT.__call__`). Parameters are used in
whatever dtype they are stored in (cast at use). float32 (the default) runs everything in
float32. bfloat16 runs the patch embedding, the text projection, the attention's q/k/v/output
Linears, the attention itself and the FFN in bfloat16 (float32 accumulation, GELU evaluated in
float32), and keeps float32 islands at "highest" matmul precision: the timestep (and ofs)
embedding, every modulation (``LayerNormZero``'s and the output ``AdaLayerNorm``'s Linear of
``silu(temb)``), the LayerNorm statistics (the q/k norms included: q and k return to float32
for their norm and RoPE, then go to the attention in bfloat16), the absolute position table,
and the whole output head (``norm_final``, ``norm_out``, ``proj_out``). The residual streams
(text and video) stay float32. diffusers runs the released models entirely in bf16/fp16
(weights, activations and residual stream); vidax follows the policy of its other DiTs
instead (float32 islands and residual, docs/models/cogvideox.md), which is the more accurate
of the two.

The sinusoidal timestep embedding keeps diffusers' float32 phases
(:func:`vidax.nn.embeddings.diffusers_timestep_embedding`); the position tables are float64
host math, cast to float32 (diffusers builds its RoPE tables in float32: they agree within
~2e-6 at the released sizes).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.cogvideox.config import CogVideoXDiTConfig
from vidax.nn.attention import attention
from vidax.nn.embeddings import diffusers_timestep_embedding
from vidax.nn.layers import Conv, KeyGen, LayerNorm, Linear
from vidax.nn.rope import apply_rope
from vidax.nn.step_cache import run_blocks

_F32 = jnp.float32
#: The DiT's compute dtypes (see the module docstring).
COMPUTE_DTYPES = (jnp.float32, jnp.bfloat16)
#: RoPE base frequency of every release (diffusers' ``get_3d_rotary_pos_embed`` default).
ROPE_THETA = 10000.0
#: The query/key LayerNorm eps (diffusers' ``Attention(qk_norm="layer_norm", eps=1e-6)``),
#: independent of ``norm_eps``.
QK_NORM_EPS = 1e-6


def _gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU (tanh approximation), evaluated in float32 and rounded once to ``x``'s dtype."""
    return jax.nn.gelu(x.astype(_F32), approximate=True).astype(x.dtype)


# ----------------------------------------------------------------------------- tables
def sincos_pos_embed(grid: tuple[int, int, int], dim: int, *,
                     spatial_interpolation_scale: float = 1.875,
                     temporal_interpolation_scale: float = 1.0) -> np.ndarray:
    """The 2b's fixed 3D sincos table ``[t*h*w, dim]`` (float64), tokens in (t, h, w) order;
    mirrors diffusers' ``get_3d_sincos_pos_embed``.

    Per token: ``[temporal (dim/4) | column (3dim/8) | row (3dim/8)]``, each part
    ``[sin | cos]`` of ``position * 10000 ** (-i / half)``; positions are the indices divided
    by the interpolation scales, in float32 as diffusers computes them. (diffusers' spatial
    half names its parts h, w but feeds the column coordinate to the first.)
    """
    t, h, w = grid

    def one_axis(n: int, scale: float, width: int) -> np.ndarray:
        pos = (np.arange(n, dtype=np.float32) / np.float32(scale)).astype(np.float64)
        omega = 1.0 / 10000.0 ** (np.arange(width // 2, dtype=np.float64) / (width / 2.0))
        phase = np.outer(pos, omega)
        return np.concatenate([np.sin(phase), np.cos(phase)], axis=1)

    spatial = 3 * dim // 4
    emb_t = one_axis(t, temporal_interpolation_scale, dim // 4)
    emb_h = one_axis(h, spatial_interpolation_scale, spatial // 2)
    emb_w = one_axis(w, spatial_interpolation_scale, spatial // 2)
    table = np.concatenate([
        np.broadcast_to(emb_t[:, None, None], (t, h, w, emb_t.shape[1])),
        np.broadcast_to(emb_w[None, None, :], (t, h, w, emb_w.shape[1])),
        np.broadcast_to(emb_h[None, :, None], (t, h, w, emb_h.shape[1])),
    ], axis=-1)
    return table.reshape(t * h * w, dim)


def _resize_crop_region(grid_hw: tuple[int, int], base_w: int, base_h: int):
    """The crop of a ``base_h x base_w`` grid that the token grid fills after an
    aspect-preserving resize (the pipeline's ``get_resize_crop_region_for_grid``)."""
    h, w = grid_hw
    if h / w > base_h / base_w:
        rh, rw = base_h, int(round(base_h / h * w))
    else:
        rw, rh = base_w, int(round(base_w / w * h))
    top, left = int(round((base_h - rh) / 2.0)), int(round((base_w - rw) / 2.0))
    return (top, left), (top + rh, left + rw)


def rope_positions(cfg: CogVideoXDiTConfig, grid: tuple[int, int, int]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (frame, row, column) RoPE positions of a token grid, float64, as the diffusers
    pipelines' ``_prepare_rotary_positional_embeddings`` builds them.

    CogVideoX 1.0: ``linspace`` grids over the region a resize-crop of the grid occupies in
    the sample grid (``sample_height / p x sample_width / p``), frames ``0 .. t-1``.
    CogVideoX1.5 (``grid_type="slice"``): integer positions, which must fit the sample grid.
    """
    t, h, w = grid
    base_h, base_w = cfg.sample_height // cfg.patch_size, cfg.sample_width // cfg.patch_size
    if cfg.patch_size_t is None:
        (top, left), (bottom, right) = _resize_crop_region((h, w), base_w, base_h)
        # linspace(start, stop * (n - 1) / n, n), as diffusers writes it.
        rows = np.linspace(top, bottom * (h - 1) / h, h)
        cols = np.linspace(left, right * (w - 1) / w, w)
    else:
        if h > base_h or w > base_w:
            raise VidaxError(f"CogVideoX1.5 RoPE covers at most {base_h} x {base_w} patches "
                             f"(sample_height/width {cfg.sample_height}/{cfg.sample_width}); "
                             f"the latents give {h} x {w}")
        rows, cols = np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64)
    return np.arange(t, dtype=np.float64), rows, cols


def rope_tables(cfg: CogVideoXDiTConfig, grid: tuple[int, int, int], *, dtype=_F32
                ) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[t*h*w, head_dim / 2]`` for :func:`vidax.nn.rope.apply_rope` (the
    interleaved pairs diffusers rotates), mirroring ``get_3d_rotary_pos_embed``: the head's
    pairs split t/h/w = d/8, 3d/16, 3d/16, each axis with frequencies
    ``theta ** (-2i / axis_dims)``, computed in float64 on the host."""
    d = cfg.attention_head_dim
    axis_dims = (d // 4, d // 8 * 3, d // 8 * 3)
    t, h, w = grid
    angles = []
    for axis, (pos, dim) in enumerate(zip(rope_positions(cfg, grid), axis_dims)):
        freqs = 1.0 / ROPE_THETA ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        shape = [1, 1, 1, dim // 2]
        shape[axis] = len(pos)
        angles.append(np.broadcast_to(np.outer(pos, freqs).reshape(shape), (t, h, w, dim // 2)))
    table = np.concatenate(angles, axis=-1).reshape(t * h * w, d // 2)
    return jnp.asarray(np.cos(table), dtype), jnp.asarray(np.sin(table), dtype)


# ----------------------------------------------------------------------------- modules
class TimestepEmbedding(nnx.Module):
    """Linear -> SiLU -> Linear (diffusers' ``TimestepEmbedding``)."""

    def __init__(self, in_dim: int, out_dim: int, *, keys: KeyGen, param_dtype):
        self.linear_1 = Linear(in_dim, out_dim, keys=keys, param_dtype=param_dtype)
        self.linear_2 = Linear(out_dim, out_dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(jax.nn.silu(self.linear_1(x)))


class PatchEmbed(nnx.Module):
    """Mirrors ``CogVideoXPatchEmbed``: text projection, video patches, the absolute table.

    ``proj`` is a Conv2d applied to every latent frame (1.0) or a Linear over the flattened
    ``(C, p_t, p, p)`` patch (1.5; it has a bias whatever ``patch_bias`` says, as in
    diffusers). ``pos_embedding`` (5b-i2v only) is the stored learned table over
    ``[text; video]`` tokens at the sample size.
    """

    def __init__(self, cfg: CogVideoXDiTConfig, *, keys: KeyGen, param_dtype):
        self.cfg = cfg
        p, dim = cfg.patch_size, cfg.inner_dim
        if cfg.patch_size_t is None:
            self.proj = Conv(cfg.in_channels, dim, (p, p), stride=(p, p), bias=cfg.patch_bias,
                             keys=keys, param_dtype=param_dtype)
        else:
            self.proj = Linear(cfg.in_channels * p * p * cfg.patch_size_t, dim, keys=keys,
                               param_dtype=param_dtype)
        self.text_proj = Linear(cfg.text_embed_dim, dim, keys=keys, param_dtype=param_dtype)
        if cfg.use_learned_positional_embeddings:
            rows = cfg.max_text_seq_length + int(np.prod(cfg.sample_grid))
            self.pos_embedding = nnx.Param(jnp.zeros((1, rows, dim), param_dtype))

    def __call__(self, text: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``text [B, L, text_embed_dim]``, ``x [B, T, H, W, C]`` in the compute dtype ->
        float32 (text tokens ``[B, L, D]``, video tokens ``[B, N, D]``) with the absolute
        table added."""
        cfg = self.cfg
        b, frames, height, width, channels = x.shape
        p = cfg.patch_size
        text = self.text_proj(text).astype(_F32)
        if cfg.patch_size_t is None:
            y = self.proj(x.reshape(b * frames, height, width, channels))
            video = y.reshape(b, -1, cfg.inner_dim)
        else:
            pt = cfg.patch_size_t
            y = x.reshape(b, frames // pt, pt, height // p, p, width // p, p, channels)
            y = y.transpose(0, 1, 3, 5, 7, 2, 4, 6)   # features in (C, p_t, p, p) order
            video = self.proj(y.reshape(b, -1, channels * pt * p * p))
        video = video.astype(_F32)
        if cfg.has_pos_table:
            grid = (frames, height // p, width // p)
            table = self._pos_table(grid, text.shape[1])
            text, video = text + table[:, :text.shape[1]], video + table[:, text.shape[1]:]
        return text, video

    def _pos_table(self, grid: tuple[int, int, int], text_len: int) -> jax.Array:
        """The table over ``[text; video]`` tokens, as ``CogVideoXPatchEmbed.forward``
        picks it: the learned one at the sample size; elsewhere the sincos table (text rows
        zero) -- which the learned model also gets at another frame count (diffusers falls
        back silently; another resolution is an error there and here)."""
        cfg = self.cfg
        if text_len != cfg.max_text_seq_length:
            raise VidaxError(f"CogVideoX DiT: the positional table covers exactly "
                             f"max_text_seq_length = {cfg.max_text_seq_length} text tokens; "
                             f"got {text_len} (pad the prompt embeddings to that length)")
        if cfg.use_learned_positional_embeddings:
            if grid[1:] != cfg.sample_grid[1:]:
                raise VidaxError(f"CogVideoX DiT with a learned positional table (5b-i2v) "
                                 f"runs only at its sample resolution: {cfg.sample_grid[1:]} "
                                 f"patches, i.e. latents {cfg.sample_height} x "
                                 f"{cfg.sample_width}; got {grid[1:]} patches")
            if grid == cfg.sample_grid:
                return self.pos_embedding[...].astype(_F32)
        video = sincos_pos_embed(grid, cfg.inner_dim,
                                 spatial_interpolation_scale=cfg.spatial_interpolation_scale,
                                 temporal_interpolation_scale=cfg.temporal_interpolation_scale)
        table = np.concatenate([np.zeros((text_len, cfg.inner_dim)), video])
        return jnp.asarray(table[None], _F32)


class LayerNormZero(nnx.Module):
    """Mirrors ``CogVideoXLayerNormZero``: one Linear of ``silu(temb)`` gives (shift, scale,
    gate) for the video tokens and the same three for the text tokens; one LayerNorm."""

    def __init__(self, cfg: CogVideoXDiTConfig, *, keys: KeyGen, param_dtype):
        self.linear = Linear(cfg.time_embed_dim, 6 * cfg.inner_dim, keys=keys,
                             param_dtype=param_dtype)
        self.norm = LayerNorm(cfg.inner_dim, eps=cfg.norm_eps,
                              affine=cfg.norm_elementwise_affine, param_dtype=param_dtype)

    def __call__(self, x: jax.Array, text: jax.Array, temb: jax.Array):
        """float32 ``x``, ``text`` -> float32 (modulated video, modulated text, video gate,
        text gate); gates ``[B, 1, D]``. The modulation is a float32 island."""
        with jax.default_matmul_precision("highest"):
            mod = self.linear(jax.nn.silu(temb))
        shift, scale, gate, t_shift, t_scale, t_gate = (
            c[:, None] for c in jnp.split(mod, 6, axis=-1))
        return (self.norm(x) * (1 + scale) + shift, self.norm(text) * (1 + t_scale) + t_shift,
                gate, t_gate)


class JointAttention(nnx.Module):
    """Mirrors ``Attention`` with ``CogVideoXAttnProcessor2_0``: one full attention over
    ``[text; video]``; per-head LayerNorm on q and k, then RoPE on the video tokens' q and
    k only."""

    def __init__(self, cfg: CogVideoXDiTConfig, *, keys: KeyGen, param_dtype):
        dim, bias = cfg.inner_dim, cfg.attention_bias
        self.heads = cfg.num_attention_heads
        self.to_q = Linear(dim, dim, bias=bias, keys=keys, param_dtype=param_dtype)
        self.to_k = Linear(dim, dim, bias=bias, keys=keys, param_dtype=param_dtype)
        self.to_v = Linear(dim, dim, bias=bias, keys=keys, param_dtype=param_dtype)
        self.norm_q = LayerNorm(cfg.attention_head_dim, eps=QK_NORM_EPS, param_dtype=param_dtype)
        self.norm_k = LayerNorm(cfg.attention_head_dim, eps=QK_NORM_EPS, param_dtype=param_dtype)
        self.to_out = Linear(dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array, text: jax.Array,
                 rope: tuple[jax.Array, jax.Array] | None) -> tuple[jax.Array, jax.Array]:
        """``x``, ``text`` in the compute dtype -> (video, text) outputs in float32; q and k
        are normed and rotated in float32, then attended in the compute dtype."""
        n_text, cd = text.shape[1], x.dtype
        h = jnp.concatenate([text, x], axis=1)
        heads = lambda y: y.reshape(*y.shape[:2], self.heads, -1)  # noqa: E731
        q = self.norm_q(heads(self.to_q(h)).astype(_F32))
        k = self.norm_k(heads(self.to_k(h)).astype(_F32))
        if rope is not None:
            q = jnp.concatenate([q[:, :n_text], apply_rope(q[:, n_text:], *rope)], axis=1)
            k = jnp.concatenate([k[:, :n_text], apply_rope(k[:, n_text:], *rope)], axis=1)
        out = attention(q.astype(cd), k.astype(cd), heads(self.to_v(h)))
        out = self.to_out(out.reshape(h.shape)).astype(_F32)
        return out[:, n_text:], out[:, :n_text]


class FeedForward(nnx.Module):
    """Linear -> GELU (tanh approximation) -> Linear, 4x wide (diffusers' ``FeedForward``
    with ``gelu-approximate``)."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        self.proj_in = Linear(dim, 4 * dim, keys=keys, param_dtype=param_dtype)
        self.proj_out = Linear(4 * dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj_out(_gelu_tanh(self.proj_in(x)))


class CogVideoXBlock(nnx.Module):
    """Mirrors ``CogVideoXBlock``: expert-AdaLN modulated joint attention, then the FFN
    shared by both streams, each residual gated per stream."""

    def __init__(self, cfg: CogVideoXDiTConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.norm1 = LayerNormZero(cfg, **kw)
        self.attn1 = JointAttention(cfg, **kw)
        self.norm2 = LayerNormZero(cfg, **kw)
        self.ff = FeedForward(cfg.inner_dim, **kw)

    def __call__(self, x, text, temb, rope, cd):
        """float32 streams ``x`` (video), ``text`` -> the same; ``cd``: the compute dtype of
        the attention and the FFN."""
        n_text = text.shape[1]
        nx, nt, gate, t_gate = self.norm1(x, text, temb)
        ax, at = self.attn1(nx.astype(cd), nt.astype(cd), rope)
        x, text = x + gate * ax, text + t_gate * at
        nx, nt, gate, t_gate = self.norm2(x, text, temb)
        ff = self.ff(jnp.concatenate([nt, nx], axis=1).astype(cd)).astype(_F32)
        return x + gate * ff[:, n_text:], text + t_gate * ff[:, :n_text]


class AdaLayerNormOut(nnx.Module):
    """Mirrors ``AdaLayerNorm(chunk_dim=1)`` as CogVideoX uses it: ``linear(silu(temb))``
    chunked as (shift, scale) -- the reverse of the usual order -- around a LayerNorm."""

    def __init__(self, cfg: CogVideoXDiTConfig, *, keys: KeyGen, param_dtype):
        self.linear = Linear(cfg.time_embed_dim, 2 * cfg.inner_dim, keys=keys,
                             param_dtype=param_dtype)
        self.norm = LayerNorm(cfg.inner_dim, eps=cfg.norm_eps,
                              affine=cfg.norm_elementwise_affine, param_dtype=param_dtype)

    def __call__(self, x: jax.Array, temb: jax.Array) -> jax.Array:
        shift, scale = (c[:, None] for c in jnp.split(self.linear(jax.nn.silu(temb)), 2, -1))
        return self.norm(x) * (1 + scale) + shift


class CogVideoXDiT(nnx.Module):
    """The CogVideoX / CogVideoX1.5 DiT: ``CogVideoXTransformer3DModel`` in Flax NNX."""

    def __init__(self, config: CogVideoXDiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.patch_embed = PatchEmbed(cfg, **kw)
        self.time_embedding = TimestepEmbedding(cfg.inner_dim, cfg.time_embed_dim, **kw)
        if cfg.ofs_embed_dim:
            self.ofs_embedding = TimestepEmbedding(cfg.ofs_embed_dim, cfg.ofs_embed_dim, **kw)
        self.transformer_blocks = nnx.List([CogVideoXBlock(cfg, **kw)
                                            for _ in range(cfg.num_layers)])
        self.norm_final = LayerNorm(cfg.inner_dim, eps=cfg.norm_eps,
                                    affine=cfg.norm_elementwise_affine, param_dtype=param_dtype)
        self.norm_out = AdaLayerNormOut(cfg, **kw)
        patch_volume = cfg.patch_size ** 2 * (cfg.patch_size_t or 1)
        self.proj_out = Linear(cfg.inner_dim, patch_volume * cfg.out_channels, **kw)

    def __call__(self, x: jax.Array, context: jax.Array, t: jax.Array, *,
                 ofs: jax.Array | float | None = None, compute_dtype=jnp.float32) -> jax.Array:
        """The prediction for latents ``x`` (v-prediction in the released models); mirrors
        ``CogVideoXTransformer3DModel.forward``.

        Args:
          x: latents ``[B, T, H, W, in_channels]``; image-to-video: the noisy latents then
            the image latents, concatenated on channels. ``H, W`` divisible by
            ``patch_size``; ``T`` by ``patch_size_t`` (1.5; the pipeline pads frames).
          context: T5 embeddings ``[B, L, text_embed_dim]``; every token is attended (no
            mask). With a positional table (2b, 5b-i2v) ``L`` must be
            ``max_text_seq_length`` (226).
          t: timesteps ``[B]`` (or a scalar for the whole batch).
          ofs: 1.5-I2V only: the ``ofs`` condition, ``[B]`` or a scalar (the pipeline
            always passes 2.0).
          compute_dtype: ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).

        Returns:
          ``[B, T, H, W, out_channels]``, float32.
        """
        cfg = self.config
        cd = jnp.dtype(compute_dtype)
        if cd not in COMPUTE_DTYPES:
            raise VidaxError(f"CogVideoX DiT compute_dtype must be float32 or bfloat16, got {cd}")
        x = jnp.asarray(x, _F32)
        b, frames, height, width, channels = x.shape
        p, pt = cfg.patch_size, cfg.patch_size_t or 1
        if channels != cfg.in_channels or height % p or width % p or frames % pt:
            raise VidaxError(f"CogVideoX DiT input {tuple(x.shape)} must be [B, T, H, W, "
                             f"{cfg.in_channels}] with H, W divisible by {p} and T by {pt}")
        if (ofs is None) == bool(cfg.ofs_embed_dim):
            raise VidaxError("CogVideoX DiT: ofs is given exactly to the models with an ofs "
                             f"embedding (1.5-5b-i2v); this one has ofs_embed_dim "
                             f"{cfg.ofs_embed_dim}")
        grid = (frames // pt, height // p, width // p)

        with jax.default_matmul_precision("highest"):
            temb = self.time_embedding(self._sinusoid(t, b, cfg.inner_dim))
            if cfg.ofs_embed_dim:
                temb = temb + self.ofs_embedding(self._sinusoid(ofs, b, cfg.ofs_embed_dim))

        text, video = self.patch_embed(jnp.asarray(context, _F32).astype(cd), x.astype(cd))
        rope = rope_tables(cfg, grid) if cfg.use_rotary_positional_embeddings else None
        # The blocks (or what a step cache puts in their place: vidax.nn.step_cache) carry
        # (video, text); TeaCache measures the time (and ofs) embedding ``temb``, as its
        # authors do (ali-vilab/TeaCache ``TeaCache4CogVideoX1.5``: ``emb``).
        video, text = run_blocks((video, text), (self.transformer_blocks, lambda block, s: block(
            *s, temb, rope, cd)), signal=temb)
        with jax.default_matmul_precision("highest"):   # the output head: a float32 island
            video = self.proj_out(self.norm_out(self.norm_final(video), temb))
        return self.unpatchify(video, grid)

    def _sinusoid(self, t, batch: int, dim: int) -> jax.Array:
        """diffusers' ``Timesteps(dim, flip_sin_to_cos, freq_shift)`` of ``t`` (a scalar or
        ``[B]``), float32 phases as diffusers computes them."""
        t = jnp.asarray(t, _F32)
        if t.ndim > 1 or (t.ndim == 1 and t.shape[0] not in (1, batch)):
            raise VidaxError(f"CogVideoX DiT timesteps / ofs of shape {tuple(t.shape)}: give "
                             f"a scalar or [B] (B = {batch})")
        t = jnp.broadcast_to(t.reshape(-1), (batch,))
        return diffusers_timestep_embedding(t, dim, flip_sin_to_cos=self.config.flip_sin_to_cos,
                                            downscale_freq_shift=self.config.freq_shift)

    def unpatchify(self, x: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
        """``[B, t*h*w, C*p_t*p*p]`` (features in (C, p_t, p, p) order, as ``proj_out``
        writes them) -> ``[B, t*p_t, h*p, w*p, C]``."""
        cfg = self.config
        (f, h, w), p, pt, c = grid, cfg.patch_size, cfg.patch_size_t or 1, cfg.out_channels
        x = x.reshape(x.shape[0], f, h, w, c, pt, p, p)
        x = x.transpose(0, 1, 5, 2, 6, 3, 7, 4)
        return x.reshape(x.shape[0], f * pt, h * p, w * p, c)
