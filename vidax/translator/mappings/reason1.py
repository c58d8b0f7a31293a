"""Qwen2.5-VL checkpoints in transformers' layouts -> ``vidax.models.reason1.model`` (the language
model only): Cosmos-Reason1-7B (Cosmos-Predict2.5's text encoder) and Qwen2.5-VL-7B-Instruct
(HunyuanVideo-1.5's).

The released shards hold the whole vision-language model under the legacy (transformers <
4.52) names, which transformers 5.x's ``save_pretrained`` writes again by default:

* ``model.*``: the language model (``embed_tokens``, ``layers.N``, ``norm``);
* ``visual.*``: the vision tower; ``lm_head.weight``: the next-token head.

transformers 4.52 - 4.57 (and 5.x with ``save_original_format=False``) name the same tensors
``model.language_model.*`` / ``model.visual.*``; a saved ``Qwen2_5_VLModel`` of those
versions drops the leading ``model.``; a saved ``Qwen2_5_VLTextModel`` (diffusers'
HunyuanVideo-1.5 ``text_encoder/``) has bare names. One rule strips any of these prefixes,
so every layout loads through this one mapper (a file mixing two of them maps two tensors on
one parameter, which the mapper refuses). Module names are transformers'; only the token
table needs an explicit rule (a 2-D ``weight`` that is not a Linear).

The Cosmos-Reason1 manifest lists the 338 language-model tensors only; the Qwen2.5-VL
manifest lists all 729, and the vision tower and ``lm_head`` are ignored with their reasons.
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform

TEXT_ENCODER = Mapper(
    name="reason1.text_encoder",
    description="Qwen2.5-VL language model, transformers layouts (legacy model.*, "
                "model.language_model.*, language_model.*, or bare text-model names)",
    rules=(
        Ignore(r"(model\.)?visual\..*",
               "Qwen2.5-VL's vision tower: the video pipelines encode text-only prompts, so "
               "no image or video token ever reaches it (the authors load it and never run it)"),
        Ignore(r"lm_head\.weight",
               "the next-token head: the pipelines read hidden states, never logits"),
        Transform(r"embed_tokens\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^(model\.)?(language_model\.)?", ""),
    ),
)

register(ComponentSpec(
    model_type="reason1", component="text_encoder", layout="transformers",
    model="vidax.models.reason1.model:Reason1TextModel",
    config="vidax.models.reason1.config:Reason1Config",
    mapper="vidax.translator.mappings.reason1:TEXT_ENCODER",
    variants={"reason1-7b": "reason1_7b", "qwen2.5-vl-7b-instruct": "qwen2_5_vl_7b_instruct"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="Qwen2.5-VL-7B language model as a text encoder (Cosmos-Reason1-7B for "
                "Cosmos-Predict2.5, Qwen2.5-VL-7B-Instruct for HunyuanVideo-1.5); vision "
                "tower and lm_head ignored",
))

# The same encoder as the families' manifests name it.
alias("cosmos2_5", "reason1-7b", "text_encoder", "transformers",
      Alias("reason1", "reason1-7b", "text_encoder", "transformers"))
alias("hunyuan_video1_5", "qwen2.5-vl-7b-instruct", "text_encoder", "transformers",
      Alias("reason1", "qwen2.5-vl-7b-instruct", "text_encoder", "transformers"))
