"""The T5 encoders (``vidax.models.t5.model``) in every layout they are shipped in:

* ``original`` (registered as ``wan2_1`` / ``text_encoder``; Wan2.2 aliases it): UMT5-XXL in
  the Wan authors' own naming, ``models_t5_umt5-xxl-enc-bf16.pth``;
* ``transformers`` (``t5`` / ``encoder``): T5-v1.1-XXL as transformers' ``T5EncoderModel``
  (LTX-Video's and CogVideoX's ``text_encoder/``; their manifests' names are aliases);
* ``t5stack`` (``t5`` / ``encoder``): byT5 as a bare ``T5Stack`` state dict (Glyph-SDXL-v2's
  ``byt5_model.pt``, HunyuanVideo-1.5's glyph-text encoder).
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform

# ----------------------------------------------------- UMT5-XXL, Wan's layout
# Wan's text encoder (``models_t5_umt5-xxl-enc-bf16.pth``): UMT5-XXL in the authors' own naming
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
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.config:T5Config",
    mapper="vidax.translator.mappings.t5:TEXT_ENCODER",
    variants={"t2v-1.3b": "umt5_xxl", "t2v-14b": "umt5_xxl", "i2v-14b": "umt5_xxl",
              "flf2v-14b": "umt5_xxl"},
    files=("models_t5_umt5-xxl-enc-bf16.pth",),
    description="UMT5-XXL text encoder (bf16 file), shared by every Wan2.1 and Wan2.2 release",
))

# Wan2.2 ships the same encoder file under the same name (its t5.py is byte-identical).
for _variant in ("t2v-a14b", "i2v-a14b", "ti2v-5b"):
    alias("wan2_2", _variant, "text_encoder", "original",
          Alias("wan2_1", "t2v-14b", "text_encoder", "original"))


# --------------------------------------- T5-v1.1-XXL, transformers' layout
# transformers' T5EncoderModel state dict -> vidax.models.t5.T5Encoder (shared_pos=True):
# ``shared`` is the token table, the encoder's ``embed_tokens`` is the same tensor (tied;
# transformers' safetensors save drops that alias, a torch-saved .bin may keep it), and the
# relative-position table exists only in block 0, used by every block. google/t5-v1_1-xxl's
# own checkpoint is the full encoder-decoder: its decoder half is ignored.
T5_ENCODER = Mapper(
    name="t5.encoder",
    description="T5 encoder, transformers layout (T5EncoderModel / T5ForConditionalGeneration "
                "state dict)",
    rules=(
        Ignore(r"encoder\.embed_tokens\.weight",
               "tied alias of shared.weight (the same tensor; vidax reads shared.weight)"),
        Ignore(r"(decoder\..*|lm_head\.weight)",
               "decoder half of an encoder-decoder T5 checkpoint: the text encoder is the "
               "encoder only"),
        Transform(r"^(shared|encoder\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias)"
                  r"\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^shared\.", "token_embedding."),
        Rename(r"^encoder\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias\.",
               "pos_embedding.embedding."),
        Rename(r"^encoder\.final_layer_norm\.", "norm."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.", r"blocks.\1.attn."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.0\.layer_norm\.", r"blocks.\1.norm1."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.layer_norm\.", r"blocks.\1.norm2."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_0\.", r"blocks.\1.ffn.gate."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_1\.", r"blocks.\1.ffn.fc1."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wo\.", r"blocks.\1.ffn.fc2."),
    ),
)

register(ComponentSpec(
    model_type="t5", component="encoder", layout="transformers",
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.config:T5Config",
    mapper="vidax.translator.mappings.t5:T5_ENCODER",
    variants={"t5-v1_1-xxl": "t5_v1_1_xxl"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="T5-v1.1-XXL encoder in transformers' layout (text_encoder/ of LTX-Video, "
                "CogVideoX, PixArt, DeepFloyd IF)",
))

# The same encoder as the families' manifests name it.
_T5 = Alias("t5", "t5-v1_1-xxl", "encoder", "transformers")
alias("ltx_video", "t5-v1_1-xxl", "text_encoder", "transformers", _T5)
for _variant in ("2b", "5b", "5b-i2v", "1.5-5b", "1.5-5b-i2v"):
    alias("cogvideox", _variant, "text_encoder", "transformers", _T5)


# -------------------------------------------------- byT5, a bare T5Stack file
# byT5 in the bare ``T5Stack`` layout (``shared_pos=True``):
# HunyuanVideo-1.5's glyph-text encoder, Glyph-SDXL-v2's ``checkpoints/byt5_model.pt``.
#
# The authors build ``T5ForConditionalGeneration.from_pretrained("google/byt5-small")
# .get_encoder()`` -- a ``T5Stack`` -- widen its vocabulary to 1510 and load this file into
# it strictly. So the file is that stack's own state dict, a torch pickle without a wrapper or
# prefix: ``embed_tokens.weight`` (the stack's token table; there is no ``shared`` in a bare
# stack), ``block.N.layer.{0,1}.*`` with the relative-position table in block 0 only (every
# block uses it), and ``final_layer_norm.weight``. The names are transformers' T5 encoder
# names without the ``encoder.`` prefix, so the rules are those of the ``transformers`` layout
# (``T5_ENCODER`` above) anchored at the bare names.
#
# Registered as the ``t5`` encoder's ``t5stack`` layout (before this module held every T5
# layout: ``mappings/byt5.py``), and under the name the HunyuanVideo-1.5
# manifest gives it (``hunyuan_video1_5`` / ``glyph-sdxl-v2`` / ``byt5`` / ``transformers``).
_BIAS = r"block\.0\.layer\.0\.SelfAttention\.relative_attention_bias"

T5_STACK = Mapper(
    name="t5.encoder.t5stack",
    description="T5 encoder, bare transformers T5Stack state dict (Glyph-SDXL-v2 byt5_model.pt)",
    rules=(
        Transform(rf"^(embed_tokens|{_BIAS})\.weight$", layout="embedding",
                  leaf="embedding"),
        Rename(r"^embed_tokens\.", "token_embedding."),
        Rename(rf"^{_BIAS}\.", "pos_embedding.embedding."),
        Rename(r"^final_layer_norm\.", "norm."),
        Rename(r"^block\.(\d+)\.layer\.0\.SelfAttention\.", r"blocks.\1.attn."),
        Rename(r"^block\.(\d+)\.layer\.0\.layer_norm\.", r"blocks.\1.norm1."),
        Rename(r"^block\.(\d+)\.layer\.1\.layer_norm\.", r"blocks.\1.norm2."),
        Rename(r"^block\.(\d+)\.layer\.1\.DenseReluDense\.wi_0\.", r"blocks.\1.ffn.gate."),
        Rename(r"^block\.(\d+)\.layer\.1\.DenseReluDense\.wi_1\.", r"blocks.\1.ffn.fc1."),
        Rename(r"^block\.(\d+)\.layer\.1\.DenseReluDense\.wo\.", r"blocks.\1.ffn.fc2."),
    ),
)

register(ComponentSpec(
    model_type="t5", component="encoder", layout="t5stack",
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.config:T5Config",
    mapper="vidax.translator.mappings.t5:T5_STACK",
    variants={"glyph-sdxl-v2": "glyph_sdxl_v2"},
    files=("byt5_model.pt",),
    description="byT5-small encoder as a bare T5Stack state dict (Glyph-SDXL-v2 byt5_model.pt: "
                "HunyuanVideo-1.5's glyph-text encoder, vocabulary 1510)",
))

alias("hunyuan_video1_5", "glyph-sdxl-v2", "byt5", "transformers",
      Alias("t5", "glyph-sdxl-v2", "encoder", "t5stack"))
