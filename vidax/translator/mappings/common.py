"""What several mapping modules share: rule sets (a family's mapper concatenates them with its
own rules; a mapper's ``rules`` is a plain tuple) and helpers."""

from __future__ import annotations

import json

from vidax.errors import VidaxError
from vidax.translator.mapping import Ignore, Rename

#: TransformerEngine keeps serialized FP8 metadata next to its weights (Cosmos, LTX-2.x).
TRANSFORMER_ENGINE_EXTRA_STATE = (
    Ignore(r".*\._extra_state", "TransformerEngine FP8 metadata, not a weight"),
)

#: transformers' ViT encoder naming (CLIPTextModel, SiglipVisionModel: ``embeddings.*``,
#: ``encoder.layers.N.{layer_norm1,self_attn.{q,k,v,out}_proj,layer_norm2,mlp}``) -> the
#: vidax towers' (``layers.N.{norm1,attn.to_{q,k,v},attn.proj,norm2,mlp}``), after the
#: family's own prefix rule.
TRANSFORMERS_ENCODER_LAYERS = (
    Rename(r"^embeddings\.", ""),
    Rename(r"^encoder\.layers\.", "layers."),
    Rename(r"\.layer_norm([12])\.", r".norm\1."),
    Rename(r"\.self_attn\.([qkv])_proj\.", r".attn.to_\1."),
    Rename(r"\.self_attn\.out_proj\.", ".attn.proj."),
)


def metadata_config(metadata: dict[str, str], source: str) -> dict | None:
    """The JSON object in a safetensors ``__metadata__["config"]`` (LTX-Video and LTX-2.x
    single files), or None where the file has none."""
    if "config" not in metadata:
        return None
    try:
        config = json.loads(metadata["config"])
    except ValueError as e:
        raise VidaxError(f"{source}: the safetensors metadata 'config' is not valid JSON "
                         f"({e})") from e
    if not isinstance(config, dict):
        raise VidaxError(f"{source}: the safetensors metadata 'config' is not a JSON object")
    return config


def metadata_section(metadata: dict[str, str], source: str, section: str,
                     what: str) -> dict | None:
    """One section of :func:`metadata_config` (``config["vae"]``, ...), or None where the file
    has no config; a config without the section is an error naming ``what`` the file should be
    (the LTX-Video and LTX-2.x files carry one section per model)."""
    config = metadata_config(metadata, source)
    if config is None:
        return None
    if not isinstance(config.get(section), dict):
        raise VidaxError(f"{source}: the metadata config has no '{section}' section (it has "
                         f"{sorted(config)}); is this {what}?")
    return config[section]
