"""The key layouts of ComfyUI's repackaged files (Comfy-Org's Hugging Face repositories) that no
other mapping module reads, and the names the ComfyUI manifests give their releases.

Which layout each repackaged file has, and from which ComfyUI source that is known, is written
down in docs/checkpoints_comfyui.md. Most of them need no layout of their own: ComfyUI's own
module classes keep the authors' names for the Wan DiTs and VAEs (``comfy/ldm/wan/model.py``,
``vae.py``, ``vae2_2.py``), and transformers' names for Llama (``comfy/text_encoders/llama.py``,
``Llama2``: ``model.*``, no ``lm_head``) and CLIP-L's text tower (``comfy/clip_model.py``,
``CLIPTextModel``), which vidax already reads. The two here are Wan's encoders as ComfyUI ships
them, both in transformers' naming (ComfyUI's classes are written to load transformers' files):

* UMT5-XXL (``umt5_xxl_fp16.safetensors``, ``umt5_xxl_fp8_e4m3fn_scaled.safetensors``):
  ``comfy/text_encoders/t5.py`` ``T5`` at ``umt5_config_xxl.json`` (``model_type`` umt5: a
  relative-position table in every block) -- transformers' ``UMT5EncoderModel`` names without
  the tied ``encoder.embed_tokens`` alias, plus the SentencePiece model as a uint8 tensor
  ``spiece_model`` (``comfy/text_encoders/wan.py`` ``UMT5XXlTokenizer`` reads the tokenizer from
  it; ``comfy/sd.py`` ``tokenizer_data["spiece_model"] = clip_data[0].get("spiece_model")``).
  -> ``vidax.models.t5.T5Encoder`` at the ``umt5_xxl`` config (``shared_pos=False``).
* CLIP ViT-H/14 (``clip_vision_h.safetensors``): ``comfy/clip_model.py``
  ``CLIPVisionModelProjection`` (= transformers' ``CLIPVisionModelWithProjection`` names;
  ``comfy/clip_vision.py`` picks ``clip_vision_config_h.json`` when
  ``vision_model.encoder.layers.30.layer_norm1.weight`` is present). Wan's image encoder is the
  ViT-H/14 tower the authors' open-clip XLM-RoBERTa CLIP shares, so it becomes the same
  ``vidax.models.clip.CLIPVisionTransformer`` the authors' file loads into; the post-norm and
  the projection (never applied by Wan, which takes the penultimate block's tokens, ComfyUI's
  ``intermediate_output=-2``) are ignored, as in the authors' layout.

Both are registered as layout ``transformers`` of the Wan components they implement (a Wan
diffusers folder's ``text_encoder/`` is the same ``UMT5EncoderModel`` naming). A third,
LTX-2's Gemma 3 12B as ComfyUI holds it (``gemma_3_12B_it*.safetensors``), is layout
``comfyui`` of ``gemma`` / ``text_encoder`` (:data:`GEMMA3`). The HunyuanVideo layouts are in
``vidax.translator.mappings.comfyui_hunyuan``.
ComfyUI sources read: comfyanonymous/ComfyUI ``comfy/text_encoders/t5.py`` @04e411c3,
``comfy/text_encoders/wan.py`` @3c67f615, ``comfy/text_encoders/umt5_config_xxl.json`` @bcd1b1c1,
``comfy/clip_model.py`` and ``comfy/clip_vision.py`` @00728eb2.
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Asset, Ignore, Mapper, Rename, Transform
from vidax.translator.mappings.common import TRANSFORMERS_ENCODER_LAYERS
from vidax.translator.mappings.gemma import GEMMA

_WAN21 = ("t2v-1.3b", "t2v-14b", "i2v-14b", "flf2v-14b")
_WAN22 = ("t2v-a14b", "i2v-a14b", "ti2v-5b")

# ----------------------------------------------- UMT5-XXL, transformers' / ComfyUI's names
_BLOCK = r"^encoder\.block\.(\d+)\.layer\."
UMT5 = Mapper(
    name="wan2_1.text_encoder.transformers",
    description="UMT5-XXL encoder, transformers layout (UMT5EncoderModel / ComfyUI T5 state "
                "dict; per-block relative-position tables)",
    rules=(
        Asset(r"spiece_model", "the SentencePiece tokenizer model ComfyUI stores in the file"),
        Ignore(r"encoder\.embed_tokens\.weight",
               "tied alias of shared.weight (the same tensor; vidax reads shared.weight)"),
        Transform(r"^(shared|encoder\.block\.\d+\.layer\.0\.SelfAttention\."
                  r"relative_attention_bias)\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^shared\.", "token_embedding."),
        Rename(r"^encoder\.final_layer_norm\.", "norm."),
        Rename(_BLOCK + r"0\.SelfAttention\.relative_attention_bias\.",
               r"blocks.\1.pos_embedding.embedding."),
        Rename(_BLOCK + r"0\.SelfAttention\.", r"blocks.\1.attn."),
        Rename(_BLOCK + r"0\.layer_norm\.", r"blocks.\1.norm1."),
        Rename(_BLOCK + r"1\.layer_norm\.", r"blocks.\1.norm2."),
        Rename(_BLOCK + r"1\.DenseReluDense\.wi_0\.", r"blocks.\1.ffn.gate."),
        Rename(_BLOCK + r"1\.DenseReluDense\.wi_1\.", r"blocks.\1.ffn.fc1."),
        Rename(_BLOCK + r"1\.DenseReluDense\.wo\.", r"blocks.\1.ffn.fc2."),
    ),
)

register(ComponentSpec(
    model_type="wan2_1", component="text_encoder", layout="transformers",
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.config:T5Config",
    mapper="vidax.translator.mappings.comfyui:UMT5",
    variants={v: "umt5_xxl" for v in _WAN21},
    files=("umt5_xxl*.safetensors", "text_encoder/model.safetensors.index.json",
           "text_encoder/model*.safetensors"),
    description="UMT5-XXL text encoder in transformers' naming (ComfyUI's umt5_xxl_*.safetensors, "
                "a -Diffusers folder's text_encoder/)",
))

# ------------------------------------------- CLIP ViT-H/14, transformers' / ComfyUI's names
CLIP_VISION = Mapper(
    name="wan2_1.image_encoder.transformers",
    description="CLIP ViT-H/14 vision tower, transformers layout (CLIPVisionModelWithProjection "
                "/ ComfyUI CLIPVisionModelProjection state dict)",
    rules=(
        Ignore(r"vision_model\.post_layernorm\.(weight|bias)",
               "the pooled token's post-norm: Wan takes the penultimate block's token features, "
               "never the pooled output (as the authors' post_norm)"),
        Ignore(r"visual_projection\.weight",
               "CLIP's joint-space projection of the pooled token: Wan never applies it"),
        Ignore(r"vision_model\.embeddings\.position_ids",
               "the arange position buffer older transformers saved: not a weight"),
        Transform(r"^vision_model\.embeddings\.class_embedding$",
                  reshape=lambda shape: (1, 1, shape[-1])),
        Transform(r"^vision_model\.embeddings\.position_embedding\.weight$",
                  reshape=lambda shape: (1, *shape)),
        Rename(r"^vision_model\.embeddings\.class_embedding$", "cls_embedding"),
        Rename(r"^vision_model\.embeddings\.position_embedding\.weight$", "pos_embedding"),
        Rename(r"^vision_model\.pre_layrnorm\.", "pre_norm."),
        Rename(r"^vision_model\.", ""),
        *TRANSFORMERS_ENCODER_LAYERS,
        Rename(r"^layers\.", "transformer."),
    ),
)

register(ComponentSpec(
    model_type="wan2_1", component="image_encoder", layout="transformers",
    model="vidax.models.clip.model:CLIPVisionTransformer",
    config="vidax.models.clip.config:CLIPVisionConfig",
    mapper="vidax.translator.mappings.comfyui:CLIP_VISION",
    variants={"i2v-14b": "vit_h_14", "flf2v-14b": "vit_h_14"},
    files=("clip_vision_h.safetensors",),
    description="Wan2.1 I2V/FLF2V image encoder in transformers' naming (ComfyUI's "
                "clip_vision_h.safetensors: CLIP ViT-H/14, fp16)",
))

# ------------------------------------------- Gemma 3 12B (LTX-2), ComfyUI's file naming
# Comfy-Org/ltx-2 ``split_files/text_encoders/gemma_3_12B_it.safetensors``: ComfyUI's
# ``comfy/text_encoders/llama.py`` ``Gemma3_12B`` holds the language model as ``self.model =
# Llama2_`` (``model.embed_tokens``, ``model.layers.N.{self_attn.{q,k,v,o}_proj, self_attn.
# {q,k}_norm, mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm,
# pre_feedforward_layernorm, post_feedforward_layernorm}``, ``model.norm``: transformers'
# names, ``TransformerBlockGemma2``), ``self.multi_modal_projector`` and the SigLIP tower as
# ``self.vision_model = comfy.clip_model.CLIPVision`` (``vision_model.*``, where transformers
# writes ``vision_tower.vision_model.*``), no ``lm_head``; its tokenizer
# (``comfy/text_encoders/lt.py`` ``Gemma3_12BTokenizer``) is read from, and saved as, the
# uint8 tensor ``spiece_model``. vidax's Gemma 3 table (``gemma.GEMMA``) reads the ``model.``
# names already; the two rules ahead of it ignore the tower under ComfyUI's name and declare
# the tokenizer an asset. (Were they added to ``gemma.GEMMA`` itself, this layout would be
# redundant and ``vidax.load`` would detect such files without ``layout="comfyui"``.)
GEMMA3 = Mapper(
    name="gemma.text_encoder.comfyui",
    description="Gemma 3 language model in ComfyUI's Gemma3_12B naming (model.*, vision_model.*, "
                "multi_modal_projector.*, spiece_model)",
    rules=(
        Asset(r"spiece_model", "the SentencePiece tokenizer model ComfyUI stores in the file"),
        Ignore(r"vision_model\..*",
               "Gemma 3's SigLIP vision tower under ComfyUI's name (CLIPVision): LTX-2 encodes "
               "text-only prompts"),
        *GEMMA.rules,
    ),
)

register(ComponentSpec(
    model_type="gemma", component="text_encoder", layout="comfyui",
    model="vidax.models.gemma.model:GemmaModel",
    config="vidax.models.gemma.config:GemmaConfig",
    mapper="vidax.translator.mappings.comfyui:GEMMA3",
    variants={"gemma-3-12b-it": "gemma_3_12b",
              "gemma-3-12b-it-qat-q4_0-unquantized": "gemma_3_12b"},
    files=("gemma_3_12B_it*.safetensors",),
    description="Gemma 3 12B text encoder in ComfyUI's naming (Comfy-Org's "
                "gemma_3_12B_it*.safetensors for LTX-2; tokenizer as spiece_model)",
))

# ----------------------------------------------------------------------- aliases
_T = "transformers"
for _variant in _WAN22:
    alias("wan2_2", _variant, "text_encoder", _T, Alias("wan2_1", "t2v-14b", "text_encoder", _T))

#: The ComfyUI manifests' releases (family ``comfyui``, one variant per repackaged file; see
#: docs/checkpoints_comfyui.md) -> what implements them:
#: (variant, component, layout) -> (model_type, variant, component).
COMFYUI_RELEASES = {
    ("umt5-xxl-fp16", "text_encoder", _T): ("wan2_1", "t2v-14b", "text_encoder"),
    ("umt5-xxl-fp8-scaled", "text_encoder", _T): ("wan2_1", "t2v-14b", "text_encoder"),
    ("clip-vision-h", "image_encoder", _T): ("wan2_1", "i2v-14b", "image_encoder"),
    ("wan2.1-t2v-14b-fp8-scaled", "dit", "original"): ("wan2_1", "t2v-14b", "dit"),
    ("wan2.1-i2v-14b-fp8-scaled", "dit", "original"): ("wan2_1", "i2v-14b", "dit"),
    ("wan2.2-t2v-a14b-fp8-scaled", "dit", "original"): ("wan2_1", "t2v-14b", "dit"),
    ("wan2.2-i2v-a14b-fp8-scaled", "dit", "original"): ("wan2_2", "i2v-a14b", "dit"),
    ("llava-llama3-fp16", "text_encoder", _T): ("llama", "llava-llama-3-8b-v1_1", "text_encoder"),
    ("llava-llama3-fp8-scaled", "text_encoder", _T):
        ("llama", "llava-llama-3-8b-v1_1", "text_encoder"),
    ("clip-l", "text_encoder", _T): ("clip", "clip-vit-large-patch14", "text_encoder"),
    # HunyuanVideo DiTs in ComfyUI's names (layouts in comfyui_hunyuan)
    ("hunyuan-video-t2v-720p-bf16", "dit", "comfyui"): ("hunyuan_video", "t2v-720p", "dit"),
    ("hunyuanvideo1.5-720p-t2v-fp16", "dit", "comfyui"): ("hunyuan_video1_5", "720p_t2v", "dit"),
    ("hunyuanvideo1.5-480p-i2v-step-distilled-fp16", "dit", "comfyui"):
        ("hunyuan_video1_5", "480p_i2v_step_distilled", "dit"),
    ("hunyuan-video-vae-bf16", "vae", "comfyui"): ("hunyuan_video", "t2v-720p", "vae"),
    ("byt5-small-glyphxl-fp16", "byt5", "comfyui"): ("t5", "glyph-sdxl-v2", "encoder"),
    ("qwen-2.5-vl-7b-fp8-scaled", "text_encoder", _T):
        ("reason1", "qwen2.5-vl-7b-instruct", "text_encoder"),
    ("gemma-3-12b-it-bf16", "text_encoder", "comfyui"):
        ("gemma", "gemma-3-12b-it", "text_encoder"),
}
for (_variant, _component, _layout), _target in COMFYUI_RELEASES.items():
    alias("comfyui", _variant, _component, _layout, Alias(*_target, _layout))
