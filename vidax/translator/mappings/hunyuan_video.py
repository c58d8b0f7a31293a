"""HunyuanVideo 1.0: the authors' (``Tencent-Hunyuan/HunyuanVideo``) key layout ->
``vidax.models.hunyuan_video``."""

# ----------------------------------------------------------------------------- DiT
# ``transformers/mp_rank_00_model_states.pt``: ``{"module": state_dict}`` (the reader's automatic
# wrapper selection takes ``module``), bf16, no key prefix -> :class:`vidax.models.hunyuan_video.
# dit.HunyuanVideoDiT`. Nothing is ignored (the RoPE tables are not stored).
#
# Fused projections are split:
# * ``{img,txt}_attn_qkv`` and the refiner's ``self_attn_qkv``: the authors'
#   ``rearrange(qkv, "B L (K H D) -> K B L H D", K=3)`` puts q, k, v outermost (thirds of the
#   rows), each head-major as vidax's heads are.
# * ``single_blocks.N.linear1``: ``torch.split(linear1(x), [3 * hidden, mlp_hidden])`` then the
#   same rearrange -> rows [q | k | v | mlp], with mlp_hidden = 4 x hidden (every release's
#   ``mlp_width_ratio``). The rule is written for any hidden size: seven equal row blocks, the
#   last four merged back into the MLP input (another ratio fails verification loudly, on
#   the shapes of ``linear1_*``).
# * ``linear2`` stays fused ([attention | GELU(mlp)] columns, as the model concatenates).
# ``nn.Sequential`` indices become names: the TimestepEmbedders' ``mlp.0`` / ``mlp.2`` ->
# ``mlp.fc1`` / ``mlp.fc2``; ``adaLN_modulation.1`` (the Linear after a SiLU) ->
# ``adaLN_modulation``. The final layer's modulation rows stay [shift | scale], the order the
# model splits them in (diffusers' ``norm_out`` stores [scale | shift]; not this file).
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper, Merge, Rename, Split

_MLP_BLOCKS = ("0", "1", "2", "3")

DIT = Mapper(
    name="hunyuan_video.dit",
    description="HunyuanVideo 1.0 DiT, authors' layout (HYVideoDiffusionTransformer state dict)",
    rules=(
        Split(r"double_blocks\.(\d+)\.(img|txt)_attn_qkv\.(weight|bias)",
              (r"double_blocks.\1.\2_attn_q.\3", r"double_blocks.\1.\2_attn_k.\3",
               r"double_blocks.\1.\2_attn_v.\3")),
        Split(r"(txt_in\.individual_token_refiner\.blocks\.\d+)\.self_attn_qkv\.(weight|bias)",
              (r"\1.self_attn_q.\2", r"\1.self_attn_k.\2", r"\1.self_attn_v.\2")),
        Split(r"(single_blocks\.\d+)\.linear1\.(weight|bias)",
              (r"\1.linear1_q.\2", r"\1.linear1_k.\2", r"\1.linear1_v.\2",
               *(rf"\1.linear1_mlp.\2.{i}" for i in _MLP_BLOCKS))),
        Merge(r"(single_blocks\.\d+)\.linear1_mlp\.(weight|bias)\.(?P<part>\d)",
              into=r"\1.linear1_mlp.\2", order=_MLP_BLOCKS),
        Rename(r"^(time_in|guidance_in|txt_in\.t_embedder)\.mlp\.0\.", r"\1.mlp.fc1."),
        Rename(r"^(time_in|guidance_in|txt_in\.t_embedder)\.mlp\.2\.", r"\1.mlp.fc2."),
        Rename(r"\.adaLN_modulation\.1\.", ".adaLN_modulation."),
    ),
)

register(ComponentSpec(
    model_type="hunyuan_video", component="dit", layout="original",
    model="vidax.models.hunyuan_video.dit:HunyuanVideoDiT",
    config="vidax.models.hunyuan_video.config:HunyuanVideoDiTConfig",
    mapper="vidax.translator.mappings.hunyuan_video:DIT",
    variants={"t2v-720p": "t2v_720p"},
    # the bf16 release, else the authors' fp8 one (its scales in ..._fp8_map.pt beside it)
    files=("transformers/mp_rank_00_model_states.pt",
           "transformers/mp_rank_00_model_states_fp8.pt"),
    description="HunyuanVideo 1.0 diffusion transformer (T2V 720p, 12.8B, guidance-distilled)",
))


# ----------------------------------------------------------------------------- VAE
# ``vae/pytorch_model.pt``: a bare state dict (no wrapper, no prefix, fp32, 248 tensors) whose
# names are both the authors' ``AutoencoderKLCausal3D`` and diffusers' ``AutoencoderKLHunyuanVideo``
# -> :class:`vidax.models.hunyuan_video.vae.HunyuanVideoVAE`, which mirrors those module names,
# causal-conv wrappers included (``conv_in.conv.weight`` -> ``conv_in.conv.kernel``). The
# one-element ``downsamplers`` / ``upsamplers`` / ``attentions`` lists become single modules and
# the attention's ``to_out.0`` (a Linear followed by dropout in torch) ``to_out``. The
# converter's automatic layout does the rest (Conv3d weights -> channels-last kernels, Linear
# transposed, GroupNorm ``weight`` -> ``scale``); no tensor is ignored.

VAE = Mapper(
    name="hunyuan_video.vae",
    description="HunyuanVideo 1.0 VAE, authors' layout (= diffusers' AutoencoderKLHunyuanVideo)",
    rules=(
        Rename(r"\.downsamplers\.0\.", ".downsampler."),
        Rename(r"\.upsamplers\.0\.", ".upsampler."),
        Rename(r"\.attentions\.0\.", ".attention."),
        Rename(r"\.to_out\.0\.", ".to_out."),
    ),
)

register(ComponentSpec(
    model_type="hunyuan_video", component="vae", layout="original",
    model="vidax.models.hunyuan_video.vae:HunyuanVideoVAE",
    config="vidax.models.hunyuan_video.config:HunyuanVideoVAEConfig",
    mapper="vidax.translator.mappings.hunyuan_video:VAE",
    variants={"t2v-720p": "t2v_720p"},
    files=("vae/pytorch_model.pt",),
    description="HunyuanVideo 1.0 causal 3D VAE (884-16c-hy: latent 16, stride 4x8x8, "
                "scaling_factor 0.476986)",
))
