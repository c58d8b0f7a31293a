"""The Gemma 3 language model's config (:class:`GemmaConfig`); the model is
:mod:`vidax.models.gemma.model`. No JAX here: the registry, ``vidax models`` and the manifests
read these without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError

SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class GemmaConfig:
    """transformers' ``Gemma3TextConfig`` fields that shape the model. ``layer_types=None``
    means every ``sliding_window_pattern``-th layer global, the others local (transformers'
    default), and is resolved on construction. ``rope_scaling_factor`` is the global layers'
    linear RoPE factor (1: unscaled)."""

    vocab_size: int = 262208
    hidden_size: int = 3840
    intermediate_size: int = 15360
    num_hidden_layers: int = 48
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 256
    query_pre_attn_scalar: float = 256
    rms_norm_eps: float = 1e-6
    sliding_window: int = 1024
    sliding_window_pattern: int = 6
    layer_types: tuple[str, ...] | None = None
    rope_theta: float = 1e6
    rope_local_base_freq: float = 1e4
    rope_scaling_factor: float = 8.0

    def __post_init__(self):
        if self.layer_types is None:
            types = tuple(FULL if (i + 1) % self.sliding_window_pattern == 0 else SLIDING
                          for i in range(self.num_hidden_layers))
        else:
            types = tuple(self.layer_types)
        object.__setattr__(self, "layer_types", types)
        if len(types) != self.num_hidden_layers or set(types) - {SLIDING, FULL}:
            raise VidaxError(f"Gemma 3 layer_types {list(types)} must name {SLIDING!r} or "
                             f"{FULL!r} for each of the {self.num_hidden_layers} layers")
        if self.head_dim % 2:
            raise VidaxError(f"Gemma 3 head_dim {self.head_dim} must be even (RoPE pairs)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise VidaxError(f"Gemma 3 num_attention_heads {self.num_attention_heads} must be "
                             f"a multiple of num_key_value_heads {self.num_key_value_heads}")

    # ------------------------------------------------------------------ presets
    @classmethod
    def gemma_3_12b(cls) -> GemmaConfig:
        """google/gemma-3-12b-it (and its QAT q4_0 *unquantized* bf16 export, which LTX-2
        and LTX-2.3 use): the text config ltx-core builds (``GEMMA3_CONFIG_FOR_LTX``)."""
        return cls()

    @classmethod
    def tiny(cls) -> GemmaConfig:
        """For tests: grouped-query attention (4 query heads on 2 key/value heads), a head
        size apart from hidden / heads, a query scalar apart from head_dim, local layers
        with a window shorter than the test sequence around one global layer, and the
        release's thetas and linear factor."""
        return cls(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                   query_pre_attn_scalar=32, sliding_window=5, sliding_window_pattern=2)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GemmaConfig:
        """From a transformers ``config.json``: a ``Gemma3ForConditionalGeneration``'s (its
        ``text_config`` is read) or a text model's own, in the transformers 4.x spelling
        (``rope_theta``, ``rope_local_base_freq``, ``rope_scaling``) or 5.x
        (``rope_parameters`` per layer type); also ltx-core's ``GEMMA3_CONFIG_FOR_LTX``
        dict. Values that would select a network vidax does not implement (logit
        soft-capping, bidirectional attention, biases, another activation or RoPE type) are
        errors."""
        text = d.get("text_config") or d
        if text.get("model_type", "gemma3_text") not in ("gemma3_text", "gemma3"):
            raise VidaxError(f"config model_type {text['model_type']!r} is not a Gemma 3 "
                             "language model")
        for key in ("attn_logit_softcapping", "use_bidirectional_attention", "attention_bias"):
            if text.get(key):
                raise VidaxError(f"Gemma 3 {key}={text[key]!r}: vidax implements the causal, "
                                 "bias-free attention without soft-capping of the released "
                                 "models")
        act = text.get("hidden_activation") or text.get("hidden_act") or "gelu_pytorch_tanh"
        if act != "gelu_pytorch_tanh":
            raise VidaxError(f"Gemma 3 hidden_activation {act!r}: vidax implements the "
                             "tanh-GELU-gated MLP")
        params = text.get("rope_parameters") or {}
        full = dict(params.get(FULL) or text.get("rope_scaling") or {})
        local = dict(params.get(SLIDING) or {})
        for kind, p in ((FULL, full), (SLIDING, local)):
            if p.get("rope_type", "default") not in ("default", "linear"):
                raise VidaxError(f"Gemma 3 {kind} rope_type {p['rope_type']!r}: vidax "
                                 "implements the default and linear types")
        if local.get("rope_type", "default") != "default":
            raise VidaxError("Gemma 3 local layers with a scaled RoPE: vidax implements "
                             "unscaled local RoPE, as released")
        factor = full.get("factor", 1.0) if full.get("rope_type") == "linear" else 1.0
        try:
            return cls(
                vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                intermediate_size=text["intermediate_size"],
                num_hidden_layers=text["num_hidden_layers"],
                num_attention_heads=text["num_attention_heads"],
                num_key_value_heads=text.get("num_key_value_heads",
                                             text["num_attention_heads"]),
                head_dim=text.get("head_dim", 256),
                query_pre_attn_scalar=text.get("query_pre_attn_scalar", 256),
                rms_norm_eps=text.get("rms_norm_eps", 1e-6),
                sliding_window=text.get("sliding_window", 4096),
                sliding_window_pattern=text.get("sliding_window_pattern", 6),
                layer_types=(tuple(text["layer_types"]) if text.get("layer_types") else None),
                rope_theta=full.get("rope_theta", text.get("rope_theta", 1e6)),
                rope_local_base_freq=local.get("rope_theta",
                                               text.get("rope_local_base_freq", 1e4)),
                rope_scaling_factor=float(factor))
        except KeyError as e:
            raise VidaxError(f"Gemma 3 config has no {e.args[0]!r} (neither at the top level "
                             "nor in text_config)") from e
