"""The CLIP vision transformer, after the Wan authors' ``wan.modules.clip.VisionTransformer``,
and the authors' image preprocessing for it; and CLIP's text tower (:class:`CLIPTextModel`,
transformers' ``CLIPTextModel``: HunyuanVideo 1.0's pooled CLIP-L text vector), which reuses
the visual tower's :class:`VisionBlock` with a causal mask.

Wan2.1 I2V / FLF2V condition the DiT on CLIP image features: the ViT-H/14 visual tower of
``models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth`` (the authors' ``XLMRobertaCLIP``),
run as ``CLIPModel.visual`` does -- :func:`preprocess`, then ``clip.visual(x,
use_31_block=True)``: the 257 token features (class token + 16 x 16 patches) after block 31
of 32, with neither ``post_norm`` nor the projection ``head``. Here that call is
``model(pixels, num_blocks=-1)`` (``num_blocks`` slices the blocks as Python does, so ``-1``
is the authors' ``transformer[:-1]``); ``num_blocks=None`` runs every block, as their
``use_31_block=False`` does.

What the model holds: exactly what the authors' ``VisionTransformer.forward`` can use --
patch embedding, class and position embeddings, ``pre_norm`` and all ``num_layers`` blocks.
The last block stays although Wan skips it: it is a cheap 1/32 of the tower, it keeps the
full-depth output (and reuse by a model that wants it) available, and it leaves the file's
visual side mapped 1:1. ``post_norm`` and ``head`` are not modules here: the authors'
forward never applies them (``vidax.translator.mappings.wan2_1`` ignores them, with the text
tower, by name and with the reason).

The math, per block (pre-norm): ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``; the MLP
is Linear -> GELU (exact, ``nn.GELU()``: the ViT-H/14 preset passes
``activation='gelu'``) -> Linear. The authors' fused ``to_qkv`` Linear is split into
``to_q`` / ``to_k`` / ``to_v`` by the mapper (a ``Split`` rule: rows ``[q | k | v]``, as their
``view(b, s, 3, n, d)`` reads it). Separate projections are how transformers' CLIP and
SigLIP checkpoints store them (``q_proj``/``k_proj``/``v_proj``; HunyuanVideo's CLIP-L,
SigLIP towers), so those can reuse :class:`VisionBlock` with plain renames; they also
shard by heads without a fused axis. The price: XLA runs three [dim, dim] matmuls instead of
one [dim, 3 dim] (on 2 CPU cores, best of 40: 23 vs 19 ms for those at batch 2, i.e. a few
per cent of a block; medians under load were equal).

Names follow the authors' modules (``patch_embedding``, ``cls_embedding``,
``pos_embedding``, ``pre_norm``, ``transformer.N.{norm1, attn, norm2, mlp}``, ``attn.proj``);
their ``mlp`` ``nn.Sequential`` indices 0 / 2 are ``mlp.fc1`` / ``mlp.fc2``.

Layout: channels-last. Pixels are ``[B, H, W, 3]``, already resized and normalised
(:func:`preprocess`); tokens come out ``[B, 1 + (H/p)(W/p), dim]``, class token first, then
the patches row by row (the order of the authors' ``flatten(2)``).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.clip.config import CLIPTextConfig, CLIPVisionConfig
from vidax.nn.attention import attention
from vidax.nn.layers import Conv, Embedding, KeyGen, LayerNorm, Linear, init_param

__all__ = ["CLIPVisionConfig", "CLIPVisionTransformer", "CLIPTextConfig", "CLIPTextModel",
           "VisionAttention", "VisionBlock", "VisionMLP", "preprocess", "CLIP_MEAN", "CLIP_STD"]

# The OpenAI CLIP normalisation the authors' ``_clip`` transforms use for every non-SigLIP
# model (``T.Normalize(mean, std)`` on pixels in [0, 1]).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

_ACTIVATIONS = {
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),   # the authors' QuickGELU
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),      # torch nn.GELU()
    # transformers' tanh-approximated GELU (SigLIP's hidden_act, vidax.models.siglip.model)
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
}


class VisionAttention(nnx.Module):
    """Mirrors the authors' ``SelfAttention`` (non-causal, no dropout at inference), with
    their fused ``to_qkv`` held as ``to_q`` / ``to_k`` / ``to_v``. ``mask`` (boolean,
    broadcast to ``[B, heads, L, L]``, true = attend) is for the text tower's causal
    attention; the visual tower passes none."""

    def __init__(self, dim: int, num_heads: int, *, keys: KeyGen, param_dtype):
        self.num_heads = num_heads
        self.to_q = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.to_k = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.to_v = Linear(dim, dim, keys=keys, param_dtype=param_dtype)
        self.proj = Linear(dim, dim, keys=keys, param_dtype=param_dtype)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:2], self.num_heads, -1)

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        out = attention(self._heads(self.to_q(x)), self._heads(self.to_k(x)),
                        self._heads(self.to_v(x)), mask=mask)
        return self.proj(out.reshape(x.shape))


class VisionMLP(nnx.Module):
    """Linear -> activation -> Linear: the authors' ``mlp`` ``nn.Sequential`` (0, act, 2)."""

    def __init__(self, dim: int, hidden_dim: int, activation: str, *, keys: KeyGen,
                 param_dtype):
        self.fc1 = Linear(dim, hidden_dim, keys=keys, param_dtype=param_dtype)
        self.fc2 = Linear(hidden_dim, dim, keys=keys, param_dtype=param_dtype)
        self.activation = activation

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(_ACTIVATIONS[self.activation](self.fc1(x)))


class VisionBlock(nnx.Module):
    """Mirrors the authors' ``AttentionBlock`` with ``post_norm=False`` (pre-norm)."""

    def __init__(self, cfg: CLIPVisionConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.norm1 = LayerNorm(cfg.dim, eps=cfg.norm_eps, param_dtype=param_dtype)
        self.attn = VisionAttention(cfg.dim, cfg.num_heads, **kw)
        self.norm2 = LayerNorm(cfg.dim, eps=cfg.norm_eps, param_dtype=param_dtype)
        self.mlp = VisionMLP(cfg.dim, cfg.mlp_dim, cfg.activation, **kw)

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        x = x + self.attn(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class CLIPVisionTransformer(nnx.Module):
    """The CLIP ViT token encoder: the authors' ``VisionTransformer`` without its unused
    ``post_norm`` and pooling head."""

    def __init__(self, config: CLIPVisionConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        gain = cfg.dim ** -0.5
        p = cfg.patch_size
        self.patch_embedding = Conv(3, cfg.dim, (p, p), stride=p, bias=not cfg.pre_norm, **kw)
        self.cls_embedding = (init_param(keys, (1, 1, cfg.dim), std=gain, dtype=param_dtype)
                              if cfg.class_token else None)
        self.pos_embedding = init_param(keys, (1, cfg.num_tokens, cfg.dim), std=gain,
                                        dtype=param_dtype)
        self.pre_norm = (LayerNorm(cfg.dim, eps=cfg.norm_eps, param_dtype=param_dtype)
                         if cfg.pre_norm else None)
        self.transformer = nnx.List([VisionBlock(cfg, **kw) for _ in range(cfg.num_layers)])

    def __call__(self, pixels: jax.Array, *, num_blocks: int | None = None) -> jax.Array:
        """Token features of normalised images; mirrors ``VisionTransformer.forward``
        (``interpolation=False``).

        Args:
          pixels: ``[B, image_size, image_size, 3]``, normalised as :func:`preprocess` does.
            Computation runs in this dtype (norm statistics in float32).
          num_blocks: how many blocks to run, as a Python slice bound of the block list:
            ``None`` all of them (the authors' ``use_31_block=False``), ``-1`` all but the
            last (``use_31_block=True``, what Wan feeds its DiT), ``k >= 0`` the first ``k``.

        Returns:
          ``[B, num_tokens, dim]`` (257 x 1280 for ViT-H/14): no post_norm, no head.
        """
        cfg = self.config
        size = (cfg.image_size, cfg.image_size, 3)
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != size:
            raise VidaxError(f"CLIP vision input must be [B, {cfg.image_size}, "
                             f"{cfg.image_size}, 3] (see vidax.models.clip.preprocess), got "
                             f"{tuple(pixels.shape)}")
        if num_blocks is not None and not -cfg.num_layers <= num_blocks <= cfg.num_layers:
            raise VidaxError(f"num_blocks={num_blocks} is outside "
                             f"[-{cfg.num_layers}, {cfg.num_layers}] for this "
                             f"{cfg.num_layers}-block tower")
        x = self.patch_embedding(pixels)
        b = x.shape[0]
        x = x.reshape(b, -1, cfg.dim)
        if self.cls_embedding is not None:
            cls = jnp.broadcast_to(self.cls_embedding[...].astype(x.dtype), (b, 1, cfg.dim))
            x = jnp.concatenate([cls, x], axis=1)
        x = x + self.pos_embedding[...].astype(x.dtype)
        if self.pre_norm is not None:
            x = self.pre_norm(x)
        for block in list(self.transformer)[:num_blocks]:
            x = block(x)
        return x


class CLIPTextModel(nnx.Module):
    """Mirrors transformers' ``CLIPTextModel`` (``CLIPTextTransformer`` in 4.x): token plus
    learned position embeddings, pre-norm blocks with *causal* self-attention (the
    :class:`VisionBlock` of the visual tower, given a mask: LayerNorm, biased q/k/v/out
    projections, fc1 -> quick_gelu -> fc2), a final LayerNorm.

    Names: ``token_embedding``, ``position_embedding``, ``layers.N.{norm1, attn.{to_q, to_k,
    to_v, proj}, norm2, mlp.{fc1, fc2}}``, ``final_layer_norm``; the mapper renames
    transformers' ``layer_norm1/2``, ``self_attn.{q,k,v,out}_proj``.
    """

    def __init__(self, config: CLIPTextConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.token_embedding = Embedding(cfg.vocab_size, cfg.dim, **kw)
        self.position_embedding = Embedding(cfg.max_position_embeddings, cfg.dim, **kw)
        self.layers = nnx.List([VisionBlock(cfg, **kw) for _ in range(cfg.num_layers)])
        self.final_layer_norm = LayerNorm(cfg.dim, eps=cfg.norm_eps, param_dtype=param_dtype)

    def __call__(self, input_ids: jax.Array,
                 attention_mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """Encode token ids ``[B, L]`` (``L <= max_position_embeddings``).

        Args:
          input_ids: ``[B, L]`` int.
          attention_mask: ``[B, L]``, nonzero for real tokens, or None. Padded keys are
            masked out on top of the causal mask. With right padding this changes only the
            states *at* padded positions: the pooled end-of-text token sees none of them.

        Returns:
          ``(last_hidden_state [B, L, dim], pooler_output [B, dim])``: the final-normed
          states, and that state at the end-of-text token (see :class:`CLIPTextConfig`;
          no ``text_projection``) -- what HunyuanVideo 1.0 feeds its DiT's ``vector_in``.
          Computation in the parameters' dtype (norm statistics in float32).
        """
        cfg = self.config
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim != 2 or input_ids.shape[1] > cfg.max_position_embeddings:
            raise VidaxError(f"CLIP text input_ids must be [batch, length <= "
                             f"{cfg.max_position_embeddings}], got shape "
                             f"{list(input_ids.shape)}")
        b, n = input_ids.shape
        x = self.token_embedding(input_ids) + self.position_embedding.embedding[:n]
        mask = jnp.tril(jnp.ones((n, n), bool))[None, None]
        if attention_mask is not None:
            mask = mask & (jnp.asarray(attention_mask) != 0).reshape(b, 1, 1, n)
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_layer_norm(x)
        if cfg.eos_token_id == 2:      # transformers' legacy rule: the largest id
            eos = jnp.argmax(input_ids, axis=-1)
        else:                          # the first end-of-text token
            eos = jnp.argmax(input_ids == cfg.eos_token_id, axis=-1)
        return x, x[jnp.arange(b), eos]


# ------------------------------------------------------------------------------ preprocessing
def _cubic_resize_matrix(in_size: int, out_size: int) -> np.ndarray:
    """``[out, in]`` weights of PyTorch's ``F.interpolate(mode='bicubic',
    align_corners=False)`` along one axis (``upsample_bicubic2d``, float32 input).

    Its rules, which ``jax.image.resize`` does not follow (that one uses the Keys kernel
    with a = -0.5 and, when shrinking, widens the kernel to antialias; PyTorch uses
    a = -0.75 and never antialiases unless asked): source position
    ``(i + 0.5) * in/out - 0.5`` (not clamped for cubic), four taps at ``floor - 1 ..
    floor + 2`` with Keys' cubic convolution weights (a = -0.75), and out-of-range taps read
    the edge pixel.

    Rounding, reproduced because it is PyTorch's largest deviation from exact math: the
    scale is the float32 ``in/out`` and the position one fused multiply-add in float32 (one
    rounding; PyTorch's CPU build contracts ``scale * (i + 0.5) - 0.5`` so). At a 480 -> 224
    ratio that rounding moves the weights by up to 2e-5, 30x more than anything else; the
    weights are then evaluated in float64 and rounded once (within 6e-7 of PyTorch's).
    """
    a = -0.75
    scale = np.float64(np.float32(in_size) / np.float32(out_size))
    # float64 holds the float32 product exactly, so this rounds once, as an FMA does
    src = (scale * (np.arange(out_size) + 0.5) - 0.5).astype(np.float32)
    left = np.floor(src)
    t = (src - left).astype(np.float64)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):   # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)
    taps = np.clip(left.astype(np.int64)[:, None] + np.arange(-1, 3), 0, in_size - 1)
    matrix = np.zeros((out_size, in_size), np.float64)
    np.add.at(matrix, (np.repeat(np.arange(out_size), 4), taps.ravel()), weights.ravel())
    return matrix.astype(np.float32)


def preprocess(images, size: int = 224) -> jax.Array:
    """The authors' CLIP input pipeline (``CLIPModel.visual``'s preprocessing, Wan2.1's
    ``wan/modules/clip.py``), channels-last.

    Args:
      images: the image(s) as Wan's pipelines hold them, ``[H, W, 3]`` or ``[N, H, W, 3]``:
        float in [-1, 1] (``TF.to_tensor(img).sub_(0.5).div_(0.5)``, what ``image2video``
        passes), or uint8 in [0, 255] (converted to that first, the same way). A list of
        such arrays of different sizes (FLF2V's first and last frames) is resized one by
        one and concatenated, as the authors do.
      size: the model's ``image_size`` (224 for ViT-H/14).

    Returns:
      ``[N, size, size, 3]`` float32: each image resized to ``size x size`` (aspect ratio
      not kept, no crop) by bicubic interpolation with PyTorch's ``F.interpolate(...,
      mode='bicubic', align_corners=False)`` semantics, mapped to [0, 1] by ``x * 0.5 +
      0.5`` *without clamping* (bicubic overshoot stays, as theirs does), then normalised
      with the OpenAI CLIP mean / std.
    """
    if isinstance(images, (list, tuple)):
        return jnp.concatenate([preprocess(image, size) for image in images], axis=0)
    x = jnp.asarray(images)
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or x.shape[-1] != 3:
        raise VidaxError(f"CLIP preprocess takes RGB images [H, W, 3] or [N, H, W, 3], got "
                         f"shape {tuple(x.shape)}")
    if x.dtype == jnp.uint8:
        x = (x.astype(jnp.float32) / 255 - 0.5) / 0.5
    elif not jnp.issubdtype(x.dtype, jnp.floating):
        raise VidaxError(f"CLIP preprocess takes uint8 images or floats in [-1, 1], got "
                         f"dtype {x.dtype}")
    x = x.astype(jnp.float32)
    rows = _cubic_resize_matrix(x.shape[1], size)
    cols = _cubic_resize_matrix(x.shape[2], size)
    x = jnp.einsum("oh,nhwc,pw->nopc", rows, x, cols, precision=jax.lax.Precision.HIGHEST)
    x = x * 0.5 + 0.5
    return (x - jnp.asarray(CLIP_MEAN, jnp.float32)) / jnp.asarray(CLIP_STD, jnp.float32)

