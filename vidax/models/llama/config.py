"""The Llama language model's config (:class:`LlamaConfig`); the model is
:mod:`vidax.models.llama.model`. No JAX here: the registry, ``vidax models`` and the manifests
read these without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError


@dataclass(frozen=True)
class LlamaConfig:
    """transformers' ``LlamaConfig`` fields that shape the model. ``head_dim=None`` means
    ``hidden_size / num_attention_heads`` (transformers' default) and is resolved on
    construction."""

    vocab_size: int = 128256
    hidden_size: int = 4096
    intermediate_size: int = 14336
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    attention_bias: bool = False

    def __post_init__(self):
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise VidaxError(f"Llama hidden_size {self.hidden_size} does not split into "
                                 f"{self.num_attention_heads} heads; set head_dim")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.head_dim % 2:
            raise VidaxError(f"Llama head_dim {self.head_dim} must be even (RoPE pairs)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise VidaxError(f"Llama num_attention_heads {self.num_attention_heads} must be a "
                             f"multiple of num_key_value_heads {self.num_key_value_heads}")

    # ------------------------------------------------------------------ presets
    @classmethod
    def llava_llama_3_8b_v1_1(cls) -> LlamaConfig:
        """xtuner/llava-llama-3-8b-v1_1: HunyuanVideo 1.0's text encoder. Llama-3-8B with 64
        rows added to the token table (128320: LLaVA's image and pad tokens)."""
        return cls(vocab_size=128320)

    @classmethod
    def tiny(cls) -> LlamaConfig:
        """For tests: grouped-query attention (4 query heads on 2 key/value heads), the
        release's eps and theta."""
        return cls(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LlamaConfig:
        """From a transformers ``config.json``: a Llama model's own, or a LLaVA model's
        (its ``text_config`` is read), in the 4.x spelling (``rope_theta``,
        ``rope_scaling``) or 5.x (``rope_parameters``); also a manifest's ``config``. Values
        that would select a network vidax does not implement (another activation, MLP
        biases, a scaled RoPE type) are errors."""
        text = d.get("text_config") or d
        if text.get("model_type", "llama") != "llama":
            raise VidaxError(f"config model_type {text['model_type']!r} is not a Llama "
                             "language model")
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise VidaxError(f"Llama rope_type {rope_type!r}: vidax implements the default "
                             "(unscaled) RoPE of Llama-3-8B; scaled types such as "
                             "Llama-3.1's 'llama3' are not implemented")
        if text.get("hidden_act", "silu") != "silu":
            raise VidaxError(f"Llama hidden_act {text['hidden_act']!r}: vidax implements the "
                             "SiLU-gated MLP")
        if text.get("mlp_bias"):
            raise VidaxError("Llama mlp_bias=true: vidax implements the bias-free MLP of the "
                             "released models")
        try:
            return cls(
                vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                intermediate_size=text["intermediate_size"],
                num_hidden_layers=text["num_hidden_layers"],
                num_attention_heads=text["num_attention_heads"],
                num_key_value_heads=text.get("num_key_value_heads",
                                             text["num_attention_heads"]),
                head_dim=text.get("head_dim"),
                rms_norm_eps=text.get("rms_norm_eps", 1e-6),
                rope_theta=rope.get("rope_theta", text.get("rope_theta", 10000.0)),
                attention_bias=bool(text.get("attention_bias", False)))
        except KeyError as e:
            raise VidaxError(f"Llama config has no {e.args[0]!r} (neither at the top level "
                             "nor in text_config)") from e
