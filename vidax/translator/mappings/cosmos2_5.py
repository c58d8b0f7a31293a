"""Cosmos-Predict2.5: the DiT's two key layouts -> ``vidax.models.cosmos2_5.dit``.

(The VAE, ``tokenizer.pth``, is the Wan2.1 VAE: an alias registered in
``vidax.translator.mappings.wan2_1`` / ``wan2_2_diffusers``.)

Original layout (``base/{pre,post}-trained/*_ema_bf16.pt``): the authors'
``MinimalV1LVGDiT.state_dict()`` with ``net.`` in front of every key
(``scripts/convert_distcp_to_pt.py`` renames ``net_ema.`` to ``net.``), a plain dict in a
torch pickle, every float tensor bf16. Besides the weights it holds entries that are not
weights, ignored with their reasons below: the ``WeightTrainingStat`` counters (three int64
scalars and a bf16 one), the RoPE helper buffers of ``VideoRopePosition3DEmb`` and one
TransformerEngine ``_extra_state`` per q/k RMSNorm and for ``t_embedding_norm``. The renames
turn the ``nn.Sequential`` indices into vidax's names (``x_embedder.proj.1``,
``t_embedder.1``, ``crossattn_proj.0``, ``adaln_modulation*.{1,2}``).

diffusers layout (``transformer/diffusion_pytorch_model*.safetensors`` of the
``diffusers/base/*`` revisions): ``CosmosTransformer3DModel``'s names, written by diffusers'
``scripts/convert_cosmos_to_diffusers.py`` (its ``TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0``)
with those non-weights dropped. Renamed back to the authors' module names here; no tensor is
reshaped, fused or split in either layout.
"""

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Ignore, Mapper, Rename
from vidax.translator.mappings.common import TRANSFORMER_ENGINE_EXTRA_STATE

# One Sequential index per module kind becomes a name (see vidax.models.cosmos2_5.dit).
_SEQUENTIAL = (
    Rename(r"^x_embedder\.proj\.1\.", "x_embedder.proj."),
    Rename(r"^t_embedder\.1\.", "t_embedder."),
    Rename(r"^crossattn_proj\.0\.", "crossattn_proj."),
    Rename(r"(adaln_modulation\w*)\.1\.", r"\1.linear_1."),
    Rename(r"(adaln_modulation\w*)\.2\.", r"\1.linear_2."),
)

DIT = Mapper(
    name="cosmos2_5.dit",
    description="Cosmos-Predict2.5 DiT, authors' layout (net. + MinimalV1LVGDiT state dict)",
    rules=(
        *TRANSFORMER_ENGINE_EXTRA_STATE,
        Ignore(r"net\.accum_(video_sample_counter|image_sample_counter|iteration|"
               r"train_in_hours)",
               "training statistics of the authors' WeightTrainingStat (sample and iteration "
               "counters, hours trained), not weights"),
        Ignore(r"net\.pos_embedder\.(seq|dim_spatial_range|dim_temporal_range)",
               "RoPE helper buffers (positions 0..127 and the 2i/d exponent ranges), "
               "recomputed at run time from the config"),
        Rename(r"^net\.", ""),
        *_SEQUENTIAL,
    ),
)

DIT_DIFFUSERS = Mapper(
    name="cosmos2_5.dit_diffusers",
    description="Cosmos-Predict2.5 DiT, diffusers' layout (CosmosTransformer3DModel)",
    rules=(
        Rename(r"^patch_embed\.proj\.", "x_embedder.proj."),
        Rename(r"^time_embed\.t_embedder\.", "t_embedder."),
        Rename(r"^time_embed\.norm\.", "t_embedding_norm."),
        Rename(r"^crossattn_proj\.0\.", "crossattn_proj."),
        Rename(r"^transformer_blocks\.", "blocks."),
        Rename(r"\.norm1\.", ".adaln_modulation_self_attn."),
        Rename(r"\.norm2\.", ".adaln_modulation_cross_attn."),
        Rename(r"\.norm3\.", ".adaln_modulation_mlp."),
        Rename(r"\.attn1\.", ".self_attn."),
        Rename(r"\.attn2\.", ".cross_attn."),
        Rename(r"\.to_([qkv])\.", r".\1_proj."),
        Rename(r"\.to_out\.0\.", ".output_proj."),
        Rename(r"\.norm_([qk])\.", r".\1_norm."),
        Rename(r"\.ff\.net\.0\.proj\.", ".mlp.layer1."),
        Rename(r"\.ff\.net\.2\.", ".mlp.layer2."),
        Rename(r"^norm_out\.", "final_layer.adaln_modulation."),
        Rename(r"^proj_out\.", "final_layer.linear."),
    ),
)

# Pre- and post-trained releases share one config per size; the diffusers manifests name the
# size only.
_VARIANTS = {"predict-2b-pre-trained": "predict_2b", "predict-2b-post-trained": "predict_2b",
             "predict-14b-pre-trained": "predict_14b", "predict-14b-post-trained": "predict_14b",
             "predict-2b": "predict_2b", "predict-14b": "predict_14b"}

register(ComponentSpec(
    model_type="cosmos2_5", component="dit", layout="original",
    model="vidax.models.cosmos2_5.dit:CosmosDiT",
    config="vidax.models.cosmos2_5.config:CosmosDiTConfig",
    mapper="vidax.translator.mappings.cosmos2_5:DIT",
    variants=dict(_VARIANTS),
    files=("*_ema_bf16.pt",),
    description="Cosmos-Predict2.5 diffusion transformer (2B, 14B; pre- and post-trained), "
                "the authors' .pt",
))
register(ComponentSpec(
    model_type="cosmos2_5", component="dit", layout="diffusers",
    model="vidax.models.cosmos2_5.dit:CosmosDiT",
    config="vidax.models.cosmos2_5.config:CosmosDiTConfig",
    mapper="vidax.translator.mappings.cosmos2_5:DIT_DIFFUSERS",
    variants=dict(_VARIANTS),
    files=("transformer/diffusion_pytorch_model.safetensors.index.json",
           "transformer/diffusion_pytorch_model*.safetensors"),
    description="Cosmos-Predict2.5 DiT in diffusers' layout (CosmosTransformer3DModel, "
                "diffusers/base/* revisions)",
))
