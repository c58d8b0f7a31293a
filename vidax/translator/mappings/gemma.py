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
its own model_type with no alias into ``ltx2_5``. LTX-2.5's text encoder is Gemma 4 (a
different decoder: K-equals-V global layers, per-layer scalars), not this model.
"""

from __future__ import annotations

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform

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
