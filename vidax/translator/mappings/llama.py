"""HunyuanVideo 1.0's text encoders in transformers' layouts: the LLaVA-Llama-3-8B language
model (``vidax.models.llama.model``) and OpenAI CLIP-L's text tower (``vidax.models.clip.model``).

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

CLIP (``clip`` / ``text_encoder``): the whole OpenAI ``CLIPModel`` file (what HunyuanVideo
downloads as ``ckpts/text_encoder_2``), of which ``CLIPTextModel.from_pretrained`` reads
``text_model.*``; a saved ``CLIPTextModel`` has the same names (transformers 4.x) or drops
the ``text_model.`` prefix (5.x). Its layers are the visual tower's ``VisionBlock``, hence
the renames of the norm and attention names.
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
    config="vidax.models.llama.model:LlamaConfig",
    mapper="vidax.translator.mappings.llama:LLAMA",
    variants={"llava-llama-3-8b-v1_1": "llava_llama_3_8b_v1_1"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="Llama language model as a text encoder (HunyuanVideo 1.0: the LM of "
                "LLaVA-Llama-3-8B-v1.1); lm_head, vision tower and projector ignored",
))

CLIP_TEXT = Mapper(
    name="clip.text_encoder",
    description="CLIP text tower, transformers layouts (CLIPModel text_model.*, "
                "CLIPTextModel with or without the text_model. prefix)",
    rules=(
        Ignore(r"vision_model\..*",
               "CLIP's vision tower: the text encoder (CLIPTextModel) never reads it"),
        Ignore(r"(text|visual)_projection\.weight",
               "CLIP's joint-space projections: HunyuanVideo takes pooler_output, before "
               "text_projection"),
        Ignore(r"logit_scale", "CLIP's contrastive temperature: not part of the text tower"),
        Ignore(r"(text_model\.)?embeddings\.position_ids",
               "the arange(77) position buffer older transformers saved: recomputed at run "
               "time"),
        Transform(r"embeddings\.(token|position)_embedding\.weight$", layout="embedding",
                  leaf="embedding"),
        Rename(r"^(text_model\.)?", ""),
        Rename(r"^embeddings\.", ""),
        Rename(r"^encoder\.layers\.", "layers."),
        Rename(r"\.layer_norm([12])\.", r".norm\1."),
        Rename(r"\.self_attn\.([qkv])_proj\.", r".attn.to_\1."),
        Rename(r"\.self_attn\.out_proj\.", ".attn.proj."),
    ),
)

register(ComponentSpec(
    model_type="clip", component="text_encoder", layout="transformers",
    model="vidax.models.clip.model:CLIPTextModel",
    config="vidax.models.clip.model:CLIPTextConfig",
    mapper="vidax.translator.mappings.llama:CLIP_TEXT",
    variants={"clip-vit-large-patch14": "vit_l_14"},
    files=("model.safetensors",),
    description="CLIP text tower (HunyuanVideo 1.0's text_encoder_2: openai "
                "clip-vit-large-patch14, pooler_output); vision tower and projections ignored",
))

# HunyuanVideo 1.0's manifests name the Llama LM twice (the preprocessed text_encoder folder
# and the LLaVA release it is cut from) and CLIP as text_encoder_2.
for _component in ("text_encoder", "mllm"):
    alias("hunyuan_video", "llava-llama-3-8b-v1_1", _component, "transformers",
          Alias("llama", "llava-llama-3-8b-v1_1", "text_encoder", "transformers"))
alias("hunyuan_video", "clip-vit-large-patch14", "text_encoder_2", "transformers",
      Alias("clip", "clip-vit-large-patch14", "text_encoder", "transformers"))
