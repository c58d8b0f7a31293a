"""LTX-2 / LTX-2.3's text path before the connectors: the Gemma 3 language model
(``vidax.models.gemma.model``) and the text embedding projection (``vidax.models.ltx2_5.text``).

Gemma 3 (``gemma`` / ``text_encoder``, layout ``transformers``): one mapper for every layout
the language model is stored in, since only the prefix differs:

* the release folder (``google/gemma-3-12b-it-qat-q4_0-unquantized``, sharded; transformers
  5.x's ``save_pretrained`` of ``Gemma3ForConditionalGeneration`` writes the same names):
  ``language_model.model.*``, ``vision_tower.vision_model.*``, ``multi_modal_projector.*``;
  the tied ``lm_head`` is not stored;
* ``Gemma3ForConditionalGeneration``'s in-memory names (``model.language_model.*``, ...), a
  saved ``Gemma3ForCausalLM`` (``model.*``, maybe ``lm_head.weight``) and a saved
  ``Gemma3TextModel`` (bare names).

A file mixing two of these maps two tensors on one parameter, which the mapper refuses.
No manifest covers the Gemma 3 folder (``families/ltx.md`` §6), so it is registered under
its own model_type with no alias into ``ltx2_5``. LTX-2.5's text encoder is Gemma 4 (a
different decoder: K-equals-V global layers, per-layer scalars), not this model.

Text projection (``ltx2_5`` / ``text_projection``, layout ``original``): the
``text_embedding_projection.*`` tensors of the LTX-2 19B and LTX-2.3 monoliths (and of
LTX-2.5's text-encoder file), whose names are ltx-core's ``FeatureExtractorV1/V2``
attributes. The version and sizes come from the file's ``__metadata__`` DiT config, as
ltx-core decides them.
"""

from __future__ import annotations

from vidax.errors import VidaxError
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform
from vidax.translator.mappings.ltx_video import _metadata_config

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
    config="vidax.models.gemma.model:GemmaConfig",
    mapper="vidax.translator.mappings.gemma:GEMMA",
    variants={"gemma-3-12b-it": "gemma_3_12b",
              "gemma-3-12b-it-qat-q4_0-unquantized": "gemma_3_12b"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="Gemma 3 language model as a text encoder (LTX-2 19B and LTX-2.3: "
                "gemma-3-12b-it-qat-q4_0-unquantized, all 49 hidden states); lm_head, vision "
                "tower and projector ignored",
))

# Names are ltx-core's FeatureExtractorV1/V2 attributes, which vidax's module keeps; the
# converter transposes the Linear weights.
TEXT_PROJECTION = Mapper(
    name="ltx2_5.text_projection",
    description="LTX-2.x text embedding projection, authors' layout (ltx-core "
                "FeatureExtractorV1 aggregate_embed / V2 {video,audio}_aggregate_embed)",
    rules=(),
)


def text_projection_config(metadata: dict[str, str], source: str):
    """The projection config of an LTX-2.x release file, from its metadata DiT config
    (``config["transformer"]``), or None where the file carries none (LTX-2.5's text-encoder
    file: pass ``variant="2.5"``)."""
    from vidax.models.ltx2_5.text import LTX2TextProjectionConfig

    config = _metadata_config(metadata, source)
    if config is None:
        return None
    if not isinstance(config.get("transformer"), dict):
        raise VidaxError(f"{source}: the metadata config has no 'transformer' section (it has "
                         f"{sorted(config)}), which decides the text projection's version; is "
                         "this an LTX-2 release file?")
    return LTX2TextProjectionConfig.from_dict(config["transformer"])


register(ComponentSpec(
    model_type="ltx2_5", component="text_projection", layout="original",
    model="vidax.models.ltx2_5.text:LTX2TextProjection",
    config="vidax.models.ltx2_5.text:LTX2TextProjectionConfig",
    mapper="vidax.translator.mappings.gemma:TEXT_PROJECTION",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b",
              "2.5": "ltx2_3_22b"},
    prefix="text_embedding_projection.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-distilled*.safetensors",
           "gemma4-12b-with-proj-ltx-2.5*.safetensors"),
    config_from_metadata="vidax.translator.mappings.gemma:text_projection_config",
    description="LTX-2.x text embedding projection (Gemma hidden states -> the connectors' "
                "input; V1 in the 19B, V2 in 2.3 and 2.5), inside the release file",
))
