"""Wan2.1: the authors' (``Wan-Video/Wan2.1``) key layout -> ``vidax.models.wan2_1``.

DiT (``diffusion_pytorch_model*.safetensors``): a near-mechanical rename. The authors'
``nn.Sequential`` indices become named layers; everything else keeps its name, and the
converter's automatic layout handles the rest (Linear transposed, the Conv3d patch
embedding made channels-last, norm weights -> ``scale``). ``modulation`` and
``img_emb.emb_pos`` are free parameters and pass unchanged. The RoPE table ``freqs`` is
not stored (recomputed at run time), so nothing needs ignoring.
"""

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Split, Transform

DIT = Mapper(
    name="wan2_1.dit",
    description="Wan DiT, authors' layout (WanModel state dict)",
    rules=(
        Rename(r"^(text|time)_embedding\.0\.", r"\1_embedding.fc1."),
        Rename(r"^(text|time)_embedding\.2\.", r"\1_embedding.fc2."),
        Rename(r"^time_projection\.1\.", "time_projection.fc."),
        Rename(r"\.ffn\.0\.", ".ffn.fc1."),
        Rename(r"\.ffn\.2\.", ".ffn.fc2."),
        Rename(r"^img_emb\.proj\.0\.", "img_emb.norm1."),
        Rename(r"^img_emb\.proj\.1\.", "img_emb.fc1."),
        Rename(r"^img_emb\.proj\.3\.", "img_emb.fc2."),
        Rename(r"^img_emb\.proj\.4\.", "img_emb.norm2."),
    ),
)

register(ComponentSpec(
    model_type="wan2_1", component="dit", layout="original",
    model="vidax.models.wan2_1.dit:WanDiT", config="vidax.models.wan2_1.dit:WanDiTConfig",
    mapper="vidax.translator.mappings.wan2_1:DIT",
    variants={"t2v-1.3b": "t2v_1_3b", "t2v-14b": "t2v_14b", "i2v-14b": "i2v_14b",
              "flf2v-14b": "flf2v_14b"},
    files=("diffusion_pytorch_model.safetensors.index.json",
           "diffusion_pytorch_model*.safetensors"),
    description="Wan2.1 diffusion transformer (T2V 1.3B/14B, I2V 14B 480P/720P, FLF2V 14B)",
))

# Each Wan2.2 A14B text-to-video expert (high_noise_model/, low_noise_model/) is the Wan2.1
# T2V-14B architecture with the same key/shape set.
alias("wan2_2", "t2v-a14b", "dit", "original", Alias("wan2_1", "t2v-14b", "dit", "original"))

# ----------------------------------------------------------------------------- image encoder
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
    config="vidax.models.clip.model:CLIPVisionConfig",
    mapper="vidax.translator.mappings.wan2_1:IMAGE_ENCODER",
    variants={"i2v-14b": "vit_h_14", "flf2v-14b": "vit_h_14"},
    files=("models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth",),
    description="Wan2.1 I2V/FLF2V image encoder: CLIP ViT-H/14 visual tower (XLM-R CLIP file)",
))


# Text encoder (``models_t5_umt5-xxl-enc-bf16.pth``): UMT5-XXL in the authors' own naming
# (``wan/modules/t5.py`` ``T5Encoder``, saved by ``state_dict()``; the same file name, code
# and key set in every Wan2.1 and Wan2.2 release). One ``nn.Sequential`` index renamed
# (``ffn.gate.0``, the Linear before the GELU); the token table and each block's
# relative-position table are ``nn.Embedding`` weights, whose stored layout ([vocab, dim],
# [num_buckets, heads]) is already vidax's: the converter must not transpose them as Linear
# weights, and their leaf is ``embedding``. The pattern also covers a shared top-level
# ``pos_embedding`` (``shared_pos=True`` in the same code).
TEXT_ENCODER = Mapper(
    name="wan2_1.text_encoder",
    description="UMT5-XXL encoder, authors' layout (wan.modules.t5.T5Encoder state dict)",
    rules=(
        Transform(r"(^|\.)(token_embedding|pos_embedding\.embedding)\.weight$",
                  layout="embedding", leaf="embedding"),
        Rename(r"\.ffn\.gate\.0\.", ".ffn.gate."),
    ),
)

register(ComponentSpec(
    model_type="wan2_1", component="text_encoder", layout="original",
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.model:T5Config",
    mapper="vidax.translator.mappings.wan2_1:TEXT_ENCODER",
    variants={"t2v-1.3b": "umt5_xxl", "t2v-14b": "umt5_xxl", "i2v-14b": "umt5_xxl",
              "flf2v-14b": "umt5_xxl"},
    files=("models_t5_umt5-xxl-enc-bf16.pth",),
    description="UMT5-XXL text encoder (bf16 file), shared by every Wan2.1 and Wan2.2 release",
))

# Wan2.2 ships the same encoder file under the same name (its t5.py is byte-identical).
for _variant in ("t2v-a14b", "i2v-a14b", "ti2v-5b"):
    alias("wan2_2", _variant, "text_encoder", "original",
          Alias("wan2_1", "t2v-14b", "text_encoder", "original"))


# ----------------------------------------------------------------------------- VAE
# Wan2.1_VAE.pth: the authors' ``WanVAE_`` state dict (wan/modules/vae2_1.py; also Wan2.2's
# A14B VAE and Cosmos-Predict2.5's tokenizer.pth, the same keys). ``nn.Sequential`` indices
# become names (see vidax.models.wan2_1.vae); the flat ``downsamples.N`` / ``upsamples.N``
# numbering is kept. Every RMS_norm ``gamma`` is stored broadcastable ([C, 1, 1, 1] in the
# residual blocks and heads, [C, 1, 1] in the attention blocks) and becomes ``scale`` [C].
# The converter's automatic layout handles the rest: Conv3d / Conv2d weights channels-last.
from vidax.registry import Alias, ComponentSpec, alias, register  # noqa: E402
from vidax.translator.mapping import Mapper, Rename, Transform  # noqa: E402

VAE = Mapper(
    name="wan2_1.vae",
    description="Wan2.1 VAE, authors' layout (WanVAE_ state dict)",
    rules=(
        Transform(r"\.gamma$", leaf="scale", reshape=lambda shape: (shape[0],)),
        Rename(r"\.residual\.0\.", ".norm1."),
        Rename(r"\.residual\.2\.", ".conv1."),
        Rename(r"\.residual\.3\.", ".norm2."),
        Rename(r"\.residual\.6\.", ".conv2."),
        Rename(r"\.middle\.0\.", ".mid_block1."),
        Rename(r"\.middle\.1\.", ".mid_attn."),
        Rename(r"\.middle\.2\.", ".mid_block2."),
        Rename(r"\.head\.0\.", ".head_norm."),
        Rename(r"\.head\.2\.", ".head_conv."),
        Rename(r"\.resample\.1\.", ".conv."),
    ),
)

register(ComponentSpec(
    model_type="wan2_1", component="vae", layout="original",
    model="vidax.models.wan2_1.vae:WanVAE", config="vidax.models.wan2_1.vae:WanVAEConfig",
    mapper="vidax.translator.mappings.wan2_1:VAE",
    variants={"t2v-1.3b": "wan2_1", "t2v-14b": "wan2_1", "i2v-14b": "wan2_1",
              "flf2v-14b": "wan2_1"},
    files=("Wan2.1_VAE.pth",),
    description="Wan2.1 causal 3D VAE (z 16, stride 4x8x8); also Wan2.2 A14B's VAE and "
                "Cosmos-Predict2.5's tokenizer.pth",
))

# Wan2.2's A14B models load Wan2.1_VAE.pth (their configs name it); Cosmos-Predict2.5 ships
# the same file as tokenizer.pth (its manifest: layout "original", component "vae").
for _family, _variant in (("wan2_2", "t2v-a14b"), ("wan2_2", "i2v-a14b"),
                          ("cosmos2_5", "predict-2b")):
    alias(_family, _variant, "vae", "original", Alias("wan2_1", "t2v-14b", "vae", "original"))
