"""The Gemma 3 language model's config (:class:`GemmaConfig`; the model is
:mod:`vidax.models.gemma.model`) and Gemma 4's (:class:`Gemma4Config`; LTX-2.5's text encoder,
:mod:`vidax.models.gemma.gemma4`), with what LTX-2.5's text-encoder file needs beside them:
its ``gemma_config`` metadata (:func:`gemma_config_json`) and the authors' DiT / encoder
pairing check (:func:`check_gemma_source`). No JAX here: the registry, ``vidax models`` and
the manifests read these without loading a model.
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


# ============================================================================== Gemma 4
#: transformers' defaults for Gemma 4's two RoPE types (``Gemma4UnifiedTextConfig``).
_GEMMA4_ROPE = {SLIDING: {"rope_type": "default", "rope_theta": 1e4},
                FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                       "rope_theta": 1e6}}


@dataclass(frozen=True)
class Gemma4Config:
    """transformers 5.24's ``Gemma4UnifiedTextConfig`` fields that shape the Gemma 4 language
    model (:mod:`vidax.models.gemma.gemma4`), plus the multimodal placeholder ids of the
    enclosing ``Gemma4UnifiedConfig`` (``Gemma4UnifiedModel`` embeds them as ``pad_token_id``).

    Local (``sliding_attention``) layers: ``num_key_value_heads`` heads of ``head_dim``, a
    ``v_proj``, default RoPE at ``rope_local_theta``. Global (``full_attention``) layers:
    ``global_head_dim`` wide heads, ``num_global_key_value_heads`` of them and no ``v_proj``
    when ``attention_k_eq_v`` (else ``num_key_value_heads`` with one), proportional RoPE at
    ``rope_theta`` on the first ``partial_rotary_factor`` of each head's frequency pairs,
    frequencies divided by ``rope_factor``. ``layer_types=None``: every 6th layer global, as
    transformers; the last layer is always global (transformers forces it)."""

    vocab_size: int = 262144
    hidden_size: int = 3840
    intermediate_size: int = 15360
    num_hidden_layers: int = 48
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 256
    global_head_dim: int = 512
    num_global_key_value_heads: int | None = 1
    attention_k_eq_v: bool = True
    rms_norm_eps: float = 1e-6
    sliding_window: int = 1024
    layer_types: tuple[str, ...] | None = None
    rope_theta: float = 1e6
    partial_rotary_factor: float = 0.25
    rope_factor: float = 1.0
    rope_local_theta: float = 1e4
    pad_token_id: int = 0
    placeholder_token_ids: tuple[int, ...] = (258880, 258884, 258881)   # image, video, audio

    def __post_init__(self):
        types = (tuple(FULL if (i + 1) % 6 == 0 else SLIDING
                       for i in range(self.num_hidden_layers))
                 if self.layer_types is None else tuple(self.layer_types))
        if types and types[-1] != FULL:          # Gemma4UnifiedTextConfig.__post_init__
            types = (*types[:-1], FULL)
        object.__setattr__(self, "layer_types", types)
        object.__setattr__(self, "placeholder_token_ids", tuple(self.placeholder_token_ids))
        if len(types) != self.num_hidden_layers or set(types) - {SLIDING, FULL}:
            raise VidaxError(f"Gemma 4 layer_types {list(types)} must name {SLIDING!r} or "
                             f"{FULL!r} for each of the {self.num_hidden_layers} layers")
        for name in ("head_dim", "global_head_dim"):
            if getattr(self, name) % 2:
                raise VidaxError(f"Gemma 4 {name} {getattr(self, name)} must be even (RoPE "
                                 "pairs)")
        for kind in (SLIDING, FULL):
            if self.num_attention_heads % self.kv_heads(kind):
                raise VidaxError(f"Gemma 4 num_attention_heads {self.num_attention_heads} "
                                 f"must be a multiple of the {kind} layers' "
                                 f"{self.kv_heads(kind)} key/value heads")
        if not 0 <= self.partial_rotary_factor <= 1:
            raise VidaxError(f"Gemma 4 partial_rotary_factor {self.partial_rotary_factor} "
                             "must lie in [0, 1]")

    # per layer type, as transformers' per_layer_config resolves them
    def layer_head_dim(self, kind: str) -> int:
        return self.global_head_dim if kind == FULL else self.head_dim

    def kv_heads(self, kind: str) -> int:
        if kind == FULL and self.attention_k_eq_v and self.num_global_key_value_heads:
            return self.num_global_key_value_heads
        return self.num_key_value_heads

    def shares_kv(self, kind: str) -> bool:
        """Values are the key projection (no ``v_proj``): global layers under ``k_eq_v``."""
        return kind == FULL and self.attention_k_eq_v

    # ------------------------------------------------------------------ presets
    @classmethod
    def gemma4_12b_ltx(cls) -> Gemma4Config:
        """LTX-2.5's text encoder (``gemma4-12b-with-proj-ltx-2.5-bf16.safetensors``, the
        fine-tuned Gemma 4 12B ``gemma4_unified``): its ``gemma_config["text_config"]`` --
        48 layers, 5 local then 1 global, local 16 x 256 on 8 key/value heads, global
        16 x 512 on one shared K=V head."""
        return cls()

    @classmethod
    def tiny(cls) -> Gemma4Config:
        """For tests: grouped-query local layers (4 query heads on 2 key/value heads) with a
        window shorter than the test sequence, two global K=V layers with wider heads
        (32, one key/value head) and a quarter of their RoPE pairs rotated, the release's
        thetas; placeholder ids inside the tiny vocabulary."""
        return cls(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   global_head_dim=32, num_global_key_value_heads=1, sliding_window=5,
                   layer_types=(SLIDING, FULL, SLIDING, FULL),
                   placeholder_token_ids=(250, 252, 251))

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Gemma4Config:
        """From a transformers ``Gemma4UnifiedConfig`` dict (the TE file's
        ``__metadata__["gemma_config"]``; its ``text_config`` is read, the placeholder ids
        from the top level) or a ``Gemma4UnifiedTextConfig`` dict alone. The global layers'
        sizes are read as the original config spells them (``global_head_dim``,
        ``num_global_key_value_heads``) or as transformers 5.24 saves them
        (``per_layer_config``: the same overrides on every global layer). Values that select
        a network vidax does not implement are errors: bidirectional text attention, biases,
        shared key/value layers, the double-wide MLP, another activation or RoPE type,
        per-layer overrides it cannot express."""
        text = d.get("text_config") or d
        kind = text.get("model_type", "gemma4_unified_text")
        if kind not in ("gemma4_unified_text", "gemma4_text"):
            raise VidaxError(f"config model_type {kind!r} is not a Gemma 4 language model")
        if text.get("use_bidirectional_attention") == "all":
            raise VidaxError("Gemma 4 use_bidirectional_attention='all': vidax implements the "
                             "causal text attention of the released models")
        for key in ("attention_bias", "use_double_wide_mlp", "num_kv_shared_layers",
                    "hidden_size_per_layer_input", "enable_moe_block"):
            if text.get(key):
                raise VidaxError(f"Gemma 4 {key}={text[key]!r}: vidax implements the dense, "
                                 "bias-free model without shared key/value layers (LTX-2.5's)")
        act = text.get("hidden_activation") or text.get("hidden_act") or "gelu_pytorch_tanh"
        if act != "gelu_pytorch_tanh":
            raise VidaxError(f"Gemma 4 hidden_activation {act!r}: vidax implements the "
                             "tanh-GELU-gated MLP")
        rope = {k: dict(v or {}) for k, v in (text.get("rope_parameters")
                                              or _GEMMA4_ROPE).items()}
        full, local = rope.get(FULL, _GEMMA4_ROPE[FULL]), rope.get(SLIDING, _GEMMA4_ROPE[SLIDING])
        if full.get("rope_type", "default") not in ("default", "proportional"):
            raise VidaxError(f"Gemma 4 full_attention rope_type {full['rope_type']!r}: vidax "
                             "implements the proportional and default types")
        if local.get("rope_type", "default") != "default":
            raise VidaxError(f"Gemma 4 sliding_attention rope_type {local['rope_type']!r}: "
                             "vidax implements the default (unscaled) local RoPE")
        proportional = full.get("rope_type") == "proportional"
        try:
            heads = text["num_attention_heads"]
            kv = text.get("num_key_value_heads", heads)
            k_eq_v = bool(text.get("attention_k_eq_v", False))
            global_dim = text.get("global_head_dim", 512)
            global_kv = text.get("num_global_key_value_heads")
            n = text["num_hidden_layers"]
            types = tuple(text["layer_types"]) if text.get("layer_types") else None
            # Gemma4UnifiedModel embeds its image/video/audio placeholders as padding; a
            # bare text model's config has none
            # (transformers' defaults where the config names none)
            placeholders = () if d is text else tuple(
                d.get(k, default) for k, default in (("image_token_id", 258880),
                                                     ("video_token_id", 258884),
                                                     ("audio_token_id", 258881))
                if d.get(k, default) is not None)
            if "per_layer_config" in text:
                global_dim, global_kv = _per_layer_overrides(
                    text["per_layer_config"], types, n, text.get("head_dim", 256), kv, k_eq_v)
            return cls(
                vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                intermediate_size=text["intermediate_size"], num_hidden_layers=n,
                num_attention_heads=heads, num_key_value_heads=kv,
                head_dim=text.get("head_dim", 256), global_head_dim=global_dim,
                num_global_key_value_heads=global_kv, attention_k_eq_v=k_eq_v,
                rms_norm_eps=text.get("rms_norm_eps", 1e-6),
                sliding_window=text.get("sliding_window", 1024), layer_types=types,
                rope_theta=full.get("rope_theta", 1e6),
                partial_rotary_factor=(full.get("partial_rotary_factor", 1.0)
                                       if proportional else 1.0),
                rope_factor=float(full.get("factor", 1.0)) if proportional else 1.0,
                rope_local_theta=local.get("rope_theta", 1e4),
                pad_token_id=text.get("pad_token_id", 0) or 0,
                placeholder_token_ids=placeholders)
        except KeyError as e:
            raise VidaxError(f"Gemma 4 config has no {e.args[0]!r} (neither at the top level "
                             "nor in text_config)") from e


def _per_layer_overrides(per_layer: dict, types, n: int, head_dim: int, kv: int,
                         k_eq_v: bool) -> tuple[int, int | None]:
    """``(global_head_dim, num_global_key_value_heads)`` from transformers 5.24's saved
    ``per_layer_config`` (``{"5": {"head_dim": 512, "num_key_value_heads": 1}, ...}``): the
    same overrides on every global layer and none elsewhere, else an error."""
    types = types or tuple(FULL if (i + 1) % 6 == 0 else SLIDING for i in range(n))
    seen = set()
    for i, kind in enumerate(types):
        o = dict(per_layer.get(str(i), per_layer.get(i, {})) or {})
        if set(o) - {"head_dim", "num_key_value_heads"}:
            raise VidaxError(f"Gemma 4 per_layer_config of layer {i} overrides "
                             f"{sorted(set(o) - {'head_dim', 'num_key_value_heads'})}: vidax "
                             "reads only head_dim and num_key_value_heads")
        if kind == FULL:
            seen.add((o.get("head_dim", head_dim), o.get("num_key_value_heads", kv)))
        elif o:
            raise VidaxError(f"Gemma 4 per_layer_config overrides local layer {i} ({o}): "
                             "vidax gives every local layer the same sizes")
    if len(seen) > 1:
        raise VidaxError(f"Gemma 4 per_layer_config gives the global layers different sizes "
                         f"{sorted(seen)}: vidax gives them one size")
    dim, global_kv = seen.pop() if seen else (512, None)
    if not k_eq_v and global_kv != kv:
        raise VidaxError(f"Gemma 4 per_layer_config gives global layers {global_kv} key/value "
                         f"heads without attention_k_eq_v: transformers then keeps "
                         f"num_key_value_heads ({kv})")
    return dim, (global_kv if k_eq_v else None)


# ----------------------------------------------------------- LTX-2.5's text-encoder file
#: The safetensors metadata key holding the HF config JSON in LTX-2.5's text-encoder file
#: (``GEMMA_CONFIG_METADATA_KEY``, Lightricks/LTX-2@400fd31 gemma_assets.py).
GEMMA_CONFIG_KEY = "gemma_config"
#: From this DiT ``model_version`` on, a DiT file must name its Gemma
#: (``_GEMMA_SOURCE_CHECKPOINT_REQUIRED_SINCE``, ltx-core's encoder_configurator.py @400fd31).
GEMMA_SOURCE_REQUIRED_SINCE = (2, 4, 0)


def gemma_config_json(metadata: dict[str, str], source: str) -> dict | None:
    """The HF config dict in a text-encoder file's ``__metadata__["gemma_config"]``, or None
    where the file has none."""
    import json

    raw = metadata.get(GEMMA_CONFIG_KEY)
    if raw is None:
        return None
    try:
        config = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as e:
        raise VidaxError(f"{source}: the safetensors metadata {GEMMA_CONFIG_KEY!r} is not "
                         f"valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise VidaxError(f"{source}: the safetensors metadata {GEMMA_CONFIG_KEY!r} is not a "
                         "JSON object")
    return config


def _parse_model_version(version) -> tuple[int, ...]:
    """ltx-core's ``parse_model_version``: the leading dot-separated integers ("2.5.0" ->
    (2, 5, 0), "2.3.rc1" -> (2, 3)); unset or non-numeric -> ()."""
    parts = []
    for part in str(version or "").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def _metadata_value(value):
    """A safetensors metadata value as ltx-core's ``SafetensorsModelStateDictLoader.metadata``
    reads it: JSON where it parses, else the raw string."""
    import json

    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def check_gemma_source(dit_metadata: dict, encoder_config: dict, *, dit_file,
                       encoder_file) -> None:
    """Refuse a text encoder the DiT was not trained with, as ltx-core does before building
    LTX's text path (``_check_gemma_version``, ltx_core/text_encoders/gemma/encoders/
    encoder_configurator.py, Lightricks/LTX-2@400fd31054597515f47125691032c04b1c3ee24e).

    ``dit_metadata``: the DiT file's safetensors ``__metadata__`` (raw strings, or values
    already decoded); ``encoder_config``: the text encoder's HF config dict (the TE file's
    ``gemma_config``, :func:`gemma_config_json`; a Gemma 3 folder's ``config.json``).

    * The DiT names a ``gemma_source_checkpoint`` (LTX-2.5): its ``gemma_version`` must equal
      the encoder config's top-level ``gemma_version`` -- a stock Gemma 4 (none) or another
      fine-tune is refused.
    * It names none but its ``model_version`` is 2.4.0 or later: an error when the encoder
      declares a ``gemma_version`` (the DiT should have named it); when neither does,
      ltx-core only warns, and so does this (``UserWarning``).
    * Otherwise (LTX-2 19B, LTX-2.3): the encoder must be a Gemma 3 (``model_type`` gemma3).

    Raises ``VidaxError`` naming both files."""
    source = _metadata_value(dit_metadata.get("gemma_source_checkpoint"))
    actual = encoder_config.get("gemma_version")
    pair = f"the DiT {dit_file} and the text encoder {encoder_file}"
    if source is not None:
        expected = source.get("gemma_version") if isinstance(source, dict) else None
        if expected != actual:
            raise VidaxError(
                f"Gemma version mismatch between {pair}: the DiT's gemma_source_checkpoint "
                f"expects gemma_version={expected!r}, the text encoder's config has "
                f"gemma_version={actual!r}"
                + (" (a stock Gemma, not LTX's fine-tune)" if actual is None else "")
                + ". Use the text encoder released with this DiT (LTX-2.5: "
                "text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16.safetensors).")
        return
    version = _metadata_value(dit_metadata.get("model_version"))
    if version is not None and _parse_model_version(version) >= GEMMA_SOURCE_REQUIRED_SINCE:
        if actual is None:
            import warnings

            warnings.warn(f"{pair}: the DiT's model_version {version!r} requires a "
                          "gemma_source_checkpoint, which it lacks, and the text encoder "
                          "declares no gemma_version: compatibility is not checked",
                          UserWarning, stacklevel=2)
            return
        raise VidaxError(f"{pair}: the DiT's model_version {version!r} must declare "
                         "gemma_source_checkpoint.gemma_version, but it has none")
    model_type = encoder_config.get("model_type")
    if model_type != "gemma3":
        raise VidaxError(f"{pair}: the DiT names no gemma_source_checkpoint (model_version "
                         f"{version!r}: LTX-2 / LTX-2.3), so it expects a Gemma 3 text encoder "
                         f"(model_type 'gemma3'), not model_type {model_type!r}")
