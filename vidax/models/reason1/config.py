"""The Qwen2.5-VL language model's config (:class:`Reason1Config`: Cosmos-Reason1-7B,
Qwen2.5-VL-7B-Instruct); the model is :mod:`vidax.models.reason1.model`. No JAX here: the
registry, ``vidax models`` and the manifests read these without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError


@dataclass(frozen=True)
class Reason1Config:
    """The Qwen2.5-VL language model (transformers' ``Qwen2_5_VLTextConfig`` fields that shape
    it). ``head_dim`` is ``hidden_size / num_attention_heads``, as transformers' attention
    takes it; ``mrope_section`` splits ``head_dim / 2`` rotation frequencies over (t, h, w)."""

    vocab_size: int = 152064
    hidden_size: int = 3584
    intermediate_size: int = 18944
    num_hidden_layers: int = 28
    num_attention_heads: int = 28
    num_key_value_heads: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    mrope_section: tuple[int, ...] = (16, 24, 24)

    def __post_init__(self):
        object.__setattr__(self, "mrope_section", tuple(int(s) for s in self.mrope_section))
        if self.hidden_size % self.num_attention_heads:
            raise VidaxError(f"Qwen2.5-VL hidden_size {self.hidden_size} must split into "
                             f"{self.num_attention_heads} equal heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise VidaxError(f"Qwen2.5-VL num_attention_heads {self.num_attention_heads} must be "
                             f"a multiple of num_key_value_heads {self.num_key_value_heads}")
        if len(self.mrope_section) != 3 or 2 * sum(self.mrope_section) != self.head_dim:
            raise VidaxError(f"Qwen2.5-VL mrope_section {list(self.mrope_section)} must be three "
                             f"chunks (t, h, w) of head_dim / 2 = {self.head_dim // 2} "
                             "frequencies")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # ------------------------------------------------------------------ presets
    @classmethod
    def reason1_7b(cls) -> Reason1Config:
        """nvidia/Cosmos-Reason1-7B: Cosmos-Predict2.5's text encoder (a Qwen2.5-VL-7B
        fine-tune, the same architecture)."""
        return cls()

    @classmethod
    def qwen2_5_vl_7b_instruct(cls) -> Reason1Config:
        """Qwen/Qwen2.5-VL-7B-Instruct: HunyuanVideo-1.5's text encoder."""
        return cls()

    @classmethod
    def tiny(cls) -> Reason1Config:
        """For tests: grouped-query attention (4 query heads on 2 key/value heads), unequal
        mRoPE chunks, the real eps and theta."""
        return cls(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, mrope_section=(2, 3, 3))

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reason1Config:
        """From a transformers ``config.json`` of Qwen2.5-VL (the whole model's, whose
        ``text_config`` is read, or the text model's own), in the transformers 4.x spelling
        (top-level fields, ``rope_scaling``) or 5.x (``rope_parameters``), or from a
        manifest's flat ``config``. Vision settings are not the language model's business and
        are not read. Values that would select a network vidax does not implement (another
        activation, sliding-window attention, a ``head_dim`` other than hidden / heads, a
        non-default RoPE type) are errors."""
        text = d.get("text_config") or d
        # transformers 4.x kept the text fields at the top level and only some in text_config
        text = {**{k: v for k, v in d.items() if k != "text_config"}, **text}
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", "default")
        if rope_type != "default":
            raise VidaxError(f"Qwen2.5-VL rope_type {rope_type!r}: vidax implements the default "
                             "(unscaled) multimodal RoPE of the released models")
        if text.get("hidden_act", "silu") != "silu":
            raise VidaxError(f"Qwen2.5-VL hidden_act {text['hidden_act']!r}: vidax implements "
                             "the SiLU-gated MLP")
        if text.get("use_sliding_window"):
            raise VidaxError("Qwen2.5-VL use_sliding_window=true: vidax implements full causal "
                             "attention (the released models do not use the sliding window)")
        try:
            config = cls(
                vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                intermediate_size=text["intermediate_size"],
                num_hidden_layers=text["num_hidden_layers"],
                num_attention_heads=text["num_attention_heads"],
                num_key_value_heads=text.get("num_key_value_heads",
                                             text["num_attention_heads"]),
                rms_norm_eps=text.get("rms_norm_eps", 1e-6),
                rope_theta=rope.get("rope_theta", text.get("rope_theta", 1e6)),
                mrope_section=tuple(rope.get("mrope_section", text.get("mrope_section",
                                                                        (16, 24, 24)))))
        except KeyError as e:
            raise VidaxError(f"Qwen2.5-VL config has no {e.args[0]!r} (neither at the top "
                             "level nor in text_config)") from e
        if text.get("head_dim") not in (None, config.head_dim):
            raise VidaxError(f"Qwen2.5-VL head_dim {text['head_dim']} differs from hidden_size "
                             f"/ num_attention_heads = {config.head_dim}, which transformers' "
                             "attention uses")
        return config
