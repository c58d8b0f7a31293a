"""Cosmos3's DiT config (:class:`Cosmos3DiTConfig`, diffusers' ``Cosmos3OmniTransformer`` hyper-
parameters); the model is :mod:`vidax.models.cosmos3.dit`. No JAX here: the registry, ``vidax
models`` and the manifests read these without loading a model.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError

log = logging.getLogger("vidax.cosmos3")


# diffusers config keys that only configure what the mapper ignores (the sound and action
# heads, the reasoner's text output), runtime hints, or bookkeeping of the converter that wrote
# the release (Edge's ``backbone_type``; Nano's first ``diffusers_cosmos3`` shim class); they
# change nothing in the video network.
_INERT_KEYS = {"action_dim", "action_gen", "num_embodiment_domains", "sound_dim", "sound_gen",
               "sound_latent_fps", "attention_dropout", "dtype", "backbone_type", "use_moe",
               "model_type", "joint_attn_implementation", "rope_scaling", "patch_latent_dim"}


@dataclass(frozen=True)
class Cosmos3DiTConfig:
    """``Cosmos3OmniTransformer``'s hyper-parameters under diffusers' names (the video part).

    ``temporal_compression_factor``: the VAE's latent-frame stride (4 for the Wan2.2 VAE); it
    enters the fps-modulated positions only through float32 rounding, as the pipeline's
    ``vae_scale_factor_temporal`` does (Edge's config.json carries it, Nano's does not).
    """

    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 36
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    attention_bias: bool = False
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    qk_norm_for_text: bool = True
    use_und_k_norm_for_gen: bool = False
    vocab_size: int = 151936
    rope_theta: float = 5e6
    rope_axes_dim: tuple[int, int, int] = (24, 20, 20)
    latent_channel: int = 48
    latent_patch_size: int = 2
    timestep_scale: float = 0.001
    base_fps: float = 24.0
    enable_fps_modulation: bool = True
    unified_3d_mrope_reset_spatial_ids: bool = True
    unified_3d_mrope_temporal_modality_margin: int = 15000
    temporal_compression_factor: int = 4

    def __post_init__(self):
        object.__setattr__(self, "rope_axes_dim", tuple(int(a) for a in self.rope_axes_dim))
        if self.hidden_act not in ("silu", "relu2"):
            raise VidaxError(f"Cosmos3 DiT hidden_act {self.hidden_act!r}: diffusers' "
                             "Cosmos3VLTextMLP has 'silu' (Nano) and 'relu2' (Edge)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise VidaxError(f"Cosmos3 DiT: {self.num_attention_heads} query heads do not "
                             f"group over {self.num_key_value_heads} key/value heads")
        if self.head_dim % 2 or sum(self.rope_axes_dim) != self.head_dim // 2:
            raise VidaxError(f"Cosmos3 DiT rope_axes_dim {self.rope_axes_dim} must share the "
                             f"{self.head_dim // 2} RoPE frequencies of head_dim {self.head_dim}")

    @property
    def patch_latent_dim(self) -> int:
        """Features of one patch token: ``p * p * latent_channel`` (192 for the releases)."""
        return self.latent_patch_size ** 2 * self.latent_channel

    @property
    def has_und_k_norm_for_gen(self) -> bool:
        """diffusers builds ``k_norm_und_for_gen`` only without the prompt's own q/k norm."""
        return self.use_und_k_norm_for_gen and not self.qk_norm_for_text

    @classmethod
    def nano(cls) -> Cosmos3DiTConfig:
        """Cosmos3-Nano: the Qwen3-VL-8B backbone, 36 layers of width 4096."""
        return cls()

    @classmethod
    def edge(cls) -> Cosmos3DiTConfig:
        """Cosmos3-Edge: the Nemotron-2B dense backbone, 28 layers of width 2048."""
        return cls(hidden_size=2048, intermediate_size=9216, num_hidden_layers=28,
                   num_attention_heads=16, num_key_value_heads=8, rms_norm_eps=1e-5,
                   hidden_act="relu2", qk_norm_for_text=False, use_und_k_norm_for_gen=True,
                   vocab_size=131072, rope_theta=1e8)

    @classmethod
    def tiny(cls, kind: str = "nano") -> Cosmos3DiTConfig:
        """For tests: tiny widths with every structural feature of ``kind`` (``"nano"`` or
        ``"edge"``) kept: GQA (4 query / 2 key-value heads), the MLP and norm flags, and
        interleaved 3D RoPE with axes (4, 2, 2) over head_dim 16 (so, like (24, 20, 20) over
        128, the last frequencies are t's)."""
        if kind not in ("nano", "edge"):
            raise VidaxError(f"Cosmos3 DiT tiny kind {kind!r}: 'nano' or 'edge'")
        base = cls.nano() if kind == "nano" else cls.edge()
        return dataclasses.replace(base, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, vocab_size=97,
                                   rope_axes_dim=(4, 2, 2), latent_channel=8)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cosmos3DiTConfig:
        """From diffusers' ``transformer/config.json`` (or a manifest's ``config``).

        Keys starting with ``_`` and the keys of the heads video generation does not use are
        skipped; ``rope_axes_dim`` falls back to ``rope_scaling["mrope_section"]`` as diffusers
        does. Keys this module does not know are logged and skipped, as diffusers skips them:
        the Nano release's config.json was written by an earlier shim class whose full key list
        is not known here. ``patch_latent_dim`` must equal ``latent_patch_size ** 2 *
        latent_channel`` (diffusers' patchify assumes it).
        """
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names - _INERT_KEYS)
        if unknown:
            log.warning("Cosmos3 DiT config: skipping keys vidax does not know: %s", unknown)
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("rope_axes_dim") is None:
            kwargs.pop("rope_axes_dim", None)
            section = (d.get("rope_scaling") or {}).get("mrope_section")
            if section is not None:
                kwargs["rope_axes_dim"] = tuple(section)
        if kwargs.get("temporal_compression_factor") is None:
            kwargs.pop("temporal_compression_factor", None)
        cfg = cls(**kwargs)
        if d.get("patch_latent_dim", cfg.patch_latent_dim) != cfg.patch_latent_dim:
            raise VidaxError(f"Cosmos3 DiT config: patch_latent_dim {d['patch_latent_dim']} is "
                             f"not latent_patch_size^2 x latent_channel = {cfg.patch_latent_dim}")
        return cfg
