"""HunyuanVideo 1.0's LLaVA-Llama-3-8B language model in transformers' layouts ->
``vidax.models.llama.model`` (its other text encoder, CLIP-L's text tower, is registered in
``vidax.translator.mappings.clip``).

Llama (``llama`` / ``text_encoder``): one mapper for every layout the language model is
stored in, since only the prefix differs:

* ``ckpts/text_encoder`` as the authors' preprocessing script writes it (a saved
  ``LlamaForCausalLM``): ``model.*`` + ``lm_head.weight``;
* the LLaVA release itself (``xtuner/llava-llama-3-8b-v1_1-transformers``, the manifest's
  ``mllm``; transformers 5.x writes the same names): ``language_model.model.*``,
  ``language_model.lm_head.weight``, ``vision_tower.*``, ``multi_modal_projector.*``;
* LLaVA under transformers 4.52+'s in-memory names (``model.language_model.*``,
  ``model.vision_tower.*``, ...) and a saved ``LlamaModel`` (bare names; the diffusers
  community conversion).

A file mixing two of these maps two tensors on one parameter, which the mapper refuses.
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform

LLAMA = Mapper(
    name="llama.text_encoder",
    description="Llama language model, transformers layouts (LlamaForCausalLM model.*, "
                "LLaVA language_model.model.* / model.language_model.*, bare LlamaModel)",
    rules=(
        Ignore(r"(language_model\.)?lm_head\.weight",
               "the next-token head: HunyuanVideo reads hidden states, never logits "
               "(AutoModel loads the folder as LlamaModel, which drops it)"),
        Ignore(r"(model\.)?vision_tower\..*",
               "LLaVA's CLIP ViT-L/14-336 vision tower: HunyuanVideo 1.0 T2V encodes "
               "text-only prompts (only HunyuanVideo-I2V runs it)"),
        Ignore(r"(model\.)?multi_modal_projector\..*",
               "LLaVA's image-feature projector: no image reaches the text-only encoder"),
        Transform(r"embed_tokens\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^(language_model\.model\.|model\.language_model\.|model\.)", ""),
    ),
)

register(ComponentSpec(
    model_type="llama", component="text_encoder", layout="transformers",
    model="vidax.models.llama.model:LlamaModel",
    config="vidax.models.llama.config:LlamaConfig",
    mapper="vidax.translator.mappings.llama:LLAMA",
    variants={"llava-llama-3-8b-v1_1": "llava_llama_3_8b_v1_1"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="Llama language model as a text encoder (HunyuanVideo 1.0: the LM of "
                "LLaVA-Llama-3-8B-v1.1); lm_head, vision tower and projector ignored",
))

# HunyuanVideo 1.0's manifests name the Llama LM twice (the preprocessed text_encoder folder
# and the LLaVA release it is cut from).
for _component in ("text_encoder", "mllm"):
    alias("hunyuan_video", "llava-llama-3-8b-v1_1", _component, "transformers",
          Alias("llama", "llava-llama-3-8b-v1_1", "text_encoder", "transformers"))
