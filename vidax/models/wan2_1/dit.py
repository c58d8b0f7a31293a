"""The Wan2.1 diffusion transformer (DiT), after the authors' ``wan.modules.model.WanModel``.

Mirrors Wan-Video/Wan2.1 ``wan/modules/model.py`` (t2v, i2v, flf2v; the class is the same
for every release, only the config differs). Module attribute names follow the authors'
modules so the checkpoint mapper stays mechanical; where torch uses ``nn.Sequential``
indices the names here are:

=============================  ===================================
authors (torch)                vidax
=============================  ===================================
``text_embedding.0`` / ``.2``  ``text_embedding.fc1`` / ``.fc2``
``time_embedding.0`` / ``.2``  ``time_embedding.fc1`` / ``.fc2``
``time_projection.1``          ``time_projection.fc``
``blocks.N.ffn.0`` / ``.2``    ``blocks.N.ffn.fc1`` / ``.fc2``
``img_emb.proj.0/1/3/4``       ``img_emb.norm1/fc1/fc2/norm2``
=============================  ===================================

Wan2.2's ``WanModel`` is this class with one forward-pass feature, which this module has
too: the timestep may be given per token (``t [B, L]``); the time embedding, the 6-way
projection and the block and head modulations are then per token (TI2V-5B's
image-to-video gives the first latent frame's tokens t = 0).

Layout: channels-last and batched. Latents are ``[B, T, H, W, C]``; every sample of a batch
has the same ``T, H, W`` (the authors' ragged lists are not needed here), so no token is
padding and self-attention needs no mask.

Precision (``compute_dtype`` of :meth:`WanDiT.__call__`). Parameters are used in whatever
dtype they are stored in (cast at use); the residual stream, the latents in and the flow out
are float32 always. ``compute_dtype=float32`` (the default) runs everything in float32.
``compute_dtype=bfloat16`` reproduces how the authors run the DiT -- float32 weights under
``torch.amp.autocast(dtype=bfloat16)`` -- op by op:

* bfloat16 (operands cast, float32 accumulation): the patch embedding (its output stays
  bfloat16 until the first residual add, so block 0's ``norm1`` output is rounded to it, as
  the authors' ``type_as(x)``), every Linear of the text embedding, of ``img_emb`` (fc1, fc2)
  and of the blocks (q, k, v, o of both attentions, k_img / v_img, the FFN) with the GELUs
  between them (evaluated in float32 and rounded once, as PyTorch's kernels do), and the
  attention itself (q k^T, and probabilities x v; the softmax is float32, as in
  flash-attention).
* float32 islands, as the authors keep them: the sinusoidal embedding (float64), the
  ``time_embedding`` / ``time_projection`` MLPs, the modulation arithmetic, every LayerNorm
  (autocast runs ``layer_norm`` in float32; ``img_emb``'s two included), the q/k RMSNorms
  (``WanRMSNorm``: float32 statistics, the normalised value rounded to the Linear output's
  bfloat16, then the float32 weight), RoPE, the gated residual adds, and the whole ``head``
  (norm, modulation and its Linear). The float32 islands' matmuls run at "highest"
  precision, so a GPU's TF32 default cannot touch them (PyTorch's float32 matmuls do not use
  TF32 either).

One difference remains in ``vidax.nn.layers``: its bfloat16 Linear/Conv round the product to
bfloat16 and then add the (bfloat16) bias, a second rounding; PyTorch adds the bias in the
float32 accumulator and rounds once.

The sinusoidal timestep embedding is computed in float64 as theirs is
(:func:`vidax.nn.embeddings.sinusoidal_embedding`) and the RoPE tables come from float64 host
math (:mod:`vidax.nn.rope`).
"""

from __future__ import annotations

from math import prod
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.wan2_1.config import CLIP_DIM, CLIP_TOKENS, FLF2V_CLIP_TOKENS, WanDiTConfig
from vidax.nn.attention import attention
from vidax.nn.embeddings import sinusoidal_embedding
from vidax.nn.layers import Conv, KeyGen, LayerNorm, Linear, RMSNorm, init_param
from vidax.nn.rope import apply_rope, axial_rope
from vidax.nn.step_cache import run_blocks

#: The DiT's compute dtypes (see the module docstring).
COMPUTE_DTYPES = (jnp.float32, jnp.bfloat16)
_F32 = jnp.float32
# ``img_emb`` uses torch.nn.LayerNorm's default eps, not the model's.
IMG_EMB_EPS = 1e-5


class _MLP(nnx.Module):
    """Linear -> activation -> Linear (the authors' two-Linear ``nn.Sequential`` stacks)."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, act: Callable, *,
                 keys: KeyGen, param_dtype):
        self.fc1 = Linear(in_dim, hidden_dim, keys=keys, param_dtype=param_dtype)
        self.fc2 = Linear(hidden_dim, out_dim, keys=keys, param_dtype=param_dtype)
        self.act = act

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(self.act(self.fc1(x)))


# The GELUs evaluate in float32 and round once to their input's dtype, as PyTorch's kernels
# do for bfloat16 tensors (a bfloat16 formula evaluated op by op would round at every op).
def _gelu_tanh(x):
    return jax.nn.gelu(x.astype(_F32), approximate=True).astype(x.dtype)


def _gelu(x):
    return jax.nn.gelu(x.astype(_F32), approximate=False).astype(x.dtype)


def _maybe(norm, x):
    return x if norm is None else norm(x)


def _qk_norm(norm: RMSNorm | None, x: jax.Array) -> jax.Array:
    """The authors' ``WanRMSNorm`` on a Linear output ``x``, returning float32:
    ``_norm(x.float()).type_as(x) * weight`` -- statistics in float32, the normalised value
    rounded to ``x``'s dtype (a no-op in float32), then scaled by the float32 weight."""
    xf = x.astype(_F32)
    if norm is None:
        return xf
    y = xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + norm.eps)
    return y.astype(x.dtype).astype(_F32) * norm.scale[...].astype(_F32)


class TimeProjection(nnx.Module):
    """SiLU -> Linear(dim, 6*dim): the authors' ``time_projection``."""

    def __init__(self, dim: int, *, keys: KeyGen, param_dtype):
        self.fc = Linear(dim, 6 * dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, e: jax.Array) -> jax.Array:
        return self.fc(jax.nn.silu(e))


class WanSelfAttention(nnx.Module):
    """Mirrors ``WanSelfAttention``: q/k RMSNorm over the whole dim, then 3D RoPE on q, k."""

    def __init__(self, dim: int, num_heads: int, *, qk_norm: bool, eps: float, keys: KeyGen,
                 param_dtype):
        self.num_heads = num_heads
        self.q = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.k = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.v = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.o = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.norm_q = RMSNorm(dim, eps=eps, param_dtype=param_dtype) if qk_norm else None
        self.norm_k = RMSNorm(dim, eps=eps, param_dtype=param_dtype) if qk_norm else None

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:2], self.num_heads, -1)

    def __call__(self, x: jax.Array, rope: tuple[jax.Array, jax.Array], cd=_F32) -> jax.Array:
        """``cd``: the compute dtype of the Linears and the attention; the q/k norms and RoPE
        take their float32 view of the Linear outputs."""
        x = x.astype(cd)
        q = apply_rope(self._heads(_qk_norm(self.norm_q, self.q(x))), *rope)
        k = apply_rope(self._heads(_qk_norm(self.norm_k, self.k(x))), *rope)
        out = attention(q.astype(cd), k.astype(cd), self._heads(self.v(x)),
                        sequence_parallel=True)
        return self.o(out.reshape(x.shape))


class WanCrossAttention(nnx.Module):
    """Mirrors ``WanT2VCrossAttention`` and, with ``image_branch``, ``WanI2VCrossAttention``.

    The text keys are all ``text_len`` tokens, zero padding included: the authors pass
    ``context_lens=None``, so nothing is masked. The image branch attends the same queries
    over the CLIP tokens with its own k/v and adds the result before ``o``.
    """

    def __init__(self, dim: int, num_heads: int, *, qk_norm: bool, eps: float,
                 image_branch: bool, keys: KeyGen, param_dtype):
        self.num_heads = num_heads
        self.q = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.k = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.v = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.o = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.norm_q = RMSNorm(dim, eps=eps, param_dtype=param_dtype) if qk_norm else None
        self.norm_k = RMSNorm(dim, eps=eps, param_dtype=param_dtype) if qk_norm else None
        if image_branch:
            self.k_img = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
            self.v_img = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
            self.norm_k_img = RMSNorm(dim, eps=eps, param_dtype=param_dtype) if qk_norm else None

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:2], self.num_heads, -1)

    def __call__(self, x: jax.Array, context: jax.Array,
                 context_img: jax.Array | None = None, cd=_F32) -> jax.Array:
        """``cd`` as in :class:`WanSelfAttention`; the text and image attention outputs are
        summed in float32 (the authors cast both back to the float32 query's dtype)."""
        x, context = x.astype(cd), context.astype(cd)
        q = self._heads(_qk_norm(self.norm_q, self.q(x))).astype(cd)
        k = self._heads(_qk_norm(self.norm_k, self.k(context))).astype(cd)
        out = attention(q, k, self._heads(self.v(context))).astype(_F32)
        if context_img is not None:
            context_img = context_img.astype(cd)
            k_img = self._heads(_qk_norm(self.norm_k_img, self.k_img(context_img)))
            out = out + attention(q, k_img.astype(cd),
                                  self._heads(self.v_img(context_img))).astype(_F32)
        return self.o(out.reshape(x.shape).astype(cd))


class WanAttentionBlock(nnx.Module):
    """Mirrors ``WanAttentionBlock``: modulated self-attention, cross-attention, modulated FFN."""

    def __init__(self, cfg: WanDiTConfig, *, keys: KeyGen, param_dtype):
        dim = cfg.dim
        self.norm1 = LayerNorm(dim, eps=cfg.eps, affine=False)
        self.self_attn = WanSelfAttention(dim, cfg.num_heads, qk_norm=cfg.qk_norm, eps=cfg.eps,
                                          keys=keys, param_dtype=param_dtype)
        self.norm3 = (LayerNorm(dim, eps=cfg.eps, param_dtype=param_dtype)
                      if cfg.cross_attn_norm else None)
        self.cross_attn = WanCrossAttention(dim, cfg.num_heads, qk_norm=cfg.qk_norm,
                                            eps=cfg.eps, image_branch=cfg.has_image_branch,
                                            keys=keys, param_dtype=param_dtype)
        self.norm2 = LayerNorm(dim, eps=cfg.eps, affine=False)
        self.ffn = _MLP(dim, cfg.ffn_dim, dim, _gelu_tanh, keys=keys, param_dtype=param_dtype)
        self.modulation = init_param(keys, (1, 6, dim), std=dim ** -0.5, dtype=param_dtype)

    def __call__(self, x: jax.Array, e0: jax.Array, context: jax.Array,
                 context_img: jax.Array | None, rope: tuple[jax.Array, jax.Array],
                 cd=_F32) -> jax.Array:
        """``x [B, L, dim]`` float32; ``e0 [B, Lt, 6, dim]`` the projected time embedding,
        per token (``Lt = L``) or one for all tokens (``Lt = 1``); ``cd`` the compute dtype
        of the attentions and the FFN."""
        f32 = _F32
        # (shift, scale, gate) of self-attention, then of the FFN; each [B, Lt, dim], fp32:
        # Wan2.2's ``modulation.unsqueeze(0) + e`` chunked on the 6-axis.
        e = [c[:, :, 0] for c in jnp.split(self.modulation[...].astype(f32)[None]
                                           + e0.astype(f32), 6, axis=2)]
        y = self.self_attn(self.norm1(x).astype(f32) * (1 + e[1]) + e[0], rope, cd)
        x = x.astype(f32) + y.astype(f32) * e[2]
        x = x + self.cross_attn(_maybe(self.norm3, x), context, context_img, cd).astype(f32)
        y = self.ffn((self.norm2(x).astype(f32) * (1 + e[4]) + e[3]).astype(cd))
        return x + y.astype(f32) * e[5]


class Head(nnx.Module):
    """Mirrors ``Head``: modulated LayerNorm (no affine) then Linear to patch pixels."""

    def __init__(self, cfg: WanDiTConfig, *, keys: KeyGen, param_dtype):
        self.norm = LayerNorm(cfg.dim, eps=cfg.eps, affine=False)
        self.head = Linear(cfg.dim, prod(cfg.patch_size) * cfg.out_dim, keys=keys,
                           param_dtype=param_dtype)
        self.modulation = init_param(keys, (1, 2, cfg.dim), std=cfg.dim ** -0.5,
                                     dtype=param_dtype)

    def __call__(self, x: jax.Array, e: jax.Array) -> jax.Array:
        """``x [B, L, dim]``; ``e [B, Lt, dim]`` the time embedding (before the projection),
        per token or (``Lt = 1``) for all tokens."""
        f32 = jnp.float32
        shift, scale = (c[:, :, 0] for c in jnp.split(
            self.modulation[...].astype(f32)[None] + e.astype(f32)[:, :, None], 2, axis=2))
        return self.head(self.norm(x).astype(f32) * (1 + scale) + shift)


class MLPProj(nnx.Module):
    """Mirrors ``MLPProj`` (``img_emb``): CLIP features -> context tokens.

    LayerNorm -> Linear -> GELU (exact) -> Linear -> LayerNorm; for flf2v a learned position
    embedding over the 2 x 257 tokens of the first and last frame is added first.
    """

    def __init__(self, dim: int, *, flf_pos_emb: bool, keys: KeyGen, param_dtype):
        self.norm1 = LayerNorm(CLIP_DIM, eps=IMG_EMB_EPS, param_dtype=param_dtype)
        self.fc1 = Linear(CLIP_DIM, CLIP_DIM, keys=keys, param_dtype=param_dtype)
        self.fc2 = Linear(CLIP_DIM, dim, keys=keys, param_dtype=param_dtype)
        self.norm2 = LayerNorm(dim, eps=IMG_EMB_EPS, param_dtype=param_dtype)
        if flf_pos_emb:
            self.emb_pos = nnx.Param(jnp.zeros((1, FLF2V_CLIP_TOKENS, CLIP_DIM), param_dtype))

    def __call__(self, clip_fea: jax.Array, cd=_F32) -> jax.Array:
        """float32 out; ``cd`` the compute dtype of the two Linears and the GELU (the
        LayerNorms are float32, as autocast runs them)."""
        clip_fea = clip_fea.astype(_F32)
        if hasattr(self, "emb_pos"):
            clip_fea = clip_fea + self.emb_pos[...].astype(_F32)
        h = self.fc2(_gelu(self.fc1(self.norm1(clip_fea).astype(cd))))
        return self.norm2(h.astype(_F32))


class WanDiT(nnx.Module):
    """The Wan2.1 DiT (t2v, i2v, flf2v): ``WanModel`` in Flax NNX, channels-last and batched."""

    def __init__(self, config: WanDiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.patch_embedding = Conv(cfg.in_dim, cfg.dim, cfg.patch_size, stride=cfg.patch_size,
                                    **kw)
        self.text_embedding = _MLP(cfg.text_dim, cfg.dim, cfg.dim, _gelu_tanh, **kw)
        self.time_embedding = _MLP(cfg.freq_dim, cfg.dim, cfg.dim, jax.nn.silu, **kw)
        self.time_projection = TimeProjection(cfg.dim, **kw)
        self.blocks = nnx.List([WanAttentionBlock(cfg, **kw) for _ in range(cfg.num_layers)])
        self.head = Head(cfg, **kw)
        if cfg.has_image_branch:
            self.img_emb = MLPProj(cfg.dim, flf_pos_emb=cfg.model_type == "flf2v", **kw)

    def __call__(self, x: jax.Array, t: jax.Array, context: jax.Array, *,
                 clip_fea: jax.Array | None = None, y: jax.Array | None = None,
                 compute_dtype=jnp.float32) -> jax.Array:
        """Predict the flow (velocity) for latents ``x``; mirrors ``WanModel.forward``.

        Args:
          x: latents ``[B, T, H, W, C]`` (C = in_dim, or in_dim - 20 when ``y`` is given).
          t: timesteps ``[B]`` (or a scalar for the whole batch), float in [0, 1000]; or
            one per token, ``[B, L]`` with ``L = (T/pt)(H/ph)(W/pw)`` in frame, row, column
            order (Wan2.2: TI2V-5B's image-to-video gives the first frame's tokens t = 0).
          context: text embeddings ``[B, L, text_dim]`` with ``L <= text_len``; zero-padded
            to ``text_len`` here, and the padding is attended to, as the authors do.
          clip_fea: i2v ``[B, 257, 1280]`` CLIP features; flf2v ``[B, 514, 1280]``, the
            first frame's 257 tokens then the last frame's.
          y: i2v/flf2v condition ``[B, T, H, W, 20]`` (4 mask + 16 latent channels),
            concatenated after ``x`` on channels.
          compute_dtype: ``jnp.float32`` (everything float32) or ``jnp.bfloat16`` (the
            authors' autocast: bfloat16 matmuls and attention, their float32 islands kept;
            see the module docstring).

        Returns:
          ``[B, T, H, W, out_dim]``, float32.
        """
        cfg = self.config
        cd = jnp.dtype(compute_dtype)
        if cd not in COMPUTE_DTYPES:
            raise VidaxError(f"Wan2.1 DiT compute_dtype must be float32 or bfloat16, got {cd}")
        x = jnp.asarray(x, jnp.float32)
        if cfg.has_image_branch and (clip_fea is None or y is None):
            raise VidaxError(f"the Wan2.1 {cfg.model_type} DiT needs clip_fea and y")
        if not cfg.has_image_branch and clip_fea is not None:
            raise VidaxError("the Wan2.1 t2v DiT takes no clip_fea")
        if y is not None:
            x = jnp.concatenate([x, jnp.asarray(y, x.dtype)], axis=-1)
        b, *size, channels = x.shape
        if channels != cfg.in_dim or any(n % p for n, p in zip(size, cfg.patch_size)):
            raise VidaxError(f"Wan2.1 DiT input {tuple(x.shape)} (x and y together) must be "
                             f"[B, T, H, W, {cfg.in_dim}] with T, H, W divisible by "
                             f"{cfg.patch_size}")
        if context.shape[1] > cfg.text_len:
            raise VidaxError(f"text context has {context.shape[1]} tokens, more than "
                             f"text_len {cfg.text_len}")

        # In ``cd`` until the first residual add makes it float32 (so block 0's norm1 output
        # is rounded to ``cd``, as the authors' ``type_as(x)`` does).
        x = self.patch_embedding(x.astype(cd))
        grid = x.shape[1:4]
        x = x.reshape(b, -1, cfg.dim)

        # Time embedding and its 6-way projection, per token when t is (Wan2.2's ``t`` of
        # shape [B, seq_len]): an fp32 island. ``t [B]`` keeps one embedding for all tokens
        # (Lt = 1) instead of the authors' expansion to every token: the same numbers.
        t = self._timesteps(t, b, x.shape[1])
        with jax.default_matmul_precision("highest"):
            e = self.time_embedding(sinusoidal_embedding(t, cfg.freq_dim))  # [B, Lt, dim]
            e0 = self.time_projection(e).reshape(*t.shape, 6, cfg.dim)

        context = jnp.asarray(context, _F32)
        context = jnp.pad(context, ((0, 0), (0, cfg.text_len - context.shape[1]), (0, 0)))
        context = self.text_embedding(context.astype(cd))
        # The authors prepend the image tokens to the text tokens and split them again
        # inside every cross-attention; keeping them apart is the same computation.
        context_img = None
        if cfg.has_image_branch:
            expected = FLF2V_CLIP_TOKENS if cfg.model_type == "flf2v" else CLIP_TOKENS
            if clip_fea.shape[1:] != (expected, CLIP_DIM):
                raise VidaxError(f"{cfg.model_type} clip_fea must be [B, {expected}, "
                                 f"{CLIP_DIM}], got {tuple(clip_fea.shape)}")
            context_img = self.img_emb(jnp.asarray(clip_fea), cd)

        rope = axial_rope(grid, cfg.rope_axis_dims)
        # TeaCache measures the time embedding ``e`` (the authors' TeaCache4Wan2.1).
        x = run_blocks(x, (self.blocks, lambda block, x: block(x, e0, context, context_img,
                                                                rope, cd)), signal=e)
        with jax.default_matmul_precision("highest"):  # the head: an fp32 island
            x = self.head(x, e)
        return self.unpatchify(x, grid)

    @staticmethod
    def _timesteps(t, batch: int, tokens: int) -> jax.Array:
        """``t`` as ``[B, 1]`` (a scalar or ``[B]``) or ``[B, L]`` (one per token, in the
        token order ``(frame, row, column)`` of the patch grid)."""
        t = jnp.asarray(t)
        if t.ndim <= 1:
            return jnp.broadcast_to(t.reshape(-1, 1), (batch, 1))
        if t.ndim != 2 or t.shape[1] != tokens or t.shape[0] not in (1, batch):
            raise VidaxError(f"Wan DiT timesteps of shape {tuple(t.shape)}: give a scalar, "
                             f"[B] or per token [B, {tokens}] (B = {batch})")
        return jnp.broadcast_to(t, (batch, tokens))

    def unpatchify(self, x: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
        """``[B, f*h*w, pt*ph*pw*C]`` -> ``[B, f*pt, h*ph, w*pw, C]`` (``WanModel.unpatchify``)."""
        (f, h, w), (pt, ph, pw) = grid, self.config.patch_size
        x = x.reshape(x.shape[0], f, h, w, pt, ph, pw, self.config.out_dim)
        x = x.transpose(0, 1, 4, 2, 5, 3, 6, 7)
        return x.reshape(x.shape[0], f * pt, h * ph, w * pw, self.config.out_dim)
