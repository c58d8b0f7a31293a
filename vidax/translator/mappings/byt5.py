"""byT5 in the bare ``T5Stack`` layout -> ``vidax.models.t5.model`` (``shared_pos=True``):
HunyuanVideo-1.5's glyph-text encoder, Glyph-SDXL-v2's ``checkpoints/byt5_model.pt``.

The authors build ``T5ForConditionalGeneration.from_pretrained("google/byt5-small")
.get_encoder()`` -- a ``T5Stack`` -- widen its vocabulary to 1510 and load this file into
it strictly. So the file is that stack's own state dict, a torch pickle without a wrapper or
prefix: ``embed_tokens.weight`` (the stack's token table; there is no ``shared`` in a bare
stack), ``block.N.layer.{0,1}.*`` with the relative-position table in block 0 only (every
block uses it), and ``final_layer_norm.weight``. The names are transformers' T5 encoder
names without the ``encoder.`` prefix, so the rules are those of the ``transformers`` layout
(``vidax.translator.mappings.ltx_video``) anchored at the bare names.

Registered as the ``t5`` encoder's ``t5stack`` layout, and under the name the HunyuanVideo-1.5
manifest gives it (``hunyuan_video1_5`` / ``glyph-sdxl-v2`` / ``byt5`` / ``transformers``).
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Mapper, Rename, Transform

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
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.model:T5Config",
    mapper="vidax.translator.mappings.byt5:T5_STACK",
    variants={"glyph-sdxl-v2": "glyph_sdxl_v2"},
    files=("byt5_model.pt",),
    description="byT5-small encoder as a bare T5Stack state dict (Glyph-SDXL-v2 byt5_model.pt: "
                "HunyuanVideo-1.5's glyph-text encoder, vocabulary 1510)",
))

alias("hunyuan_video1_5", "glyph-sdxl-v2", "byt5", "transformers",
      Alias("t5", "glyph-sdxl-v2", "encoder", "t5stack"))
