"""SigLIP's vision tower in transformers' layout -> ``vidax.models.siglip``: HunyuanVideo-1.5's
vision encoder, FLUX.1-Redux-dev's ``image_encoder/model.safetensors`` (so400m-patch14-384).

The released file is a ``SiglipVisionModel`` saved by transformers 4.x: every name under
``vision_model.``; transformers 5 saves the same model without that prefix (both load here).
``embeddings.position_ids`` is a non-persistent buffer, never stored. The attention-pooling
``head.*`` (probe, ``nn.MultiheadAttention``, LayerNorm, MLP) is stored and loaded by the
authors but never run: HunyuanVideo-1.5 takes ``last_hidden_state``, which ends at
``post_layernorm``, before the head.

The encoder layers are CLIP's (``vidax.models.clip.VisionBlock``), hence the same renames of
the norm and attention names as CLIP's text tower (``vidax.translator.mappings.clip``).
"""

from __future__ import annotations

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform
from vidax.translator.mappings.common import TRANSFORMERS_ENCODER_LAYERS

VISION_ENCODER = Mapper(
    name="siglip.vision_encoder",
    description="SigLIP vision tower, transformers layouts (SiglipVisionModel with or without "
                "the vision_model. prefix)",
    rules=(
        Ignore(r"(vision_model\.)?head\..*",
               "SigLIP's attention-pooling head (pooler_output): HunyuanVideo-1.5 feeds its DiT "
               "last_hidden_state, which is computed before the head"),
        Transform(r"embeddings\.position_embedding\.weight$", layout="embedding",
                  leaf="embedding"),
        Rename(r"^(vision_model\.)?", ""),
        *TRANSFORMERS_ENCODER_LAYERS,
    ),
)

register(ComponentSpec(
    model_type="siglip", component="vision_encoder", layout="transformers",
    model="vidax.models.siglip.model:SiglipVisionModel",
    config="vidax.models.siglip.config:SiglipVisionConfig",
    mapper="vidax.translator.mappings.siglip:VISION_ENCODER",
    variants={"flux1-redux-dev-siglip": "flux1_redux_dev_siglip"},
    files=("model.safetensors",),
    description="SigLIP vision tower, last_hidden_state (HunyuanVideo-1.5's vision encoder: "
                "FLUX.1-Redux-dev image_encoder, so400m-patch14-384); pooling head ignored",
))

alias("hunyuan_video1_5", "flux1-redux-dev-siglip", "vision_encoder", "transformers",
      Alias("siglip", "flux1-redux-dev-siglip", "vision_encoder", "transformers"))
