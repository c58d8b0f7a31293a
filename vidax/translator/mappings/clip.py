"""CLIP (``vidax.models.clip.model``) in every layout it is shipped in:

* the Wan authors' ``XLMRobertaCLIP`` file (registered as ``wan2_1`` / ``image_encoder``,
  layout ``original``): the ViT-H/14 visual tower of Wan2.1 I2V / FLF2V;
* transformers' ``CLIPModel`` / ``CLIPTextModel`` (``clip`` / ``text_encoder``, layout
  ``transformers``): OpenAI CLIP-L's text tower, HunyuanVideo 1.0's ``text_encoder_2``.

The text tower: the whole OpenAI ``CLIPModel`` file (what HunyuanVideo downloads as
``ckpts/text_encoder_2``), of which ``CLIPTextModel.from_pretrained`` reads ``text_model.*``;
a saved ``CLIPTextModel`` has the same names (transformers 4.x) or drops the ``text_model.``
prefix (5.x). Its layers are the visual tower's ``VisionBlock``, hence the renames of the norm
and attention names.
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Split, Transform
from vidax.translator.mappings.common import TRANSFORMERS_ENCODER_LAYERS

# ------------------------------------ the vision tower, the Wan authors' layout
# models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth: the authors' whole XLMRobertaCLIP
# state dict (visual.*, textual.*, log_scale). Wan runs only CLIPModel.visual, i.e.
# ``visual(x, use_31_block=True)``; vidax.models.clip.CLIPVisionTransformer holds exactly what
# the authors' VisionTransformer.forward can use (all 32 blocks: ``num_blocks`` picks 31 at
# call time). The fused ``to_qkv`` rows are [q | k | v] (their ``view(b, s, 3, n, d)``).
IMAGE_ENCODER = Mapper(
    name="wan2_1.image_encoder",
    description="CLIP ViT-H/14 visual tower of the authors' XLMRobertaCLIP (open-clip naming)",
    rules=(
        Ignore(r"textual\..*", "text tower (XLM-RoBERTa): Wan uses only the visual features"),
        Ignore(r"log_scale", "CLIP's contrastive logit scale: Wan uses only the visual features"),
        Ignore(r"visual\.(post_norm\..*|head(\..*)?)",
               "visual post_norm / projection head: the authors' VisionTransformer.forward "
               "never applies them (Wan takes the token features after block 31)"),
        Split(r"visual\.transformer\.(\d+)\.attn\.to_qkv\.(weight|bias)",
              (r"visual.transformer.\1.attn.to_q.\2", r"visual.transformer.\1.attn.to_k.\2",
               r"visual.transformer.\1.attn.to_v.\2")),
        Rename(r"^visual\.", ""),
        Rename(r"\.mlp\.0\.", ".mlp.fc1."),
        Rename(r"\.mlp\.2\.", ".mlp.fc2."),
    ),
)

register(ComponentSpec(
    model_type="wan2_1", component="image_encoder", layout="original",
    model="vidax.models.clip.model:CLIPVisionTransformer",
    config="vidax.models.clip.config:CLIPVisionConfig",
    mapper="vidax.translator.mappings.clip:IMAGE_ENCODER",
    variants={"i2v-14b": "vit_h_14", "flf2v-14b": "vit_h_14"},
    files=("models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth",),
    description="Wan2.1 I2V/FLF2V image encoder: CLIP ViT-H/14 visual tower (XLM-R CLIP file)",
))


# ------------------------------------------ the text tower, transformers' layout
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
        *TRANSFORMERS_ENCODER_LAYERS,
    ),
)

register(ComponentSpec(
    model_type="clip", component="text_encoder", layout="transformers",
    model="vidax.models.clip.model:CLIPTextModel",
    config="vidax.models.clip.config:CLIPTextConfig",
    mapper="vidax.translator.mappings.clip:CLIP_TEXT",
    variants={"clip-vit-large-patch14": "vit_l_14"},
    files=("model.safetensors",),
    description="CLIP text tower (HunyuanVideo 1.0's text_encoder_2: openai "
                "clip-vit-large-patch14, pooler_output); vision tower and projections ignored",
))

# HunyuanVideo 1.0's manifests name CLIP text_encoder_2.
alias("hunyuan_video", "clip-vit-large-patch14", "text_encoder_2", "transformers",
      Alias("clip", "clip-vit-large-patch14", "text_encoder", "transformers"))
