"""HunyuanVideo-1.5: the authors' (``Tencent-Hunyuan/HunyuanVideo-1.5``) key layout ->
``vidax.models.hunyuan_video1_5``."""

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper, Rename, Split, Transform

# ----------------------------------------------------------------------------- DiT
# ``transformer/<variant>/diffusion_pytorch_model.safetensors`` (+ ``config.json``): the authors'
# ``HunyuanVideo_1_5_DiffusionTransformer`` state dict, fp32, no prefix (diffusers'
# ``ModelMixin.save_pretrained`` of the authors' class) -> :class:`vidax.models.
# hunyuan_video1_5.dit.HunyuanVideo15DiT`. Nothing is ignored (RoPE tables are not stored).
#
# * The token refiner's fused ``self_attn_qkv`` is split in thirds (q, k, v outermost, each
#   head-major), as in 1.0; the double blocks already store q, k, v apart.
# * ``nn.Sequential`` indices become names: the TimestepEmbedders' ``mlp.0`` / ``mlp.2`` ->
#   ``mlp.fc1`` / ``mlp.fc2``; ``adaLN_modulation.1`` -> ``adaLN_modulation``;
#   ``vision_in.proj.{0,1,3,4}`` (LayerNorm, Linear, [GELU], Linear, LayerNorm) ->
#   ``vision_in.{norm_in,linear_1,linear_2,norm_out}``.
# * ``cond_type_embedding.weight`` is an embedding table (rows = condition types), kept as is.
# * The final layer's modulation rows stay [shift | scale], the order the model splits them in.
_TIMESTEP_EMBEDDERS = r"^(time_in|time_r_in|txt_in\.t_embedder)"
_VISION_IN = (("0", "norm_in"), ("1", "linear_1"), ("3", "linear_2"), ("4", "norm_out"))

DIT = Mapper(
    name="hunyuan_video1_5.dit",
    description="HunyuanVideo-1.5 DiT, authors' layout (HunyuanVideo_1_5_DiffusionTransformer)",
    rules=(
        Split(r"(txt_in\.individual_token_refiner\.blocks\.\d+)\.self_attn_qkv\.(weight|bias)",
              (r"\1.self_attn_q.\2", r"\1.self_attn_k.\2", r"\1.self_attn_v.\2")),
        Transform(r"^cond_type_embedding\.weight$", layout="embedding", leaf="embedding"),
        Rename(_TIMESTEP_EMBEDDERS + r"\.mlp\.0\.", r"\1.mlp.fc1."),
        Rename(_TIMESTEP_EMBEDDERS + r"\.mlp\.2\.", r"\1.mlp.fc2."),
        Rename(r"\.adaLN_modulation\.1\.", ".adaLN_modulation."),
        *(Rename(rf"^vision_in\.proj\.{i}\.", f"vision_in.{name}.") for i, name in _VISION_IN),
    ),
)

_DIT_VARIANTS = ("480p_t2v", "480p_i2v", "720p_t2v", "720p_i2v", "480p_t2v_distilled",
                 "480p_i2v_distilled", "720p_i2v_distilled", "720p_i2v_distilled_sparse",
                 "480p_i2v_step_distilled")


def _preset(variant: str) -> str:
    """``480p_t2v_distilled`` -> ``t2v_480p_distilled`` (a name cannot start with a digit)."""
    resolution, task, *rest = variant.split("_")
    return "_".join((task, resolution, *rest))


register(ComponentSpec(
    model_type="hunyuan_video1_5", component="dit", layout="original",
    model="vidax.models.hunyuan_video1_5.dit:HunyuanVideo15DiT",
    config="vidax.models.hunyuan_video1_5.config:HunyuanVideo15DiTConfig",
    mapper="vidax.translator.mappings.hunyuan_video1_5:DIT",
    variants={v: _preset(v) for v in _DIT_VARIANTS},
    files=("transformer/*/diffusion_pytorch_model.safetensors",),
    description="HunyuanVideo-1.5 diffusion transformer (8.3B; t2v / i2v, 480p / 720p, "
                "cfg-, step- and sparse-distilled releases)",
))



# ----------------------------------------------------------------------------- VAE
# ``vae/diffusion_pytorch_model.safetensors``: the authors' ``AutoencoderKLConv3D`` state dict
# (``ModelMixin.save_pretrained``: no wrapper, no prefix, fp32, 218 tensors) ->
# :class:`vidax.models.hunyuan_video1_5.vae.HunyuanVideo15VAE`, which mirrors the authors' module
# names (``encoder.down.N.block.M``, ``down.N.downsample``, ``mid.block_1`` / ``attn_1`` /
# ``block_2``, ``attn_1.q`` ...; causal-conv wrappers included: ``conv_in.conv.weight`` ->
# ``conv_in.conv.kernel``). Every RMS_norm ``gamma`` is stored broadcastable ``[C, 1, 1, 1]``
# and becomes ``scale [C]``; the converter's automatic layout does the rest (Conv3d weights,
# the attention's 1x1x1 q/k/v/proj_out included, -> channels-last kernels). No tensor is
# ignored (there are no quant convs).
VAE = Mapper(
    name="hunyuan_video1_5.vae",
    description="HunyuanVideo-1.5 VAE, authors' layout (AutoencoderKLConv3D state dict)",
    rules=(
        Transform(r"\.gamma$", leaf="scale", reshape=lambda shape: (shape[0],)),
    ),
)

register(ComponentSpec(
    model_type="hunyuan_video1_5", component="vae", layout="original",
    model="vidax.models.hunyuan_video1_5.vae:HunyuanVideo15VAE",
    config="vidax.models.hunyuan_video1_5.config:HunyuanVideo15VAEConfig",
    mapper="vidax.translator.mappings.hunyuan_video1_5:VAE",
    variants={"base": "base"},
    files=("vae/diffusion_pytorch_model.safetensors",),
    description="HunyuanVideo-1.5 causal 3D VAE (AutoencoderKLConv3D: latent 32, stride "
                "4x16x16, scaling_factor 1.03682)",
))
