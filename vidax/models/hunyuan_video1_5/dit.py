"""The HunyuanVideo-1.5 diffusion transformer, after the authors'
``HunyuanVideo_1_5_DiffusionTransformer``.

Mirrors Tencent-Hunyuan/HunyuanVideo-1.5 ``hyvideo/models/transformers/
hunyuanvideo_1_5_transformer.py`` (with ``modules/embed_layers.py``, ``token_refiner.py`` and
``text_encoders/byT5``'s ``ByT5Mapper``). It is the 1.0 MM-DiT reshaped: 54 double-stream
blocks and no single-stream blocks, width 2048 (16 heads of 128), patch 1x1x1 over 32 latent
channels, and three condition streams instead of one:

* ``txt_in``: the Qwen2.5-VL hidden states through the 1.0 token refiner;
* ``byt5_in``: the byT5 glyph-text states through ``ByT5Mapper`` (LayerNorm -> fc1 -> GELU ->
  fc2 -> GELU -> fc3, exact GELU, no residual);
* ``vision_in``: SigLIP's last hidden state through ``VisionProjection`` (LayerNorm -> Linear
  -> GELU -> Linear -> LayerNorm);

each tagged by a row of ``cond_type_embedding`` (0 text, 1 byT5, 2 vision). There is no
``vector_in`` and no ``guidance_in`` in any release (the cfg-distilled files bake guidance in);
the step-distilled (MeanFlow) file adds ``time_r_in``, a second timestep embedder for the
interval end ``t_r`` whose output is added to ``vec``.

The refiner, the double-stream block, the timestep embedder, the final layer, RoPE and the
unpatchify are the 1.0 port's (``vidax.models.hunyuan_video.dit``), imported, not copied: the
authors' 1.5 code is the 1.0 code there. Those modules read ``hidden_size``, ``heads_num``,
``head_dim``, ``mlp_dim``, ``text_states_dim``, ``patch_size`` and ``out_channels`` from the
config, which :class:`HunyuanVideo15DiTConfig` names as 1.0's does.

Names that differ from the authors' (``nn.Sequential`` indices), renamed by the mapper:

=====================================  ======================================
authors (torch)                        vidax
=====================================  ======================================
``time_in.mlp.0`` / ``.2`` (and        ``time_in.mlp.fc1`` / ``.fc2`` (and
``time_r_in``, ``txt_in.t_embedder``)  ``time_r_in``, ``txt_in.t_embedder``)
``*.adaLN_modulation.1``               ``*.adaLN_modulation``
``...refiner.blocks.N.self_attn_qkv``  ``...self_attn_q`` / ``_k`` / ``_v``
``vision_in.proj.0`` / ``1`` / ``3``   ``vision_in.norm_in`` / ``linear_1`` /
/ ``4``                                ``linear_2`` / ``norm_out``
``cond_type_embedding.weight``         ``cond_type_embedding.embedding``
=====================================  ======================================

Layout: channels-last and batched. ``x`` is the image-in input ``[B, T, H, W, 2C + 1]``
already concatenated as the authors' pipeline does, [noisy latent C | condition latent C |
mask 1] (:func:`concat_condition` builds it); the output is the flow ``[B, T, H, W, C]``.

The condition sequence. The authors reorder the condition tokens so that each sample's valid
tokens come first: [byT5 valid, text valid, byT5 pad, text pad] with the pads zeroed, then the
vision tokens in front the same way, [vision valid, (byT5 + text) valid, vision pad, rest pad].
vidax does the same (a stable per-sample sort on the mask). An all-zero ``vision_states``
(their text-to-video input) marks the vision tokens invalid and zeroes their features, as
theirs does; ``vision_states=None`` leaves the vision stream out.

Masking. The authors attend with a pairwise mask (query and key both valid). Here it is a key
mask over [image tokens, valid condition tokens]: padded condition queries then see the valid
keys instead of nothing, which changes only those padded positions, and they never reach an
image token (they are masked as keys everywhere and dropped before the final layer). The
token refiner keeps the 1.0 pairwise mask.

Precision (``compute_dtype``): as the 1.0 DiT (float32 islands for the timestep embeddings,
modulation, norms' statistics, RoPE and the residual streams; bfloat16 Linears and attention
when asked). The authors run the DiT in bf16 autocast.

Sparse attention (SSTA, ``*_distilled_sparse``) has no weights; vidax runs dense attention on
that file (exact where the authors' sparse kernel approximates).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.hunyuan_video.dit import (
    COMPUTE_DTYPES,
    FinalLayer,
    HunyuanVideoDiT,
    MMDoubleStreamBlock,
    SingleTokenRefiner,
    TimestepEmbedder,
)
from vidax.models.hunyuan_video1_5.config import HunyuanVideo15DiTConfig
from vidax.nn.layers import Conv, Embedding, KeyGen, LayerNorm, Linear
from vidax.nn.rope import axial_rope
from vidax.nn.step_cache import run_blocks

_F32 = jnp.float32
# ``nn.LayerNorm``'s default eps, which ``ByT5Mapper`` and ``VisionProjection`` keep.
TORCH_LN_EPS = 1e-5
# ``cond_type_embedding`` rows.
COND_TEXT, COND_BYT5, COND_VISION = 0, 1, 2


def _gelu(x):
    """Exact (erf) GELU, ``nn.GELU()``'s default, in float32, rounded once to ``x``'s dtype."""
    return jax.nn.gelu(x.astype(_F32), approximate=False).astype(x.dtype)


class PatchEmbed(nnx.Module):
    """Mirrors ``PatchEmbed`` with ``concat_condition`` (``img_in``): Conv3d, kernel = stride
    = patch, over the ``2C + 1`` concatenated channels."""

    def __init__(self, cfg: HunyuanVideo15DiTConfig, *, keys: KeyGen, param_dtype):
        self.proj = Conv(cfg.img_in_channels, cfg.hidden_size, cfg.patch_size,
                         stride=cfg.patch_size, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj(x)


class ByT5Mapper(nnx.Module):
    """Mirrors ``ByT5Mapper(use_residual=False)`` (``byt5_in``)."""

    def __init__(self, cfg: HunyuanVideo15DiTConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        d, hid = cfg.byt5_states_dim, cfg.byt5_hidden_dim
        self.layernorm = LayerNorm(d, eps=TORCH_LN_EPS, param_dtype=param_dtype)
        self.fc1 = Linear(d, hid, **kw)
        self.fc2 = Linear(hid, hid, **kw)
        self.fc3 = Linear(hid, cfg.hidden_size, **kw)

    def __call__(self, x: jax.Array, cd) -> jax.Array:
        y = _gelu(self.fc1(self.layernorm(x).astype(cd)))
        return self.fc3(_gelu(self.fc2(y))).astype(_F32)


class VisionProjection(nnx.Module):
    """Mirrors ``VisionProjection`` (``vision_in``; the authors' ``proj`` Sequential's
    indices 0, 1, 3, 4 named)."""

    def __init__(self, cfg: HunyuanVideo15DiTConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        d, h = cfg.vision_states_dim, cfg.hidden_size
        self.norm_in = LayerNorm(d, eps=TORCH_LN_EPS, param_dtype=param_dtype)
        self.linear_1 = Linear(d, d, **kw)
        self.linear_2 = Linear(d, h, **kw)
        self.norm_out = LayerNorm(h, eps=TORCH_LN_EPS, param_dtype=param_dtype)

    def __call__(self, x: jax.Array, cd) -> jax.Array:
        y = self.linear_2(_gelu(self.linear_1(self.norm_in(x).astype(cd))))
        return self.norm_out(y.astype(_F32))


def _valid_first(x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Each sample's valid tokens first, in order, then its padding, in order (the authors'
    ``reorder_txt_token``): a stable sort on the mask."""
    order = jnp.argsort(jnp.logical_not(mask).astype(jnp.int8), axis=1, stable=True)
    return (jnp.take_along_axis(x, order[..., None], axis=1),
            jnp.take_along_axis(mask, order, axis=1))


def concat_condition(latents: jax.Array, image_latents: jax.Array | None = None) -> jax.Array:
    """The image-in input ``[B, T, H, W, 2C + 1]`` the authors' pipeline builds:
    [noisy latents | condition latents | mask]. Text-to-video (``image_latents=None``): the
    condition and the mask are zero. Image-to-video: ``image_latents [B, 1, H, W, C]`` (the
    encoded first frame) fills frame 0 of the condition, and the mask is 1 on frame 0."""
    b, t, h, w, c = latents.shape
    cond = jnp.zeros_like(latents)
    mask = jnp.zeros((b, t, h, w, 1), latents.dtype)
    if image_latents is not None:
        if image_latents.shape != (b, 1, h, w, c):
            raise VidaxError(f"HunyuanVideo-1.5 image latents {tuple(image_latents.shape)} "
                             f"must be [{b}, 1, {h}, {w}, {c}], the first frame of the latents")
        cond = cond.at[:, :1].set(image_latents.astype(latents.dtype))
        mask = mask.at[:, :1].set(1)
    return jnp.concatenate([latents, cond, mask], axis=-1)


class HunyuanVideo15DiT(nnx.Module):
    """The HunyuanVideo-1.5 DiT: ``HunyuanVideo_1_5_DiffusionTransformer`` in Flax NNX,
    channels-last."""

    def __init__(self, config: HunyuanVideo15DiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.img_in = PatchEmbed(cfg, **kw)
        self.txt_in = SingleTokenRefiner(cfg, **kw)
        self.byt5_in = ByT5Mapper(cfg, **kw)
        self.vision_in = VisionProjection(cfg, **kw)
        self.cond_type_embedding = Embedding(3, cfg.hidden_size, **kw)
        self.time_in = TimestepEmbedder(cfg.hidden_size, **kw)
        self.time_r_in = TimestepEmbedder(cfg.hidden_size, **kw) if cfg.use_meanflow else None
        self.double_blocks = nnx.List([MMDoubleStreamBlock(cfg, **kw)
                                       for _ in range(cfg.mm_double_blocks_depth)])
        self.final_layer = FinalLayer(cfg, **kw)

    # Channel-major patch features -> frames, exactly as 1.0 (the authors' ``unpatchify``).
    unpatchify = HunyuanVideoDiT.unpatchify

    def _cond(self, x: jax.Array, kind: int) -> jax.Array:
        return x + self.cond_type_embedding(jnp.full(x.shape[:2], kind, jnp.int32))

    def __call__(self, x: jax.Array, t: jax.Array, text_states: jax.Array,
                 text_mask: jax.Array | None, byt5_states: jax.Array,
                 byt5_mask: jax.Array | None, vision_states: jax.Array | None = None,
                 t_r: jax.Array | None = None, *, compute_dtype=jnp.float32) -> jax.Array:
        """Predict the flow; mirrors ``HunyuanVideo_1_5_DiffusionTransformer.forward``.

        Args:
          x: ``[B, T, H, W, 2C + 1]``, [noisy latents | condition latents | mask]
            (:func:`concat_condition`), T/H/W divisible by the patch size.
          t: timesteps ``[B]`` or a scalar, on the 0..1000 scale (flow sigma x 1000).
          text_states: Qwen2.5-VL hidden states ``[B, L, text_states_dim]`` (the authors'
            ``hidden_states[-3]`` past the template).
          text_mask: ``[B, L]`` (bool or 0/1), true for real tokens; None: all real.
          byt5_states: byT5 encoder states ``[B, L2, byt5_states_dim]``.
          byt5_mask: ``[B, L2]``, as ``text_mask``.
          vision_states: SigLIP last hidden states ``[B, N, vision_states_dim]``; all zeros
            (the authors' text-to-video input) masks them out; None leaves them out.
          t_r: the MeanFlow interval end ``[B]`` or a scalar, same scale as ``t``: required
            by (and only accepted by) a step-distilled config (the authors' ``timestep_r``;
            0 on the last step).
          compute_dtype: ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).

        Returns:
          ``[B, T, H, W, out_channels]``, float32.
        """
        cfg = self.config
        cd = jnp.dtype(compute_dtype)
        if cd not in COMPUTE_DTYPES:
            raise VidaxError(f"HunyuanVideo-1.5 DiT compute_dtype must be float32 or "
                             f"bfloat16, got {cd}")
        x = jnp.asarray(x, _F32)
        b, *size, channels = x.shape
        if (x.ndim != 5 or channels != cfg.img_in_channels
                or any(n % p for n, p in zip(size, cfg.patch_size))):
            raise VidaxError(f"HunyuanVideo-1.5 DiT input {tuple(x.shape)} must be [B, T, H, W, "
                             f"{cfg.img_in_channels}] ([latents | condition | mask], see "
                             f"concat_condition) with T, H, W divisible by {cfg.patch_size}")
        text_states, text_mask = self._check_stream("text_states", text_states, text_mask, b,
                                                    cfg.text_states_dim)
        byt5_states, byt5_mask = self._check_stream("byt5_states", byt5_states, byt5_mask, b,
                                                    cfg.byt5_states_dim)
        if cfg.use_meanflow != (t_r is not None):
            raise VidaxError("this HunyuanVideo-1.5 DiT is step-distilled (MeanFlow): pass t_r, "
                             "the interval end (0 on the last step)" if cfg.use_meanflow else
                             "this HunyuanVideo-1.5 DiT has no time_r_in; pass no t_r")
        t = jnp.broadcast_to(jnp.asarray(t, _F32).reshape(-1), (b,))

        with jax.default_matmul_precision("highest"):   # the modulation vector: fp32 island
            vec = self.time_in(t)
            if self.time_r_in is not None:
                vec = vec + self.time_r_in(
                    jnp.broadcast_to(jnp.asarray(t_r, _F32).reshape(-1), (b,)))

        img = self.img_in(x.astype(cd)).astype(_F32)
        grid = img.shape[1:4]
        img = img.reshape(b, -1, cfg.hidden_size)

        txt = self._cond(self.txt_in(text_states, t, text_mask, cd), COND_TEXT)
        byt5 = self._cond(self.byt5_in(byt5_states, cd), COND_BYT5)
        every_token_valid = text_mask is None and byt5_mask is None and vision_states is None
        text_mask = _all_valid(txt) if text_mask is None else text_mask
        byt5_mask = _all_valid(byt5) if byt5_mask is None else byt5_mask
        cond = jnp.concatenate([byt5, txt], axis=1)
        cond_mask = jnp.concatenate([byt5_mask, text_mask], axis=1)
        cond = cond * cond_mask[..., None]    # the authors zero the text pads (zero_feat)
        cond, cond_mask = _valid_first(cond, cond_mask)
        if vision_states is not None:
            vision_states = jnp.asarray(vision_states, _F32)
            if vision_states.ndim != 3 or vision_states.shape[::2] != (b, cfg.vision_states_dim):
                raise VidaxError(f"HunyuanVideo-1.5 DiT vision_states "
                                 f"{tuple(vision_states.shape)} must be "
                                 f"[{b}, N, {cfg.vision_states_dim}]")
            # All-zero vision states are the authors' text-to-video input: no image tokens.
            t2v = jnp.all(vision_states == 0)
            vis = self.vision_in(vision_states, cd) * jnp.where(t2v, 0.0, 1.0)
            vis = self._cond(vis, COND_VISION)
            vis_mask = jnp.broadcast_to(jnp.logical_not(t2v), vis.shape[:2])
            cond, cond_mask = _valid_first(jnp.concatenate([vis, cond], axis=1),
                                           jnp.concatenate([vis_mask, cond_mask], axis=1))

        mask = None
        if not every_token_valid:
            keys = jnp.concatenate([jnp.ones((b, img.shape[1]), bool), cond_mask], axis=1)
            mask = keys[:, None, None, :]
        rope = axial_rope(grid, cfg.rope_dim_list, theta=cfg.rope_theta)
        # The blocks (or what a step cache puts in their place: vidax.nn.step_cache) carry
        # (image, condition). No TeaCache signal: its authors publish no rule for 1.5.
        img, _ = run_blocks((img, cond), (self.double_blocks, lambda block, streams: block(
            *streams, vec, mask, rope, cd)))
        with jax.default_matmul_precision("highest"):   # the final layer: an fp32 island
            out = self.final_layer(img, vec)
        return self.unpatchify(out, grid)

    @staticmethod
    def _check_stream(name: str, states, mask, b: int, dim: int):
        states = jnp.asarray(states, _F32)
        if states.ndim != 3 or states.shape[0] != b or states.shape[2] != dim:
            raise VidaxError(f"HunyuanVideo-1.5 DiT {name} {tuple(states.shape)} must be "
                             f"[{b}, L, {dim}]")
        if mask is not None:
            mask = jnp.asarray(mask).astype(bool)
            if mask.shape != states.shape[:2]:
                raise VidaxError(f"HunyuanVideo-1.5 DiT mask of {name} {tuple(mask.shape)} must "
                                 f"be {tuple(states.shape[:2])}, one flag per token")
        return states, mask


def _all_valid(x: jax.Array) -> jax.Array:
    return jnp.ones(x.shape[:2], bool)

