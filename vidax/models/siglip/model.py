"""The SigLIP vision tower, as transformers' ``SiglipVisionModel`` computes its
``last_hidden_state``: HunyuanVideo-1.5's image encoder (FLUX.1-Redux-dev's
``image_encoder``, SigLIP so400m-patch14-384), whose 729 x 1152 token features feed the
DiT's ``vision_in``.

What transformers' module does (mirrored here, pooling head left out):

* ``SiglipVisionEmbeddings``: a Conv2d patch embedding (kernel = stride = patch, with
  bias, no padding), tokens flattened row by row, plus a learned position table, one row
  per patch -- no class token, no pre-norm;
* ``SiglipEncoder``: pre-norm layers ``x + attn(norm1(x))``, ``x + mlp(norm2(x))`` with
  LayerNorm (eps 1e-6), biased q/k/v/out projections, ``1/sqrt(head_dim)`` scaling, no mask,
  and an MLP fc1 -> GELU (tanh approximation, ``gelu_pytorch_tanh``) -> fc2. That is CLIP's
  block, so the layers are ``vidax.models.clip.VisionBlock``;
* ``post_layernorm`` over every token: ``last_hidden_state``.

The attention-pooling ``head`` (``pooler_output``) is not a module here: HunyuanVideo-1.5
reads ``last_hidden_state`` only (``vidax.translator.mappings.siglip`` ignores the stored
head by name, with that reason). Position-embedding interpolation for other image sizes
(transformers' ``interpolate_pos_encoding=True``) is not implemented: the input must be
``image_size`` square, as the authors' processor makes it.

Names: ``patch_embedding``, ``position_embedding``, ``layers.N.{norm1, attn.{to_q, to_k,
to_v, proj}, norm2, mlp.{fc1, fc2}}``, ``post_layernorm`` -- transformers' names with the
``embeddings.`` / ``encoder.`` levels dropped and CLIP block names inside a layer (the mapper
renames ``layer_norm1/2`` and ``self_attn.{q,k,v,out}_proj``), as ``CLIPTextModel`` does.

Layout: channels-last. Pixels ``[B, H, W, C]``, already resized and normalised (SigLIP's
processor: bicubic resize to ``image_size``, then ``(x - 0.5) / 0.5``); tokens come out
``[B, (H/p)(W/p), dim]``.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.clip.model import VisionBlock
from vidax.models.siglip.config import SiglipVisionConfig
from vidax.nn.layers import Conv, Embedding, KeyGen, LayerNorm

__all__ = ["SiglipVisionConfig", "SiglipVisionModel"]


class SiglipVisionModel(nnx.Module):
    """Mirrors transformers' ``SiglipVisionModel`` up to ``last_hidden_state`` (no pooling
    head): ``__call__(pixels [B, H, W, C]) -> [B, num_patches, dim]``."""

    def __init__(self, config: SiglipVisionConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        p = cfg.patch_size
        self.patch_embedding = Conv(cfg.num_channels, cfg.dim, (p, p), stride=p, **kw)
        self.position_embedding = Embedding(cfg.num_patches, cfg.dim, **kw)
        self.layers = nnx.List([VisionBlock(cfg, **kw) for _ in range(cfg.num_layers)])
        self.post_layernorm = LayerNorm(cfg.dim, eps=cfg.norm_eps, param_dtype=param_dtype)

    def __call__(self, pixels: jax.Array) -> jax.Array:
        """Token features of normalised images.

        Args:
          pixels: ``[B, image_size, image_size, num_channels]``, normalised as SigLIP's
            processor does. Cast to the parameters' dtype first, as transformers casts to the
            patch embedding's; computation in that dtype (norm statistics in float32).

        Returns:
          ``[B, num_patches, dim]`` (729 x 1152 for so400m-patch14-384), ``post_layernorm``
          applied: transformers' ``last_hidden_state``.
        """
        cfg = self.config
        size = (cfg.image_size, cfg.image_size, cfg.num_channels)
        pixels = jnp.asarray(pixels)
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != size:
            raise VidaxError(f"SigLIP vision input must be [B, {cfg.image_size}, "
                             f"{cfg.image_size}, {cfg.num_channels}] (resized and normalised), "
                             f"got {tuple(pixels.shape)}")
        x = self.patch_embedding(pixels.astype(self.patch_embedding.kernel[...].dtype))
        x = x.reshape(x.shape[0], -1, cfg.dim) + self.position_embedding.embedding[...]
        for layer in self.layers:
            x = layer(x)
        return self.post_layernorm(x)
