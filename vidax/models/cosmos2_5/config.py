"""Cosmos-Predict2.5's DiT config (:class:`CosmosDiTConfig`: the authors' ``MinimalV1LVGDiT`` and
diffusers' ``CosmosTransformer3DModel`` hyper-parameters); the model is
:mod:`vidax.models.cosmos2_5.dit`. No JAX here: the registry, ``vidax models`` and the manifests
read these without loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError


# The one RoPE base before the per-axis extrapolation factor (``VideoRopePosition3DEmb``).
_ROPE_BASE = 10000.0

# Authors' config keys whose value is fixed by what this module implements: another value is
# another network (an error, not a silent difference).
_FIXED_AUTHORS_KEYS = {
    "pos_emb_cls": "rope3d", "use_adaln_lora": True, "extra_per_block_abs_pos_emb": False,
    "rope_enable_fps_modulation": False, "use_wan_fp32_strategy": True,
    "extra_image_context_dim": None, "concat_target_mask": False,
}

# Authors' config keys that change nothing here: ``pos_emb_learnable`` / ``_interpolation``
# only configure the absent extra position embedding; ``class`` / ``experiment`` are the
# manifests' provenance notes.
_INERT_AUTHORS_KEYS = {"pos_emb_learnable", "pos_emb_interpolation", "class", "experiment",
                       "atten_backend", "min_fps", "max_fps"}

# diffusers' ``CosmosTransformer3DModel`` keys -> a check of the value this module needs.
_FIXED_DIFFUSERS_KEYS = {"extra_pos_embed_type": None, "img_context_dim_in": None,
                         "controlnet_block_every_n": None}
_INERT_DIFFUSERS_KEYS = {"img_context_num_tokens", "img_context_dim_out"}


@dataclass(frozen=True)
class CosmosDiTConfig:
    """The authors' ``MinimalV1LVGDiT`` hyper-parameters under their names.

    ``in_channels`` is the authors' config value: the VAE latent channels. Their
    ``MinimalV1LVGDiT`` adds the condition-mask channel and ``concat_padding_mask`` the padding
    mask, so the patch embedding sees ``in_channels + 1 + concat_padding_mask`` channels
    (diffusers' ``in_channels`` already counts the condition mask: 17).

    ``qk_norm_eps``: the authors' q/k norms are TransformerEngine ``RMSNorm(eps=1e-6)``;
    diffusers builds them with its ``Attention`` default, 1e-5. Every preset and
    :meth:`from_dict` (either layout's dict) use the authors' 1e-6, the value the weights were
    trained with; the diffusers parity test sets 1e-5 to reproduce diffusers exactly.
    """

    in_channels: int = 16
    out_channels: int = 16
    patch_spatial: int = 2
    patch_temporal: int = 1
    model_channels: int = 2048
    num_blocks: int = 28
    num_heads: int = 16
    mlp_ratio: float = 4.0
    adaln_lora_dim: int = 256
    concat_padding_mask: bool = True
    use_crossattn_projection: bool = True
    crossattn_proj_in_channels: int = 100352
    crossattn_emb_channels: int = 1024
    max_img_h: int = 240
    max_img_w: int = 240
    max_frames: int = 128
    rope_t_extrapolation_ratio: float = 1.0
    rope_h_extrapolation_ratio: float = 3.0
    rope_w_extrapolation_ratio: float = 3.0
    timestep_scale: float = 0.001
    qk_norm_eps: float = 1e-6

    def __post_init__(self):
        if self.model_channels % self.num_heads:
            raise VidaxError(f"Cosmos DiT model_channels {self.model_channels} must split into "
                             f"{self.num_heads} heads")
        if min(self.rope_axis_dims) <= 2 or self.head_dim % 2:
            raise VidaxError(f"Cosmos DiT head_dim {self.head_dim} is too small for 3D RoPE "
                             "(each of the t/h/w parts needs more than 2 dims)")

    @property
    def head_dim(self) -> int:
        return self.model_channels // self.num_heads

    @property
    def patch_in_channels(self) -> int:
        """Channels into the patch embedding: latents, condition mask, padding mask."""
        return self.in_channels + 1 + int(self.concat_padding_mask)

    @property
    def patch_size(self) -> tuple[int, int, int]:
        return self.patch_temporal, self.patch_spatial, self.patch_spatial

    @property
    def rope_axis_dims(self) -> tuple[int, int, int]:
        """Real RoPE dims per (t, h, w) axis: 44/42/42 at head_dim 128."""
        d = self.head_dim
        dim_h = d // 6 * 2
        return d - 2 * dim_h, dim_h, dim_h

    @property
    def rope_thetas(self) -> tuple[float, float, float]:
        """Per-axis RoPE base: ``10000 * ratio ** (d / (d - 2))`` (the authors' NTK factors)."""
        ratios = (self.rope_t_extrapolation_ratio, self.rope_h_extrapolation_ratio,
                  self.rope_w_extrapolation_ratio)
        return tuple(_ROPE_BASE * r ** (d / (d - 2)) for r, d in zip(ratios, self.rope_axis_dims))

    @property
    def max_grid(self) -> tuple[int, int, int]:
        """The largest token grid the authors' RoPE table covers (their ``len_t/h/w``)."""
        return (self.max_frames // self.patch_temporal, self.max_img_h // self.patch_spatial,
                self.max_img_w // self.patch_spatial)

    @classmethod
    def predict_2b(cls) -> CosmosDiTConfig:
        """Cosmos-Predict2.5-2B (pre-trained and post-trained: one config)."""
        return cls()

    @classmethod
    def predict_14b(cls) -> CosmosDiTConfig:
        """Cosmos-Predict2.5-14B (pre-trained and post-trained: one config)."""
        return cls(model_channels=5120, num_blocks=36, num_heads=40)

    @classmethod
    def tiny(cls) -> CosmosDiTConfig:
        """For tests: tiny widths, every structural feature of the releases kept (adaLN-LoRA,
        the text projection, the padding mask, RoPE ratios 1/3/3). head_dim 16 gives RoPE
        axes 8/4/4 (unequal, like 44/42/42)."""
        return cls(model_channels=64, num_blocks=2, num_heads=4, adaln_lora_dim=16,
                   crossattn_proj_in_channels=48, crossattn_emb_channels=32)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CosmosDiTConfig:
        """From the authors' network config (a manifest's ``config``) or from diffusers'
        ``CosmosTransformer3DModel`` ``config.json`` (told apart by ``num_attention_heads``).

        Keys starting with ``_`` (diffusers' bookkeeping) are ignored; a key whose value
        selects a feature this module does not implement (fps-modulated RoPE, an image
        context, a learnable extra position embedding, ...) is an error naming it, as is any
        unknown key.
        """
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        if "num_attention_heads" in d:
            return cls._from_diffusers(d)
        names = {f.name for f in dataclasses.fields(cls)}
        _check_fixed(d, _FIXED_AUTHORS_KEYS, "authors'")
        unknown = sorted(set(d) - names - set(_FIXED_AUTHORS_KEYS) - _INERT_AUTHORS_KEYS)
        if unknown:
            raise VidaxError(f"unknown Cosmos-Predict2.5 DiT config keys {unknown}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def _from_diffusers(cls, d: dict[str, Any]) -> CosmosDiTConfig:
        _check_fixed(d, _FIXED_DIFFUSERS_KEYS, "diffusers'")
        known = {"in_channels", "out_channels", "num_attention_heads", "attention_head_dim",
                 "num_layers", "mlp_ratio", "text_embed_dim", "adaln_lora_dim", "max_size",
                 "patch_size", "rope_scale", "concat_padding_mask", "use_crossattn_projection",
                 "crossattn_proj_in_channels", "encoder_hidden_states_channels"}
        unknown = sorted(set(d) - known - set(_FIXED_DIFFUSERS_KEYS) - _INERT_DIFFUSERS_KEYS)
        if unknown:
            raise VidaxError(f"unknown diffusers CosmosTransformer3DModel config keys {unknown}")
        base = cls()
        pt, ph, pw = d.get("patch_size", base.patch_size)
        if ph != pw:
            raise VidaxError(f"diffusers Cosmos DiT patch_size {d['patch_size']}: the authors' "
                             "network has one spatial patch size")
        text_dim = d.get("text_embed_dim", 1024)
        projected = d.get("encoder_hidden_states_channels", text_dim)
        if d.get("use_crossattn_projection", False) and projected != text_dim:
            raise VidaxError(f"diffusers Cosmos DiT: encoder_hidden_states_channels {projected} "
                             f"must equal text_embed_dim {text_dim} (the projection feeds the "
                             "cross-attention)")
        max_t, max_h, max_w = d.get("max_size", (128, 240, 240))
        rope_t, rope_h, rope_w = d.get("rope_scale", (2.0, 1.0, 1.0))
        return cls(
            in_channels=d.get("in_channels", 16) - 1, out_channels=d.get("out_channels", 16),
            patch_spatial=ph, patch_temporal=pt,
            model_channels=d.get("num_attention_heads", 32) * d.get("attention_head_dim", 128),
            num_blocks=d.get("num_layers", 28), num_heads=d.get("num_attention_heads", 32),
            mlp_ratio=d.get("mlp_ratio", 4.0), adaln_lora_dim=d.get("adaln_lora_dim", 256),
            concat_padding_mask=d.get("concat_padding_mask", True),
            use_crossattn_projection=d.get("use_crossattn_projection", False),
            crossattn_proj_in_channels=d.get("crossattn_proj_in_channels", 1024),
            crossattn_emb_channels=text_dim, max_img_h=max_h, max_img_w=max_w, max_frames=max_t,
            rope_t_extrapolation_ratio=rope_t, rope_h_extrapolation_ratio=rope_h,
            rope_w_extrapolation_ratio=rope_w)


def _check_fixed(d: dict[str, Any], fixed: dict[str, Any], whose: str) -> None:
    for key, want in fixed.items():
        if key in d and d[key] != want:
            raise VidaxError(f"Cosmos-Predict2.5 DiT: {whose} config key {key}={d[key]!r} "
                             f"selects a network vidax does not implement (needs {want!r}, "
                             "the setting of every released Predict2.5 base model)")
