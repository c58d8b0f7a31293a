"""The Cosmos-Predict2.5 diffusion transformer, after the authors' ``MinimalV1LVGDiT``.

Mirrors nvidia-cosmos/cosmos-predict2.5 ``cosmos_predict2/_src/predict2/networks/``:
``minimal_v1_lvg_dit.py`` (``MinimalV1LVGDiT``: the condition-mask channel and the timestep
scale) over ``minimal_v4_dit.py`` (``MiniTrainDIT``, ``Block``, ``Attention``, ``FinalLayer``,
``VideoRopePosition3DEmb``, ``Timesteps``, ``TimestepEmbedding``), at the released settings:
adaLN-LoRA, RoPE 3D without fps modulation, no extra absolute position embedding, no image
context, the Reason1 text projection (``crossattn_proj``) and ``use_wan_fp32_strategy``.
diffusers' ``CosmosTransformer3DModel`` (``transformer_cosmos.py``) is the same network under
other names; both key layouts load into this one module
(``vidax.translator.mappings.cosmos2_5``).

Module names follow the authors' modules; their ``nn.Sequential`` indices become names:

================================================  ==========================================
authors (torch)                                   vidax
================================================  ==========================================
``x_embedder.proj.1`` (after a ``Rearrange``)     ``x_embedder.proj``
``t_embedder.1.linear_{1,2}`` (after Timesteps)   ``t_embedder.linear_{1,2}``
``crossattn_proj.0`` (then GELU)                  ``crossattn_proj``
``*adaln_modulation*.1`` / ``.2`` (after SiLU)    ``*adaln_modulation*.linear_1`` / ``.linear_2``
================================================  ==========================================

Layout: channels-last and batched. Latents ``[B, T, H, W, C]``; the condition mask
``[B, T, H, W, 1]`` and the padding mask (``[B, H', W']`` at any resolution, resized to the
latent grid by nearest neighbour as the authors' ``transforms.functional.resize`` does) are
concatenated after the latents in that order: 16 + 1 + 1 = 18 channels for every release.

Arithmetic the port keeps from the authors (each is a place a mapping can look right and be
wrong):

* Patchify ``b c (t r) (h m) (w n) -> b t h w (c r m n)``: the channel is the SLOWEST index
  of a patch feature; unpatchify ``(p1 p2 t C)``: the output channel is the FASTEST.
* Timesteps (scheduler units, 0..1000, one per latent frame) are multiplied by
  ``timestep_scale`` (0.001) before the sinusoid (``cat[cos, sin]``, float32, as theirs). With
  adaLN-LoRA the modulation input is the RAW sinusoid through ``t_embedding_norm`` (RMSNorm);
  the MLP ``linear_2(silu(linear_1(.)))`` gives the 3D-wide LoRA term added to every
  modulation (``shift, scale, gate`` in that order; the final layer uses its first 2D).
* Per-head RMSNorm on q and k (not v) in both attentions; RoPE in self-attention only:
  head_dim split t/h/w = 44/42/42 (``d - 2 (2 (d//6))``, ``2 (d//6)``, ``2 (d//6)``), each axis
  its own theta ``10000 * ratio ** (d_axis / (d_axis - 2))`` (ratios t 1, h 3, w 3), the angle
  table ``cat([t, h, w] * 2)`` applied half-split (NeoX, :func:`vidax.nn.rope.apply_rope_half`).
  No attention masks: cross-attention sees every text token, padding included.

Precision (``compute_dtype`` of :meth:`CosmosDiT.__call__`). float32 (the default) runs
everything in float32. bfloat16 runs the patch embedding, the text projection, every Linear
of the attentions and MLPs and the attention itself in bfloat16 (float32 accumulation), and
keeps the authors' ``use_wan_fp32_strategy`` islands in float32 at "highest" matmul precision:
the timestep embedding and its MLP, ``t_embedding_norm``, every modulation (``Block``'s and
``FinalLayer``'s ``autocast(float32)`` regions), RoPE (q and k cast to float32 around it), the
LayerNorm statistics and the whole final layer. The residual stream stays float32 (the authors
keep it in the network's dtype; float32 is the policy vidax keeps for every DiT, DESIGN §7).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.cosmos2_5.config import CosmosDiTConfig
from vidax.nn.attention import attention
from vidax.nn.embeddings import diffusers_timestep_embedding
from vidax.nn.layers import KeyGen, LayerNorm, Linear, RMSNorm
from vidax.nn.rope import apply_rope_half, axial_rope
from vidax.nn.step_cache import run_blocks

_F32 = jnp.float32
#: The DiT's compute dtypes (see the module docstring).
COMPUTE_DTYPES = (jnp.float32, jnp.bfloat16)
# LayerNorm / t_embedding_norm eps, fixed in the authors' code.
_EPS = 1e-6


# ----------------------------------------------------------------------------- pieces
def _gelu(x):
    """Exact GELU evaluated in float32 and rounded once to ``x``'s dtype (``nn.GELU()``)."""
    return jax.nn.gelu(x.astype(_F32), approximate=False).astype(x.dtype)


class _TwoLinear(nnx.Module):
    """``linear_2(linear_1(x))``, both bias-free: the adaLN-LoRA modulations (after SiLU) and
    the timestep MLP (with SiLU between)."""

    def __init__(self, dim: int, hidden: int, out: int, *, keys: KeyGen, param_dtype):
        self.linear_1 = Linear(dim, hidden, bias=False, keys=keys, param_dtype=param_dtype)
        self.linear_2 = Linear(hidden, out, bias=False, keys=keys, param_dtype=param_dtype)


class AdaLNModulation(_TwoLinear):
    """``Sequential(SiLU, Linear(D, lora), Linear(lora, n D))`` plus the shared LoRA term:
    the ``n`` chunks (``shift, scale[, gate]``), float32 (a ``use_wan_fp32_strategy`` island)."""

    def __call__(self, emb: jax.Array, adaln_lora: jax.Array, n: int) -> list[jax.Array]:
        emb = jax.nn.silu(emb.astype(_F32))
        out = self.linear_2(self.linear_1(emb)) + adaln_lora[..., : self.linear_2.out_features]
        return jnp.split(out, n, axis=-1)


class TimestepEmbedding(_TwoLinear):
    """Mirrors ``TimestepEmbedding`` with adaLN-LoRA: the 3D-wide LoRA term from the sinusoid."""

    def __call__(self, sample: jax.Array) -> jax.Array:
        return self.linear_2(jax.nn.silu(self.linear_1(sample)))


class PatchEmbed(nnx.Module):
    """Mirrors ``PatchEmbed``: ``b (t r) (h m) (w n) c -> b t h w (c r m n)`` then a bias-free
    Linear (the channel is the slowest index of a patch feature)."""

    def __init__(self, cfg: CosmosDiTConfig, *, keys: KeyGen, param_dtype):
        self.patch_size = cfg.patch_size
        features = cfg.patch_in_channels * int(np.prod(cfg.patch_size))
        self.proj = Linear(features, cfg.model_channels, bias=False, keys=keys,
                           param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, h, w, c = x.shape
        r, m, n = self.patch_size
        x = x.reshape(b, t // r, r, h // m, m, w // n, n, c)
        x = x.transpose(0, 1, 3, 5, 7, 2, 4, 6)
        return self.proj(x.reshape(b, t // r, h // m, w // n, c * r * m * n))


class Attention(nnx.Module):
    """Mirrors ``Attention``: bias-free q/k/v/output projections, per-head RMSNorm on q and k,
    RoPE (self-attention only) in float32, no mask."""

    def __init__(self, dim: int, context_dim: int, num_heads: int, *, eps: float, keys: KeyGen,
                 param_dtype):
        self.num_heads = num_heads
        head_dim = dim // num_heads
        kw = dict(bias=False, keys=keys, param_dtype=param_dtype)
        self.q_proj = Linear(dim, dim, **kw)
        self.k_proj = Linear(context_dim, dim, **kw)
        self.v_proj = Linear(context_dim, dim, **kw)
        self.output_proj = Linear(dim, dim, **kw)
        self.q_norm = RMSNorm(head_dim, eps=eps, param_dtype=param_dtype)
        self.k_norm = RMSNorm(head_dim, eps=eps, param_dtype=param_dtype)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:2], self.num_heads, -1)

    def __call__(self, x: jax.Array, context: jax.Array | None = None,
                 rope: tuple[jax.Array, jax.Array] | None = None) -> jax.Array:
        """``x [B, L, D]`` in the compute dtype; ``context`` None for self-attention."""
        self_attn = context is None
        context = x if self_attn else context
        q = self.q_norm(self._heads(self.q_proj(x)))
        k = self.k_norm(self._heads(self.k_proj(context)))
        v = self._heads(self.v_proj(context))
        if rope is not None:  # float32 tables: the rotation runs in float32
            q, k = apply_rope_half(q, *rope), apply_rope_half(k, *rope)
        # The video self-attention must be split over a sequence-parallel mesh axis; the
        # cross-attention's text keys are short (the default: split where it divides).
        out = attention(q, k, v, sequence_parallel=True if self_attn else None)
        return self.output_proj(out.reshape(*x.shape[:2], -1))


class GPT2FeedForward(nnx.Module):
    """Mirrors ``GPT2FeedForward``: bias-free ``layer2(gelu(layer1(x)))``."""

    def __init__(self, dim: int, hidden: int, *, keys: KeyGen, param_dtype):
        self.layer1 = Linear(dim, hidden, bias=False, keys=keys, param_dtype=param_dtype)
        self.layer2 = Linear(hidden, dim, bias=False, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.layer2(_gelu(self.layer1(x)))


def _modulate(norm: LayerNorm, x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """``norm(x) * (1 + scale) + shift`` in float32 on ``x [B, T, S, D]`` with per-frame
    ``shift, scale [B, T, D]`` (the authors' ``b t 1 1 d`` broadcast)."""
    return norm(x).astype(_F32) * (1 + scale[:, :, None]) + shift[:, :, None]


class Block(nnx.Module):
    """Mirrors ``Block`` (adaLN-LoRA): modulated self-attention, cross-attention and MLP, each
    ``x += gate * f(LN(x) * (1 + scale) + shift)``."""

    def __init__(self, cfg: CosmosDiTConfig, *, keys: KeyGen, param_dtype):
        dim, kw = cfg.model_channels, dict(keys=keys, param_dtype=param_dtype)
        self.layer_norm_self_attn = LayerNorm(dim, eps=_EPS, affine=False)
        self.self_attn = Attention(dim, dim, cfg.num_heads, eps=cfg.qk_norm_eps, **kw)
        self.layer_norm_cross_attn = LayerNorm(dim, eps=_EPS, affine=False)
        self.cross_attn = Attention(dim, cfg.crossattn_emb_channels, cfg.num_heads,
                                    eps=cfg.qk_norm_eps, **kw)
        self.layer_norm_mlp = LayerNorm(dim, eps=_EPS, affine=False)
        self.mlp = GPT2FeedForward(dim, int(dim * cfg.mlp_ratio), **kw)
        for name in ("self_attn", "cross_attn", "mlp"):
            setattr(self, f"adaln_modulation_{name}",
                    AdaLNModulation(dim, cfg.adaln_lora_dim, 3 * dim, **kw))

    def __call__(self, x: jax.Array, emb: jax.Array, adaln_lora: jax.Array, context: jax.Array,
                 rope: tuple[jax.Array, jax.Array], cd=_F32) -> jax.Array:
        """``x [B, T, S, D]`` float32 (S tokens per latent frame); ``emb [B, T, D]`` the
        normalised sinusoid, ``adaln_lora [B, T, 3D]``; ``context [B, N, C]`` in ``cd``."""
        b, t, s, d = x.shape
        with jax.default_matmul_precision("highest"):
            mods = [m(emb, adaln_lora, 3) for m in (self.adaln_modulation_self_attn,
                                                    self.adaln_modulation_cross_attn,
                                                    self.adaln_modulation_mlp)]
        (sh1, sc1, g1), (sh2, sc2, g2), (sh3, sc3, g3) = mods

        def tokens(y):
            return y.astype(cd).reshape(b, t * s, d)

        def frames(y):
            return y.astype(_F32).reshape(b, t, s, d)

        y = self.self_attn(tokens(_modulate(self.layer_norm_self_attn, x, sh1, sc1)), rope=rope)
        x = x + g1[:, :, None] * frames(y)
        y = self.cross_attn(tokens(_modulate(self.layer_norm_cross_attn, x, sh2, sc2)), context)
        x = x + g2[:, :, None] * frames(y)
        y = self.mlp(tokens(_modulate(self.layer_norm_mlp, x, sh3, sc3)))
        return x + g3[:, :, None] * frames(y)


class FinalLayer(nnx.Module):
    """Mirrors ``FinalLayer`` (adaLN-LoRA): modulated LayerNorm then a bias-free Linear to the
    patch features ``(p1 p2 t C)``; all float32 (an ``autocast(float32)`` region)."""

    def __init__(self, cfg: CosmosDiTConfig, *, keys: KeyGen, param_dtype):
        dim = cfg.model_channels
        self.layer_norm = LayerNorm(dim, eps=_EPS, affine=False)
        self.linear = Linear(dim, int(np.prod(cfg.patch_size)) * cfg.out_channels, bias=False,
                             keys=keys, param_dtype=param_dtype)
        self.adaln_modulation = AdaLNModulation(dim, cfg.adaln_lora_dim, 2 * dim, keys=keys,
                                                param_dtype=param_dtype)

    def __call__(self, x: jax.Array, emb: jax.Array, adaln_lora: jax.Array) -> jax.Array:
        shift, scale = self.adaln_modulation(emb, adaln_lora, 2)
        return self.linear(_modulate(self.layer_norm, x.astype(_F32), shift, scale))


def nearest_indices(size_in: int, size_out: int) -> np.ndarray:
    """Source indices of a nearest-neighbour resize, as torch's ``interpolate(mode="nearest")``
    (torchvision's NEAREST ``resize`` on tensors) picks them: ``floor(i * in / out)`` in
    float32, clipped to the last row."""
    scale = np.float32(size_in) / np.float32(size_out)
    idx = np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(idx, size_in - 1)


class CosmosDiT(nnx.Module):
    """The Cosmos-Predict2.5 DiT (2B, 14B): ``MinimalV1LVGDiT`` in Flax NNX, channels-last."""

    def __init__(self, config: CosmosDiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        dim, kw = cfg.model_channels, dict(keys=keys, param_dtype=param_dtype)
        self.x_embedder = PatchEmbed(cfg, **kw)
        self.t_embedder = TimestepEmbedding(dim, dim, 3 * dim, **kw)
        self.t_embedding_norm = RMSNorm(dim, eps=_EPS, param_dtype=param_dtype)
        if cfg.use_crossattn_projection:
            self.crossattn_proj = Linear(cfg.crossattn_proj_in_channels,
                                         cfg.crossattn_emb_channels, **kw)
        self.blocks = nnx.List([Block(cfg, **kw) for _ in range(cfg.num_blocks)])
        self.final_layer = FinalLayer(cfg, **kw)

    def __call__(self, x: jax.Array, timesteps: jax.Array, context: jax.Array, *,
                 condition_mask: jax.Array | None = None,
                 padding_mask: jax.Array | None = None,
                 compute_dtype=jnp.float32) -> jax.Array:
        """Predict the velocity for latents ``x``; mirrors ``MinimalV1LVGDiT.forward``.

        Args:
          x: latents ``[B, T, H, W, in_channels]`` (the Wan2.1 VAE's normalised latents).
          timesteps: scheduler timesteps (0..1000; scaled by ``timestep_scale`` here): a
            scalar, ``[B]`` (one for all frames) or ``[B, T']`` one per latent frame after
            the temporal patch (``T' = T / patch_temporal``; conditioning frames get their
            own, small timestep).
          context: text embeddings ``[B, N, crossattn_proj_in_channels]`` (Reason1's
            ``full_concat`` of 28 normalised hidden states), or ``[B, N,
            crossattn_emb_channels]`` when the config has no projection. Every token is
            attended to (no mask), as the authors do.
          condition_mask: ``[B, T, H, W, 1]`` (or ``[B, T, H, W]``), 1 on conditioning
            latent frames; zeros (text-to-world) when None.
          padding_mask: ``[B, H', W']`` or ``[H', W']`` at any resolution (the pixel grid in
            the authors' pipeline; 1 = padded), resized to ``H, W`` by nearest neighbour and
            repeated over frames; zeros when None. Only with ``concat_padding_mask``.
          compute_dtype: ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).

        Returns:
          ``[B, T, H, W, out_channels]``, float32.
        """
        cfg = self.config
        cd = jnp.dtype(compute_dtype)
        if cd not in COMPUTE_DTYPES:
            raise VidaxError(f"Cosmos DiT compute_dtype must be float32 or bfloat16, got {cd}")
        x = jnp.asarray(x, _F32)
        if x.ndim != 5 or x.shape[-1] != cfg.in_channels or any(
                n % p for n, p in zip(x.shape[1:4], cfg.patch_size)):
            raise VidaxError(f"Cosmos DiT latents {tuple(x.shape)} must be [B, T, H, W, "
                             f"{cfg.in_channels}] with T, H, W divisible by {cfg.patch_size}")
        b = x.shape[0]
        grid = tuple(n // p for n, p in zip(x.shape[1:4], cfg.patch_size))
        if any(g > m for g, m in zip(grid, cfg.max_grid)):
            raise VidaxError(f"Cosmos DiT token grid {grid} exceeds the RoPE table "
                             f"{cfg.max_grid} (max_frames, max_img_h, max_img_w)")
        parts = [x, self._condition_mask(condition_mask, x.shape)]
        if cfg.concat_padding_mask:
            parts.append(self._padding_mask(padding_mask, x.shape))
        elif padding_mask is not None:
            raise VidaxError("this Cosmos DiT config has concat_padding_mask=False: it takes "
                             "no padding_mask")

        h = self.x_embedder(jnp.concatenate(parts, axis=-1).astype(cd))  # [B, t, h, w, D]
        h = h.astype(_F32).reshape(b, grid[0], grid[1] * grid[2], cfg.model_channels)

        # The timestep embedding: a float32 island (``use_wan_fp32_strategy``).
        t = self._timesteps(timesteps, b, grid[0]) * jnp.float32(cfg.timestep_scale)
        with jax.default_matmul_precision("highest"):
            sinusoid = diffusers_timestep_embedding(t, cfg.model_channels, flip_sin_to_cos=True,
                                                    downscale_freq_shift=0.0)   # [B, t, D]
            adaln_lora = self.t_embedder(sinusoid)                               # [B, t, 3D]
            emb = self.t_embedding_norm(sinusoid)

        context = jnp.asarray(context, _F32)
        want = (cfg.crossattn_proj_in_channels if cfg.use_crossattn_projection
                else cfg.crossattn_emb_channels)
        if context.ndim != 3 or context.shape[-1] != want:
            raise VidaxError(f"Cosmos DiT text embeddings {tuple(context.shape)} must be "
                             f"[B, N, {want}]")
        context = context.astype(cd)
        if cfg.use_crossattn_projection:
            context = _gelu(self.crossattn_proj(context))

        rope = self._rope(grid)
        h = run_blocks(h, (self.blocks, lambda block, h: block(h, emb, adaln_lora, context,
                                                                rope, cd)))
        with jax.default_matmul_precision("highest"):
            h = self.final_layer(h, emb, adaln_lora)
        return self.unpatchify(h, grid)

    def _condition_mask(self, mask, shape) -> jax.Array:
        if mask is None:
            return jnp.zeros((*shape[:4], 1), _F32)
        mask = jnp.asarray(mask, _F32)
        if mask.ndim == 4:
            mask = mask[..., None]
        if mask.shape[1:] != (*shape[1:4], 1) or mask.shape[0] not in (1, shape[0]):
            raise VidaxError(f"Cosmos DiT condition_mask {tuple(mask.shape)} must be "
                             f"[B, T, H, W, 1] = [{shape[0]}, {shape[1]}, {shape[2]}, "
                             f"{shape[3]}, 1]")
        return jnp.broadcast_to(mask, (*shape[:4], 1))

    def _padding_mask(self, mask, shape) -> jax.Array:
        """The padding mask resized to the latent grid and repeated over frames: [B,T,H,W,1]."""
        b, frames, height, width, _ = shape
        if mask is None:
            return jnp.zeros((b, frames, height, width, 1), _F32)
        mask = jnp.asarray(mask, _F32)
        if mask.ndim == 2:
            mask = mask[None]
        if mask.ndim != 3 or mask.shape[0] not in (1, b):
            raise VidaxError(f"Cosmos DiT padding_mask {tuple(mask.shape)} must be [B, H', W'] "
                             f"or [H', W'] (B = {b})")
        mask = mask[:, nearest_indices(mask.shape[1], height)]
        mask = mask[:, :, nearest_indices(mask.shape[2], width)]
        return jnp.broadcast_to(mask[:, None, :, :, None], (b, frames, height, width, 1))

    @staticmethod
    def _timesteps(t, batch: int, frames: int) -> jax.Array:
        """``[B, t]`` float32 from a scalar, ``[B]`` (one for every frame) or ``[B, t]``."""
        t = jnp.asarray(t, _F32)
        if t.ndim <= 1:
            return jnp.broadcast_to(t.reshape(-1, 1), (batch, frames))
        if t.ndim != 2 or t.shape[1] not in (1, frames) or t.shape[0] not in (1, batch):
            raise VidaxError(f"Cosmos DiT timesteps of shape {tuple(t.shape)}: give a scalar, "
                             f"[B] or one per latent frame [B, {frames}] (B = {batch})")
        return jnp.broadcast_to(t, (batch, frames))

    def _rope(self, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
        """float32 cos/sin ``[t h w, head_dim / 2]``: per axis ``p * theta_a ** (-2i / d_a)``,
        axes concatenated t, h, w (``VideoRopePosition3DEmb.generate_embeddings``; the second
        half of their doubled table is the same angles, which :func:`apply_rope_half` reuses)."""
        cfg = self.config
        tables = []
        for axis, (n, d, theta) in enumerate(zip(grid, cfg.rope_axis_dims, cfg.rope_thetas)):
            cos, sin = axial_rope((n,), (d,), theta=theta, dtype=_F32)   # [n, d / 2]
            shape = [1, 1, 1, d // 2]
            shape[axis] = n
            tables.append([jnp.broadcast_to(c.reshape(shape), (*grid, d // 2))
                           for c in (cos, sin)])
        half = cfg.head_dim // 2
        return tuple(jnp.concatenate([tab[i] for tab in tables], -1).reshape(-1, half)
                     for i in range(2))

    def unpatchify(self, x: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
        """``[B, t, h w, (p1 p2 r C)]`` -> ``[B, t r, h p1, w p2, C]`` (``MiniTrainDIT.unpatchify``:
        the output channel is the fastest index of a patch feature)."""
        (t, h, w), (r, m, n) = grid, self.config.patch_size
        c = self.config.out_channels
        x = x.reshape(x.shape[0], t, h, w, m, n, r, c).transpose(0, 1, 6, 2, 4, 3, 5, 7)
        return x.reshape(x.shape[0], t * r, h * m, w * n, c)
