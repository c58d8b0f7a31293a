"""CLIP's configs: the vision transformer's (:class:`CLIPVisionConfig`) and the text tower's
(:class:`CLIPTextConfig`); the models are :mod:`vidax.models.clip.model`. No JAX here: the
registry, ``vidax models`` and the manifests read these without loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError

#: The activations the towers implement (``vidax.models.clip.model`` holds the functions).
ACTIVATIONS = ("quick_gelu", "gelu", "gelu_pytorch_tanh")
_POOL_TYPES = ("token", "token_fc", "attn_pool")


@dataclass(frozen=True)
class CLIPVisionConfig:
    """The authors' ``VisionTransformer`` hyper-parameters; the defaults are its ``__init__``'s.

    ``pool_type`` only decides whether there is a class token (``token`` / ``token_fc``: yes;
    ``attn_pool``: no) -- the pooling heads themselves are not part of this model.
    ``pre_norm`` also decides the patch embedding's bias (``bias=not pre_norm``, as theirs).
    """

    image_size: int = 224
    patch_size: int = 16
    dim: int = 768
    mlp_ratio: float = 4
    num_heads: int = 12
    num_layers: int = 12
    pool_type: str = "token"
    pre_norm: bool = True
    activation: str = "quick_gelu"
    norm_eps: float = 1e-5

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise VidaxError(f"CLIP vision activation {self.activation!r} is not supported; "
                             f"known: {', '.join(ACTIVATIONS)}")
        if self.pool_type not in _POOL_TYPES:
            raise VidaxError(f"CLIP vision pool_type must be one of {_POOL_TYPES}, "
                             f"got {self.pool_type!r}")
        if self.image_size % self.patch_size:
            raise VidaxError(f"CLIP vision image_size {self.image_size} is not a multiple of "
                             f"patch_size {self.patch_size}")
        if self.dim % self.num_heads:
            raise VidaxError(f"CLIP vision dim {self.dim} does not split into "
                             f"{self.num_heads} heads")

    @property
    def class_token(self) -> bool:
        return self.pool_type in ("token", "token_fc")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_tokens(self) -> int:
        return self.num_patches + int(self.class_token)

    @property
    def mlp_dim(self) -> int:
        return int(self.dim * self.mlp_ratio)

    @classmethod
    def vit_h_14(cls) -> CLIPVisionConfig:
        """The visual tower of ``clip_xlm_roberta_vit_h_14`` (open-clip XLM-RoBERTa-large
        ViT-H/14), used by Wan2.1 I2V-14B (480P/720P) and FLF2V-14B: 257 tokens x 1280."""
        return cls(image_size=224, patch_size=14, dim=1280, mlp_ratio=4, num_heads=16,
                   num_layers=32, pool_type="token", pre_norm=True, activation="gelu")

    @classmethod
    def tiny(cls) -> CLIPVisionConfig:
        """For tests: a 28 px image in 7 px patches (17 tokens), 4 heads of 16, 3 blocks (so
        ``num_blocks=-1`` leaves out a block between two that run), the ViT-H/14's kinds."""
        return cls(image_size=28, patch_size=7, dim=64, mlp_ratio=4, num_heads=4, num_layers=3,
                   pool_type="token", pre_norm=True, activation="gelu")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CLIPVisionConfig:
        """From the authors' keyword arguments: ``XLMRobertaCLIP``'s (``vision_dim``,
        ``vision_layers``, ..., as the factory ``clip_xlm_roberta_vit_h_14`` and the manifests
        spell them; the text-tower and other non-vision keys are skipped) or
        ``VisionTransformer``'s own (``dim``, ``num_layers``, ...).

        ``vision_post_norm`` / ``post_norm=True`` (a post-norm block order no release uses)
        is refused rather than silently run as pre-norm.
        """
        if "vision_dim" in d:   # XLMRobertaCLIP's names
            renames = {"image_size": "image_size", "patch_size": "patch_size",
                       "vision_dim": "dim", "vision_mlp_ratio": "mlp_ratio",
                       "vision_heads": "num_heads", "vision_layers": "num_layers",
                       "vision_pool": "pool_type", "vision_pre_norm": "pre_norm",
                       "activation": "activation", "norm_eps": "norm_eps"}
            post_norm = d.get("vision_post_norm", False)
        else:                   # VisionTransformer's names
            renames = {f.name: f.name for f in dataclasses.fields(cls)}
            post_norm = d.get("post_norm", False)
            ignorable = {"out_dim", "attn_dropout", "proj_dropout", "embedding_dropout"}
            unknown = sorted(k for k in d if k not in renames and k not in ignorable
                             and k != "post_norm")
            if unknown:
                raise VidaxError(f"unknown CLIP VisionTransformer config keys {unknown}")
        if post_norm:
            raise VidaxError("CLIP vision post_norm=True (norm after attention/MLP) is not "
                             "implemented; every released checkpoint is pre-norm")
        return cls(**{new: d[old] for old, new in renames.items() if old in d})


# ------------------------------------------------------------------------------ text tower
@dataclass(frozen=True)
class CLIPTextConfig:
    """transformers' ``CLIPTextConfig`` fields that shape the text tower, under the names
    :class:`VisionBlock` reads (``dim`` = ``hidden_size``, ``mlp_dim`` =
    ``intermediate_size``, ...). Defaults: OpenAI CLIP ViT-L/14's text tower.

    ``eos_token_id`` picks the pooled token as transformers does: the legacy value 2 (what
    the OpenAI release's ``config.json`` still says) means the position of the largest token
    id (the end-of-text token is the last id of CLIP's vocabulary); any other value, the
    first position holding that id. With CLIP's tokenizer (pads with end-of-text) both
    pick the same token.
    """

    vocab_size: int = 49408
    max_position_embeddings: int = 77
    dim: int = 768
    mlp_dim: int = 3072
    num_heads: int = 12
    num_layers: int = 12
    activation: str = "quick_gelu"
    norm_eps: float = 1e-5
    eos_token_id: int = 2

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise VidaxError(f"CLIP text activation {self.activation!r} is not supported; "
                             f"known: {', '.join(ACTIVATIONS)}")
        if self.dim % self.num_heads:
            raise VidaxError(f"CLIP text dim {self.dim} does not split into "
                             f"{self.num_heads} heads")

    @classmethod
    def vit_l_14(cls) -> CLIPTextConfig:
        """openai/clip-vit-large-patch14's text tower (HunyuanVideo 1.0's ``text_encoder_2``):
        12 layers of 768, 77 tokens."""
        return cls()

    @classmethod
    def tiny(cls) -> CLIPTextConfig:
        """For tests: 3 layers of 4 heads x 16, 16 positions."""
        return cls(vocab_size=99, max_position_embeddings=16, dim=64, mlp_dim=96, num_heads=4,
                   num_layers=3)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CLIPTextConfig:
        """From a transformers ``config.json``: a ``CLIPModel``'s (its ``text_config`` is
        read) or a ``CLIPTextModel``'s own; also a manifest's ``config``. A missing
        ``eos_token_id`` takes transformers' default (49407)."""
        text = d.get("text_config") or d
        try:
            return cls(vocab_size=text["vocab_size"],
                       max_position_embeddings=text["max_position_embeddings"],
                       dim=text["hidden_size"], mlp_dim=text["intermediate_size"],
                       num_heads=text["num_attention_heads"],
                       num_layers=text["num_hidden_layers"],
                       activation=text.get("hidden_act", "quick_gelu"),
                       norm_eps=text.get("layer_norm_eps", 1e-5),
                       eos_token_id=text.get("eos_token_id", 49407))
        except KeyError as e:
            raise VidaxError(f"CLIP text config has no {e.args[0]!r} (neither at the top level "
                             "nor in text_config)") from e
