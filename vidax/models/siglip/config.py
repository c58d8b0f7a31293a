"""The SigLIP vision tower's config (:class:`SiglipVisionConfig`); the model is
:mod:`vidax.models.siglip.model`. No JAX here: the registry, ``vidax models`` and the manifests
read these without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.models.clip.config import ACTIVATIONS


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
        if self.activation not in ACTIVATIONS:
            raise VidaxError(f"SigLIP vision hidden_act {self.activation!r} is not supported; "
                             f"known: {', '.join(ACTIVATIONS)}")
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
