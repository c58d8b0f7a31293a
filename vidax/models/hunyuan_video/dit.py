"""The HunyuanVideo 1.0 diffusion transformer, after the authors' ``HYVideoDiffusionTransformer``.

Mirrors Tencent-Hunyuan/HunyuanVideo ``hyvideo/modules/models.py`` (with ``token_refiner.py``,
``embed_layers.py``, ``mlp_layers.py``, ``posemb_layers.py``): an MM-DiT with 20 double-stream
blocks (image and text keep their own weights and attend jointly), 40 single-stream blocks
(one sequence ``[image tokens, text tokens]``, attention and MLP in parallel), a two-block
token refiner in front of the text stream, and a guidance embedding (the release is
guidance-distilled: ``guidance`` carries the embedded CFG scale x 1000).

Module attribute names follow the authors' so the checkpoint mapper stays near-mechanical.
Where the authors fuse what vidax keeps apart, or use ``nn.Sequential`` indices, the names are:

==================================================  ===========================================
authors (torch)                                     vidax
==================================================  ===========================================
``{time,guidance}_in.mlp.0`` / ``.2``               ``{time,guidance}_in.mlp.fc1`` / ``.fc2``
``txt_in.t_embedder.mlp.0`` / ``.2``                ``txt_in.t_embedder.mlp.fc1`` / ``.fc2``
``*.adaLN_modulation.1`` (after a SiLU)             ``*.adaLN_modulation`` (SiLU applied here)
``double_blocks.N.{img,txt}_attn_qkv`` [q|k|v]      ``..._attn_q`` / ``_attn_k`` / ``_attn_v``
``...individual_token_refiner.blocks.N.self_attn_qkv``  ``...self_attn_q`` / ``_k`` / ``_v``
``single_blocks.N.linear1`` [q|k|v|mlp]             ``linear1_q`` / ``_k`` / ``_v`` / ``_mlp``
==================================================  ===========================================

``single_blocks.N.linear2`` stays fused: its input is ``[attention out | GELU(mlp)]``.

Layout: channels-last and batched. Latents are ``[B, T, H, W, 16]``; the text stream is the
LLaVA-Llama-3 hidden states ``[B, L, 4096]`` with their attention mask ``[B, L]`` (right
padding, as the authors' tokenizer pads), and the CLIP-L pooled vector ``[B, 768]``.

Masking. The authors run the main blocks through flash-attention's varlen kernel with two
segments per sample: ``[image + valid text]`` and ``[padded text]``. Here that is a key mask
(image and valid text keys); padded text queries then see the valid keys instead of each
other, which changes only the padded text positions, and those never reach an image token
(they are masked as keys everywhere and dropped before the final layer). With
``text_mask=None`` every text token is valid and the attention is unmasked (a batch-1
pipeline can crop the padding and pass no mask, which keeps the attention kernel free to
use flash / sequence-parallel paths). The token refiner's mask is the authors' pairwise one
(query and key both valid, key 0 always allowed so padded rows are not empty).

Precision (``compute_dtype``). Parameters are used in whatever dtype they are stored in (cast at
use). ``float32`` (the default) runs everything in float32. ``bfloat16`` runs the Linears
(operands bfloat16, float32 accumulation) and the attention in bfloat16, and keeps float32:
the timestep/guidance/pooled-text embeddings and every modulation (the ``vec`` path), the
LayerNorm / RMSNorm statistics, RoPE, and the residual streams. The authors instead keep bf16
weights and a bf16 residual stream under autocast; vidax's float32 residual is the more
accurate of the two (docs/models/hunyuan_video.md, "Precision").
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.hunyuan_video.config import HunyuanVideoDiTConfig
from vidax.nn.attention import attention
from vidax.nn.embeddings import diffusers_timestep_embedding
from vidax.nn.layers import Conv, KeyGen, LayerNorm, Linear, RMSNorm
from vidax.nn.rope import apply_rope, axial_rope
from vidax.nn import offload
from vidax.nn.step_cache import run_blocks

_F32 = jnp.float32
#: The DiT's compute dtypes (see the module docstring).
COMPUTE_DTYPES = (jnp.float32, jnp.bfloat16)
# The authors' fixed sizes: the sinusoid width of every TimestepEmbedder, the token refiner's
# depth (``SingleTokenRefiner(..., depth=2)`` is hard-coded in HYVideoDiffusionTransformer).
FREQ_DIM = 256
REFINER_DEPTH = 2
# Every LayerNorm / RMSNorm of the model (their code passes eps=1e-6 everywhere).
EPS = 1e-6


def _gelu_tanh(x):
    """GELU (tanh approximation), evaluated in float32 and rounded once to ``x``'s dtype."""
    return jax.nn.gelu(x.astype(_F32), approximate=True).astype(x.dtype)


def _silu(x):
    return jax.nn.silu(x.astype(_F32)).astype(x.dtype)


def _modulate(x, shift, scale):
    """The authors' ``modulate``: ``x * (1 + scale) + shift``, one row per sample."""
    return x * (1 + scale[:, None]) + shift[:, None]


class MLP(nnx.Module):
    """Linear -> activation -> Linear: the authors' ``MLP`` (``fc1``/``fc2``) and, renamed,
    their ``TimestepEmbedder.mlp`` Sequential."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, act: Callable, *,
                 keys: KeyGen, param_dtype):
        self.fc1 = Linear(in_dim, hidden_dim, keys=keys, param_dtype=param_dtype)
        self.fc2 = Linear(hidden_dim, out_dim, keys=keys, param_dtype=param_dtype)
        self.act = act

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(self.act(self.fc1(x)))


class TimestepEmbedder(nnx.Module):
    """Mirrors ``TimestepEmbedder``: the float32 sinusoid ``[cos | sin]`` of ``timestep_embedding``
    (256 wide, max period 10000), then Linear -> SiLU -> Linear."""

    def __init__(self, hidden_size: int, *, keys: KeyGen, param_dtype):
        self.mlp = MLP(FREQ_DIM, hidden_size, hidden_size, _silu, keys=keys,
                       param_dtype=param_dtype)

    def __call__(self, t: jax.Array) -> jax.Array:
        # The authors' float32 ``exp(-ln(1e4) * i / 128)`` frequencies and float32 phases;
        # diffusers' embedding with these options is the same operation sequence.
        emb = diffusers_timestep_embedding(t, FREQ_DIM, flip_sin_to_cos=True,
                                           downscale_freq_shift=0.0)
        return self.mlp(emb)


class MLPEmbedder(nnx.Module):
    """Mirrors ``MLPEmbedder`` (``vector_in``): in_layer -> SiLU -> out_layer."""

    def __init__(self, in_dim: int, hidden_size: int, *, keys: KeyGen, param_dtype):
        self.in_layer = Linear(in_dim, hidden_size, keys=keys, param_dtype=param_dtype)
        self.out_layer = Linear(hidden_size, hidden_size, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out_layer(_silu(self.in_layer(x)))


class TextProjection(nnx.Module):
    """Mirrors ``TextProjection`` (the refiner's ``c_embedder``): linear_1 -> SiLU -> linear_2."""

    def __init__(self, in_dim: int, hidden_size: int, *, keys: KeyGen, param_dtype):
        self.linear_1 = Linear(in_dim, hidden_size, keys=keys, param_dtype=param_dtype)
        self.linear_2 = Linear(hidden_size, hidden_size, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(_silu(self.linear_1(x)))


class ModulateDiT(nnx.Module):
    """Mirrors ``ModulateDiT``: ``linear(SiLU(vec))``, ``factor`` chunks of the hidden size."""

    def __init__(self, hidden_size: int, factor: int, *, keys: KeyGen, param_dtype):
        self.factor = factor
        self.linear = Linear(hidden_size, factor * hidden_size, keys=keys,
                             param_dtype=param_dtype)

    def __call__(self, vec: jax.Array) -> list[jax.Array]:
        return jnp.split(self.linear(jax.nn.silu(vec)), self.factor, axis=-1)


def _heads(x: jax.Array, heads: int) -> jax.Array:
    """``[B, L, H*D]`` -> ``[B, L, H, D]``: the authors' ``(H D)`` head-major feature order."""
    return x.reshape(*x.shape[:2], heads, -1)


class IndividualTokenRefinerBlock(nnx.Module):
    """Mirrors ``IndividualTokenRefinerBlock``: LayerNorm -> self-attention (no QK norm, no
    RoPE) -> gated residual; LayerNorm -> SiLU MLP -> gated residual. The gates are
    ``adaLN_modulation(SiLU(c))`` = [gate_msa, gate_mlp] (no shift/scale)."""

    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        h, kw = cfg.hidden_size, dict(keys=keys, param_dtype=param_dtype)
        self.heads = cfg.heads_num
        self.norm1 = LayerNorm(h, eps=EPS, param_dtype=param_dtype)
        self.self_attn_q = Linear(h, h, **kw)
        self.self_attn_k = Linear(h, h, **kw)
        self.self_attn_v = Linear(h, h, **kw)
        self.self_attn_proj = Linear(h, h, **kw)
        self.norm2 = LayerNorm(h, eps=EPS, param_dtype=param_dtype)
        self.mlp = MLP(h, cfg.mlp_dim, h, _silu, **kw)
        self.adaLN_modulation = Linear(h, 2 * h, **kw)

    def __call__(self, x: jax.Array, c: jax.Array, mask: jax.Array | None, cd) -> jax.Array:
        with jax.default_matmul_precision("highest"):
            gate_msa, gate_mlp = jnp.split(self.adaLN_modulation(jax.nn.silu(c)), 2, axis=-1)
        y = self.norm1(x).astype(cd)
        q, k, v = (_heads(lin(y), self.heads)
                   for lin in (self.self_attn_q, self.self_attn_k, self.self_attn_v))
        attn = attention(q, k, v, mask=mask).reshape(y.shape)
        x = x + self.self_attn_proj(attn).astype(_F32) * gate_msa[:, None]
        y = self.mlp(self.norm2(x).astype(cd))
        return x + y.astype(_F32) * gate_mlp[:, None]


class IndividualTokenRefiner(nnx.Module):
    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        self.blocks = nnx.List([IndividualTokenRefinerBlock(cfg, keys=keys,
                                                            param_dtype=param_dtype)
                                for _ in range(REFINER_DEPTH)])

    def __call__(self, x, c, mask, cd):
        for block in self.blocks:
            x = block(x, c, mask, cd)
        return x


class SingleTokenRefiner(nnx.Module):
    """Mirrors ``SingleTokenRefiner`` (``txt_in``): the raw text states' mask-weighted mean
    through ``c_embedder`` plus the refiner's own timestep embedding condition two refiner
    blocks over ``input_embedder(text)``."""

    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.input_embedder = Linear(cfg.text_states_dim, cfg.hidden_size, **kw)
        self.t_embedder = TimestepEmbedder(cfg.hidden_size, **kw)
        self.c_embedder = TextProjection(cfg.text_states_dim, cfg.hidden_size, **kw)
        self.individual_token_refiner = IndividualTokenRefiner(cfg, **kw)

    def __call__(self, x: jax.Array, t: jax.Array, mask: jax.Array | None, cd) -> jax.Array:
        """``x [B, L, text_dim]`` float32, ``mask [B, L]`` bool or None (all valid)."""
        with jax.default_matmul_precision("highest"):
            if mask is None:
                pooled = x.mean(axis=1)
                pair = None
            else:
                m = mask.astype(_F32)[..., None]
                pooled = (x * m).sum(axis=1) / m.sum(axis=1)
                # The authors' pairwise mask: query and key both valid; key 0 always allowed
                # so a padded query row is never empty.
                pair = mask[:, None, :, None] & mask[:, None, None, :]   # [B, 1, Lq, Lk]
                pair = pair.at[..., 0].set(True)
            c = self.t_embedder(t) + self.c_embedder(pooled)
        x = self.input_embedder(x.astype(cd)).astype(_F32)
        return self.individual_token_refiner(x, c, pair, cd)


class MMDoubleStreamBlock(nnx.Module):
    """Mirrors ``MMDoubleStreamBlock``: image and text streams with their own modulation, qkv,
    QK RMSNorm, projection and MLP, joined for one attention; RoPE on the image q/k only."""

    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        h, kw = cfg.hidden_size, dict(keys=keys, param_dtype=param_dtype)
        self.heads = cfg.heads_num
        for s in ("img", "txt"):
            setattr(self, f"{s}_mod", ModulateDiT(h, 6, **kw))
            setattr(self, f"{s}_norm1", LayerNorm(h, eps=EPS, affine=False))
            setattr(self, f"{s}_attn_q", Linear(h, h, **kw))
            setattr(self, f"{s}_attn_k", Linear(h, h, **kw))
            setattr(self, f"{s}_attn_v", Linear(h, h, **kw))
            setattr(self, f"{s}_attn_q_norm", RMSNorm(cfg.head_dim, eps=EPS,
                                                      param_dtype=param_dtype))
            setattr(self, f"{s}_attn_k_norm", RMSNorm(cfg.head_dim, eps=EPS,
                                                      param_dtype=param_dtype))
            setattr(self, f"{s}_attn_proj", Linear(h, h, **kw))
            setattr(self, f"{s}_norm2", LayerNorm(h, eps=EPS, affine=False))
            setattr(self, f"{s}_mlp", MLP(h, cfg.mlp_dim, h, _gelu_tanh, **kw))

    def _qkv(self, s: str, x: jax.Array, mod, cd):
        """The ``s`` stream's modulated, projected, QK-normed q, k, v (float32 q/k)."""
        y = _modulate(getattr(self, f"{s}_norm1")(x), mod[0], mod[1]).astype(cd)
        q, k, v = (_heads(getattr(self, f"{s}_attn_{n}")(y), self.heads) for n in "qkv")
        q = getattr(self, f"{s}_attn_q_norm")(q.astype(_F32))
        k = getattr(self, f"{s}_attn_k_norm")(k.astype(_F32))
        return q, k, v

    def _finish(self, s: str, x, attn, mod, cd):
        """Gated attention output, then the gated modulated MLP, onto stream ``s``."""
        x = x + getattr(self, f"{s}_attn_proj")(attn).astype(_F32) * mod[2][:, None]
        y = _modulate(getattr(self, f"{s}_norm2")(x), mod[3], mod[4]).astype(cd)
        return x + getattr(self, f"{s}_mlp")(y).astype(_F32) * mod[5][:, None]

    def __call__(self, img, txt, vec, mask, rope, cd):
        with jax.default_matmul_precision("highest"):
            img_mod, txt_mod = self.img_mod(vec), self.txt_mod(vec)
        iq, ik, iv = self._qkv("img", img, img_mod, cd)
        tq, tk, tv = self._qkv("txt", txt, txt_mod, cd)
        iq, ik = apply_rope(iq, *rope), apply_rope(ik, *rope)
        q = jnp.concatenate([iq, tq], axis=1).astype(cd)
        k = jnp.concatenate([ik, tk], axis=1).astype(cd)
        v = jnp.concatenate([iv, tv], axis=1)
        attn = attention(q, k, v, mask=mask)
        n = img.shape[1]
        attn = attn.reshape(*attn.shape[:2], -1)
        return (self._finish("img", img, attn[:, :n], img_mod, cd),
                self._finish("txt", txt, attn[:, n:], txt_mod, cd))


class MMSingleStreamBlock(nnx.Module):
    """Mirrors ``MMSingleStreamBlock``: one modulated LayerNorm feeds q, k, v and the MLP
    input (the authors' fused ``linear1``); ``linear2`` takes ``[attention | GELU(mlp)]``."""

    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        h, kw = cfg.hidden_size, dict(keys=keys, param_dtype=param_dtype)
        self.heads = cfg.heads_num
        self.linear1_q = Linear(h, h, **kw)
        self.linear1_k = Linear(h, h, **kw)
        self.linear1_v = Linear(h, h, **kw)
        self.linear1_mlp = Linear(h, cfg.mlp_dim, **kw)
        self.linear2 = Linear(h + cfg.mlp_dim, h, **kw)
        self.q_norm = RMSNorm(cfg.head_dim, eps=EPS, param_dtype=param_dtype)
        self.k_norm = RMSNorm(cfg.head_dim, eps=EPS, param_dtype=param_dtype)
        self.pre_norm = LayerNorm(h, eps=EPS, affine=False)
        self.modulation = ModulateDiT(h, 3, **kw)

    def __call__(self, x, vec, num_img: int, mask, rope, cd):
        """``x [B, N + L, h]`` float32, image tokens first."""
        with jax.default_matmul_precision("highest"):
            shift, scale, gate = self.modulation(vec)
        y = _modulate(self.pre_norm(x), shift, scale).astype(cd)
        q = self.q_norm(_heads(self.linear1_q(y), self.heads).astype(_F32))
        k = self.k_norm(_heads(self.linear1_k(y), self.heads).astype(_F32))
        v = _heads(self.linear1_v(y), self.heads)
        q = jnp.concatenate([apply_rope(q[:, :num_img], *rope), q[:, num_img:]], axis=1)
        k = jnp.concatenate([apply_rope(k[:, :num_img], *rope), k[:, num_img:]], axis=1)
        attn = attention(q.astype(cd), k.astype(cd), v, mask=mask)
        attn = attn.reshape(*attn.shape[:2], -1)
        out = self.linear2(jnp.concatenate([attn, _gelu_tanh(self.linear1_mlp(y))], axis=-1))
        return x + out.astype(_F32) * gate[:, None]


class PatchEmbed(nnx.Module):
    """Mirrors ``PatchEmbed`` (``img_in``): Conv3d with kernel = stride = patch."""

    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        self.proj = Conv(cfg.in_channels, cfg.hidden_size, cfg.patch_size,
                         stride=cfg.patch_size, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj(x)


class FinalLayer(nnx.Module):
    """Mirrors ``FinalLayer``: LayerNorm (no affine) modulated by ``adaLN_modulation(SiLU(vec))``
    = **[shift, scale]**, then Linear to ``(c, pt, ph, pw)`` patch features."""

    def __init__(self, cfg: HunyuanVideoDiTConfig, *, keys: KeyGen, param_dtype):
        h = cfg.hidden_size
        self.norm_final = LayerNorm(h, eps=EPS, affine=False)
        self.adaLN_modulation = Linear(h, 2 * h, keys=keys, param_dtype=param_dtype)
        self.linear = Linear(h, prod(cfg.patch_size) * cfg.out_channels, keys=keys,
                             param_dtype=param_dtype)

    def __call__(self, x: jax.Array, vec: jax.Array) -> jax.Array:
        shift, scale = jnp.split(self.adaLN_modulation(jax.nn.silu(vec)), 2, axis=-1)
        return self.linear(_modulate(self.norm_final(x), shift, scale))


class HunyuanVideoDiT(nnx.Module):
    """The HunyuanVideo 1.0 DiT: ``HYVideoDiffusionTransformer`` in Flax NNX, channels-last."""

    def __init__(self, config: HunyuanVideoDiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.img_in = PatchEmbed(cfg, **kw)
        self.txt_in = SingleTokenRefiner(cfg, **kw)
        self.time_in = TimestepEmbedder(cfg.hidden_size, **kw)
        self.vector_in = MLPEmbedder(cfg.text_states_dim_2, cfg.hidden_size, **kw)
        self.guidance_in = TimestepEmbedder(cfg.hidden_size, **kw) if cfg.guidance_embed else None
        self.double_blocks = nnx.List([MMDoubleStreamBlock(cfg, **kw)
                                       for _ in range(cfg.mm_double_blocks_depth)])
        self.single_blocks = nnx.List([MMSingleStreamBlock(cfg, **kw)
                                       for _ in range(cfg.mm_single_blocks_depth)])
        self.final_layer = FinalLayer(cfg, **kw)

    def __call__(self, x: jax.Array, t: jax.Array, text_states: jax.Array,
                 text_mask: jax.Array | None, text_states_2: jax.Array,
                 guidance: jax.Array | None = None, *, compute_dtype=jnp.float32) -> jax.Array:
        """Predict the flow for latents ``x``; mirrors ``HYVideoDiffusionTransformer.forward``.

        Args:
          x: latents ``[B, T, H, W, in_channels]``, T/H/W divisible by the patch size.
          t: timesteps ``[B]`` or a scalar, on the 0..1000 scale (flow sigma x 1000).
          text_states: LLaVA-Llama-3 hidden states ``[B, L, text_states_dim]`` (the authors'
            ``hidden_states[-3]``, cropped past the template).
          text_mask: ``[B, L]`` (bool or 0/1), true for real tokens (right padding); None:
            every token is real.
          text_states_2: the CLIP-L pooled vector ``[B, text_states_dim_2]``.
          guidance: ``[B]`` or a scalar: the embedded guidance scale x 1000 (the authors'
            ``embedded_guidance_scale * 1000``, 6.0 x 1000 by default); required by (and
            only accepted by) a guidance-distilled config.
          compute_dtype: ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).

        Returns:
          ``[B, T, H, W, out_channels]``, float32.
        """
        cfg = self.config
        cd = jnp.dtype(compute_dtype)
        if cd not in COMPUTE_DTYPES:
            raise VidaxError(f"HunyuanVideo DiT compute_dtype must be float32 or bfloat16, "
                             f"got {cd}")
        x = jnp.asarray(x, _F32)
        b, *size, channels = x.shape
        if (x.ndim != 5 or channels != cfg.in_channels
                or any(n % p for n, p in zip(size, cfg.patch_size))):
            raise VidaxError(f"HunyuanVideo DiT latents {tuple(x.shape)} must be [B, T, H, W, "
                             f"{cfg.in_channels}] with T, H, W divisible by {cfg.patch_size}")
        text_states = jnp.asarray(text_states, _F32)
        if text_states.shape[0] != b or text_states.shape[2] != cfg.text_states_dim:
            raise VidaxError(f"HunyuanVideo DiT text_states {tuple(text_states.shape)} must be "
                             f"[{b}, L, {cfg.text_states_dim}]")
        if text_mask is not None:
            text_mask = jnp.asarray(text_mask).astype(bool)
            if text_mask.shape != text_states.shape[:2]:
                raise VidaxError(f"HunyuanVideo DiT text_mask {tuple(text_mask.shape)} must be "
                                 f"{tuple(text_states.shape[:2])}, one flag per text token")
        if cfg.guidance_embed != (guidance is not None):
            raise VidaxError("this HunyuanVideo DiT is guidance-distilled: pass guidance "
                             "(embedded scale x 1000)" if cfg.guidance_embed else
                             "this HunyuanVideo DiT has no guidance embedding; pass no guidance")
        t = jnp.broadcast_to(jnp.asarray(t, _F32).reshape(-1), (b,))

        # The modulation vector: an fp32 island.
        with jax.default_matmul_precision("highest"):
            vec = self.time_in(t) + self.vector_in(jnp.asarray(text_states_2, _F32))
            if self.guidance_in is not None:
                vec = vec + self.guidance_in(
                    jnp.broadcast_to(jnp.asarray(guidance, _F32).reshape(-1), (b,)))

        img = self.img_in(x.astype(cd)).astype(_F32)
        grid = img.shape[1:4]
        img = img.reshape(b, -1, cfg.hidden_size)
        txt = self.txt_in(text_states, t, text_mask, cd)
        num_img = img.shape[1]

        # Joint attention keys: every image token, the valid text tokens.
        mask = None
        if text_mask is not None:
            keys = jnp.concatenate([jnp.ones((b, num_img), bool), text_mask], axis=1)
            mask = keys[:, None, None, :]
        rope = axial_rope(grid, cfg.rope_dim_list, theta=cfg.rope_theta)

        def double(block, streams):
            return block(*streams, vec, mask, rope, cd)

        def single(block, streams):   # the joint sequence [image, text], split again after
            x = block(jnp.concatenate(streams, axis=1), vec, num_img, mask, rope, cd)
            return x[:, :num_img], x[:, num_img:]

        # The blocks (or what a step cache puts in their place: vidax.nn.step_cache) carry
        # (image, text); TeaCache measures the first double block's modulated image input.
        img, _ = run_blocks((img, txt), (self.double_blocks, double),
                            (self.single_blocks, single),
                            signal=self.teacache_signal(img, vec))
        with jax.default_matmul_precision("highest"):   # the final layer: an fp32 island
            out = self.final_layer(img, vec)
        return self.unpatchify(out, grid)

    def teacache_signal(self, img: jax.Array, vec: jax.Array) -> jax.Array:
        """What the authors' TeaCache (ali-vilab/TeaCache ``TeaCache4HunyuanVideo``) measures:
        the image tokens ``img`` ``[B, N, h]`` (float32) entering the first double block,
        LayerNormed (``img_norm1``) and modulated by its ``img_mod`` shift and scale, float32
        ``[B, N, h]``; unused (and not computed) without a TeaCache."""
        block = offload.fetch(self.double_blocks[0])   # --offload block: in host memory
        with jax.default_matmul_precision("highest"):
            shift, scale = block.img_mod(vec)[:2]
        return _modulate(block.img_norm1(img), shift, scale)

    def unpatchify(self, x: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
        """``[B, t*h*w, c*pt*ph*pw]`` (channel-major features, the authors'
        ``einsum("nthwcopq->nctohpwq")``) -> ``[B, t*pt, h*ph, w*pw, c]``."""
        (t, h, w), (pt, ph, pw) = grid, self.config.patch_size
        c = self.config.out_channels
        x = x.reshape(x.shape[0], t, h, w, c, pt, ph, pw)
        x = x.transpose(0, 1, 5, 2, 6, 3, 7, 4)
        return x.reshape(x.shape[0], t * pt, h * ph, w * pw, c)
