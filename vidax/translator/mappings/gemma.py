"""LTX-2 / LTX-2.3's text encoder: the Gemma 3 language model in transformers' layouts ->
``vidax.models.gemma.model`` (the text embedding projection after it is LTX-2's own:
``vidax.translator.mappings.ltx2_5``).

Gemma 3 (``gemma`` / ``text_encoder``, layout ``transformers``): one mapper for every layout
the language model is stored in, since only the prefix differs:

* the release folder (``google/gemma-3-12b-it-qat-q4_0-unquantized``, sharded):
  ``language_model.model.*``, ``vision_tower.vision_model.*``, ``multi_modal_projector.*``;
  the tied ``lm_head`` is not stored (transformers 5.24's ``save_pretrained`` of
  ``Gemma3ForConditionalGeneration`` writes the vision tower as ``vision_tower.*``; the
  mapper ignores the vision tower either way);
* ``Gemma3ForConditionalGeneration``'s in-memory names (``model.language_model.*``, ...), a
  saved ``Gemma3ForCausalLM`` (``model.*``, maybe ``lm_head.weight``) and a saved
  ``Gemma3TextModel`` (bare names).

A file mixing two of these maps two tensors on one parameter, which the mapper refuses.
No manifest covers the Gemma 3 folder (``families/ltx.md`` §6), so it is registered under
its own model_type with no alias into ``ltx2_5``.

Gemma 4 (``ltx2_5`` / ``text_encoder``, layout ``transformers``, :data:`GEMMA4`): LTX-2.5's
text encoder, a different decoder (``vidax.models.gemma.gemma4``: K-equals-V global layers,
per-layer scalars) in the authors' single file ``gemma4-12b-with-proj-ltx-2.5-bf16
.safetensors`` (see the section below); its config comes from the file's
``__metadata__["gemma_config"]`` (:func:`gemma4_config`).
"""

from __future__ import annotations

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Asset, Ignore, Mapper, Rename, Transform

GEMMA = Mapper(
    name="gemma.text_encoder",
    description="Gemma 3 language model, transformers layouts (Gemma3ForConditionalGeneration "
                "language_model.model.* / model.language_model.*, Gemma3ForCausalLM model.*, "
                "bare Gemma3TextModel)",
    rules=(
        Ignore(r"(language_model\.)?lm_head\.weight",
               "the next-token head (tied to embed_tokens): LTX-2 reads hidden states, "
               "never logits"),
        Ignore(r"(model\.)?vision_tower\..*",
               "Gemma 3's SigLIP vision tower: LTX-2 encodes text-only prompts (only "
               "ltx-core's optional image-prompt enhancement runs it)"),
        Ignore(r"(model\.)?multi_modal_projector\..*",
               "Gemma 3's image-feature projector: no image reaches the text encoder"),
        Transform(r"embed_tokens\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^(language_model\.model\.|model\.language_model\.|model\.)", ""),
    ),
)

register(ComponentSpec(
    model_type="gemma", component="text_encoder", layout="transformers",
    model="vidax.models.gemma.model:GemmaModel",
    config="vidax.models.gemma.config:GemmaConfig",
    mapper="vidax.translator.mappings.gemma:GEMMA",
    variants={"gemma-3-12b-it": "gemma_3_12b",
              "gemma-3-12b-it-qat-q4_0-unquantized": "gemma_3_12b"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="Gemma 3 language model as a text encoder (LTX-2 19B and LTX-2.3: "
                "gemma-3-12b-it-qat-q4_0-unquantized, all 49 hidden states); lm_head, vision "
                "tower and projector ignored",
))


# ============================================================================== Gemma 4
# LTX-2.5's text encoder (``ltx2_5`` / ``text_encoder``, layout ``transformers``): the file
# ``text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16.safetensors``, packed by the authors'
# ``build_text_encoder_tensors_from_gemma_root`` (Lightricks/LTX-2@400fd31,
# ltx_core/text_encoders/gemma/gemma_assets.py): the transformers ``gemma4_unified`` weights
# renamed ComfyUI-style by ``_flatten_gemma4_unified_keys_for_comfy`` (language model
# ``model.language_model.X`` -> ``model.X``; ``model.vision_embedder.*`` -> ``vision_model.*``,
# ``model.embed_vision.*`` -> ``multi_modal_projector.*``, ``model.embed_audio.*`` ->
# ``audio_projector.*``), LTX's text projection (``text_embedding_projection.*``), the
# ``tokenizer.json`` bytes as the uint8 tensor ``tokenizer_json`` and the HF sidecar files as
# ``hf_asset__<name>``, with the HF config JSON in ``__metadata__["gemma_config"]``. The
# authors' loader (``_build_gemma4_unified_llm_key_ops``) also reads unflattened files
# (``model.language_model.*`` and the HF tower names); so does this mapper.
GEMMA4 = Mapper(
    name="gemma.gemma4_text_encoder",
    description="Gemma 4 (gemma4_unified) language model of LTX-2.5's text-encoder file "
                "(ComfyUI-flat model.* or HF model.language_model.*); towers, LTX's text "
                "projection and the tokenizer/config bytes set aside",
    rules=(
        Asset(r"tokenizer_json",
              "the tokenizer.json bytes (read by vidax.text.gemma_assets / "
              "gemma_tokenizer)"),
        Asset(r"hf_asset__.+",
              "a Hugging Face sidecar file's bytes (tokenizer_config.json, chat template, "
              "...; read by vidax.text.gemma_assets)"),
        Ignore(r"text_embedding_projection\..*",
               "LTX-2.5's text projection (FeatureExtractorV2) packed in the same file: "
               "loaded as ltx2_5 / text_projection"),
        Ignore(r"(model\.)?lm_head\.weight",
               "the next-token head (tied to embed_tokens): LTX reads hidden states, never "
               "logits"),
        Ignore(r"(vision_model|model\.vision_embedder)\..*",
               "Gemma 4's encoder-free vision embedder (patch LayerNorms, dense, position "
               "table): LTX-2.5 encodes text-only prompts"),
        Ignore(r"(multi_modal_projector|model\.embed_vision)\..*",
               "Gemma 4's image-feature projection into the language model: no image "
               "reaches LTX-2.5's text encoder"),
        Ignore(r"(audio_projector|model\.embed_audio)\..*",
               "Gemma 4's raw-audio projection into the language model: no audio reaches "
               "LTX-2.5's text encoder"),
        Transform(r"embed_tokens\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^(model\.language_model\.|model\.)", ""),
    ),
)


def gemma4_config(metadata: dict[str, str], source: str):
    """The Gemma 4 config of an LTX-2.5 text-encoder file, from its
    ``__metadata__["gemma_config"]`` (the HF ``Gemma4UnifiedConfig`` JSON the authors' packer
    writes), or None where the file has none."""
    from vidax.models.gemma.config import Gemma4Config, gemma_config_json

    config = gemma_config_json(metadata, source)
    return None if config is None else Gemma4Config.from_dict(config)


register(ComponentSpec(
    model_type="ltx2_5", component="text_encoder", layout="transformers",
    model="vidax.models.gemma.gemma4:Gemma4Model",
    config="vidax.models.gemma.config:Gemma4Config",
    mapper="vidax.translator.mappings.gemma:GEMMA4",
    variants={"2.5": "gemma4_12b_ltx"},
    files=("gemma4-12b-with-proj-ltx-2.5*.safetensors",),
    config_from_metadata="vidax.translator.mappings.gemma:gemma4_config",
    description="LTX-2.5's text encoder: the fine-tuned Gemma 4 12B language model "
                "(gemma4_unified, all 49 hidden states); vision/audio embedders, LTX's text "
                "projection and the tokenizer/config bytes of the same file set aside",
))
