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

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.clip.model import _ACTIVATIONS, VisionBlock
from vidax.nn.layers import Conv, Embedding, KeyGen, LayerNorm

__all__ = ["SiglipVisionConfig", "SiglipVisionModel"]

# transformers' ``SiglipVisionConfig`` field -> ours; its defaults are the dataclass's.
_TRANSFORMERS_NAMES = {
    "hidden_size": "dim", "intermediate_size": "mlp_dim", "num_attention_heads": "num_heads",
    "num_hidden_layers": "num_layers", "image_size": "image_size", "patch_size": "patch_size",
    "num_channels": "num_channels", "hidden_act": "activation", "layer_norm_eps": "norm_eps",
}
# Keys of a config.json that do not shape ``last_hidden_state``: the pooling head's switch
# (the head is not modelled), training-only dropout, bookkeeping.
_DROPPED = {"vision_use_head", "attention_dropout", "model_type", "architectures", "dtype",
            "torch_dtype", "transformers_version", "_name_or_path", "initializer_range"}


@dataclass(frozen=True)
class SiglipVisionConfig:
    """transformers' ``SiglipVisionConfig`` fields that shape the tower, under the names
    :class:`~vidax.models.clip.VisionBlock` reads (``dim`` = ``hidden_size``, ``mlp_dim`` =
    ``intermediate_size``, ...). Defaults: transformers' (siglip-base-patch16-224), so a
    ``config.json`` that omits default values (transformers 5 writes only the differences)
    reads right."""

    image_size: int = 224
    patch_size: int = 16
    num_channels: int = 3
    dim: int = 768
    mlp_dim: int = 3072
    num_heads: int = 12
    num_layers: int = 12
    activation: str = "gelu_pytorch_tanh"
    norm_eps: float = 1e-6

    def __post_init__(self):
        if self.activation not in _ACTIVATIONS:
            raise VidaxError(f"SigLIP vision hidden_act {self.activation!r} is not supported; "
                             f"known: {', '.join(_ACTIVATIONS)}")
        if self.dim % self.num_heads:
            raise VidaxError(f"SigLIP vision hidden_size {self.dim} does not split into "
                             f"{self.num_heads} heads")

    @property
    def num_patches(self) -> int:
        """Patches per side: ``image_size // patch_size``, squared. The unpadded patch conv
        drops a remainder: so400m-patch14-384 reads 27 x 14 = 378 of its 384 pixels."""
        return (self.image_size // self.patch_size) ** 2

    @classmethod
    def flux1_redux_dev_siglip(cls) -> SiglipVisionConfig:
        """SigLIP so400m-patch14-384 (FLUX.1-Redux-dev's ``image_encoder``, HunyuanVideo-1.5's
        vision encoder): 27 layers of 1152, 16 heads, 384 px in 14 px patches = 729 tokens."""
        return cls(image_size=384, patch_size=14, dim=1152, mlp_dim=4304, num_heads=16,
                   num_layers=27)

    @classmethod
    def tiny(cls) -> SiglipVisionConfig:
        """For tests: a 28 px image in 7 px patches (16 tokens), 2 layers of 4 heads x 16."""
        return cls(image_size=28, patch_size=7, dim=64, mlp_dim=96, num_heads=4, num_layers=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SiglipVisionConfig:
        """From a transformers ``config.json``: a ``SiglipVisionModel``'s, or a ``SiglipModel``'s
        (its ``vision_config`` is read); also a manifest's ``config``. Missing keys take
        transformers' defaults; keys that would change the architecture unseen are errors."""
        vision = d.get("vision_config") or d
        unknown = sorted(k for k in vision if k not in _TRANSFORMERS_NAMES and k not in _DROPPED)
        if unknown:
            raise VidaxError(f"unknown SigLIP vision config keys {unknown}")
        return cls(**{new: vision[old] for old, new in _TRANSFORMERS_NAMES.items()
                      if old in vision})


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
