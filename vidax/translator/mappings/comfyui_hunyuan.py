"""HunyuanVideo in ComfyUI's own key layout: the names ComfyUI's module classes hold, which is
what a file ComfyUI saved has (and, by third-party reports, Comfy-Org's repackaged
``hunyuan_video_t2v_720p_bf16.safetensors``). docs/checkpoints_comfyui.md says per file
which layout it has and how sure that is.

HunyuanVideo 1.0 DiT, layout ``comfyui``
----------------------------------------
ComfyUI builds the DiT from its Flux layers (``comfy/ldm/hunyuan_video/model.py``
``HunyuanVideo``: ``DoubleStreamBlock``, ``SingleStreamBlock``, ``MLPEmbedder``, ``LastLayer``
from ``comfy/ldm/flux/layers.py``; its own ``TokenRefiner``), and loads the authors' file by
renaming every key (``comfy/supported_models.py`` class ``HunyuanVideo``
``process_unet_state_dict``; both read at comfyanonymous/ComfyUI, stored as Comfy-Org/ComfyUI
@01f03bbd for supported_models.py and @040a3243 for model.py). The renaming is a pure
bijection of names, no tensor is reshaped or reordered, so the values of a ComfyUI-named
file are the authors' tensor for tensor. In ComfyUI's names (authors' name -> ComfyUI's):

* ``{time_in,guidance_in,txt_in.t_embedder}.mlp.{0,2}`` -> ``.{in_layer,out_layer}``;
  ``txt_in.c_embedder.linear_{1,2}`` -> ``.{in_layer,out_layer}`` (``MLPEmbedder``);
  ``vector_in.{in_layer,out_layer}``, ``img_in.proj``, ``txt_in.input_embedder``,
  ``final_layer.{linear,adaLN_modulation.1}``: the same names.
* double blocks: ``{img,txt}_mod.linear`` -> ``{img,txt}_mod.lin``; ``_attn_qkv`` ->
  ``_attn.qkv``; ``_attn_proj`` -> ``_attn.proj``; ``_attn_{q,k}_norm.weight`` ->
  ``_attn.norm.{query,key}_norm.weight``; ``_mlp.fc{1,2}`` -> ``_mlp.{0,2}``.
* single blocks: ``{q,k}_norm.weight`` -> ``norm.{query,key}_norm.weight``;
  ``modulation.linear`` -> ``modulation.lin``; ``linear1`` / ``linear2``: the same.
* token refiner blocks: ``self_attn_qkv`` -> ``self_attn.qkv``, ``self_attn_proj`` ->
  ``self_attn.proj``, ``mlp.fc{1,2}`` -> ``mlp.{0,2}``; norms and ``adaLN_modulation.1`` the
  same.
* the RMSNorm parameter: ``.scale`` in ComfyUI's Flux ``RMSNorm`` of late 2024 (the file
  ComfyUI saved then; kijai/ComfyUI-HunyuanVideoWrapper's loader of ComfyUI-format files and
  third-party ports of the Comfy-Org file read ``*.norm.query_norm.scale``), ``.weight`` in
  today's (``process_unet_state_dict`` maps ``.scale`` endings to ``.weight``). Both are read.
* the container: ComfyUI saves this model under ``model.model.`` (``process_unet_state_dict_
  for_saving`` of the same class; the base class's ``model.diffusion_model.``, which the core
  strips, is not used for HunyuanVideo). Every pattern here accepts an optional
  ``model.model.`` prefix, which the first rename drops.

The fused projections are split exactly as the authors' layout's are
(``vidax.translator.mappings.hunyuan_video.DIT``: thirds for ``qkv``, seven equal row blocks of
``linear1`` with the last four merged back into the MLP input); the renames then land on the
same parameter paths the authors' layout does. The Flux-style name is the only difference.
"""

from __future__ import annotations

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper, Merge, Rename, Split, Transform

_P = r"(?:model\.model\.)?"          # ComfyUI's save prefix for this model (optional)
_MLP_BLOCKS = ("0", "1", "2", "3")
_NORM = r"(?:weight|scale)"           # today's / late-2024 ComfyUI RMSNorm parameter

#: ComfyUI's Flux-style names of a double-stream block and of the token refiner's blocks ->
#: the authors' (both HunyuanVideo versions share them).
_DOUBLE_BLOCKS = (
        Rename(r"\.(img|txt)_mod\.lin\.", r".\1_mod.linear."),
        Rename(r"\.(img|txt)_attn\.proj\.", r".\1_attn_proj."),
        Rename(r"\.(img|txt)_attn\.norm\.query_norm\." + _NORM + "$", r".\1_attn_q_norm.weight"),
        Rename(r"\.(img|txt)_attn\.norm\.key_norm\." + _NORM + "$", r".\1_attn_k_norm.weight"),
        Rename(r"\.(img|txt)_mlp\.0\.", r".\1_mlp.fc1."),
        Rename(r"\.(img|txt)_mlp\.2\.", r".\1_mlp.fc2."),
)
_TOKEN_REFINER = (
        Rename(r"^(txt_in\.individual_token_refiner\.blocks\.\d+)\.self_attn\.proj\.",
               r"\1.self_attn_proj."),
        Rename(r"^(txt_in\.individual_token_refiner\.blocks\.\d+)\.mlp\.0\.", r"\1.mlp.fc1."),
        Rename(r"^(txt_in\.individual_token_refiner\.blocks\.\d+)\.mlp\.2\.", r"\1.mlp.fc2."),
)

DIT = Mapper(
    name="hunyuan_video.dit.comfyui",
    description="HunyuanVideo 1.0 DiT, ComfyUI's layout (comfy/ldm/hunyuan_video HunyuanVideo "
                "state dict: Flux-style names, optional model.model. prefix)",
    rules=(
        Split(_P + r"double_blocks\.(\d+)\.(img|txt)_attn\.qkv\.(weight|bias)",
              (r"double_blocks.\1.\2_attn_q.\3", r"double_blocks.\1.\2_attn_k.\3",
               r"double_blocks.\1.\2_attn_v.\3")),
        Split(_P + r"(txt_in\.individual_token_refiner\.blocks\.\d+)\.self_attn\.qkv\."
                   r"(weight|bias)",
              (r"\1.self_attn_q.\2", r"\1.self_attn_k.\2", r"\1.self_attn_v.\2")),
        Split(_P + r"(single_blocks\.\d+)\.linear1\.(weight|bias)",
              (r"\1.linear1_q.\2", r"\1.linear1_k.\2", r"\1.linear1_v.\2",
               *(rf"\1.linear1_mlp.\2.{i}" for i in _MLP_BLOCKS))),
        Merge(r"(single_blocks\.\d+)\.linear1_mlp\.(weight|bias)\.(?P<part>\d)",
              into=r"\1.linear1_mlp.\2", order=_MLP_BLOCKS),
        Rename(r"^model\.model\.", ""),
        # the MLPEmbedders -> the parameter paths of the authors' layout
        Rename(r"^(time_in|guidance_in|txt_in\.t_embedder)\.in_layer\.", r"\1.mlp.fc1."),
        Rename(r"^(time_in|guidance_in|txt_in\.t_embedder)\.out_layer\.", r"\1.mlp.fc2."),
        Rename(r"^txt_in\.c_embedder\.in_layer\.", "txt_in.c_embedder.linear_1."),
        Rename(r"^txt_in\.c_embedder\.out_layer\.", "txt_in.c_embedder.linear_2."),
        # double blocks
        *_DOUBLE_BLOCKS,
        # single blocks
        Rename(r"^(single_blocks\.\d+)\.norm\.query_norm\." + _NORM + "$", r"\1.q_norm.weight"),
        Rename(r"^(single_blocks\.\d+)\.norm\.key_norm\." + _NORM + "$", r"\1.k_norm.weight"),
        Rename(r"^(single_blocks\.\d+)\.modulation\.lin\.", r"\1.modulation.linear."),
        # token refiner blocks
        *_TOKEN_REFINER,
        # as the authors' layout: the Linear after a SiLU
        Rename(r"\.adaLN_modulation\.1\.", ".adaLN_modulation."),
    ),
)

register(ComponentSpec(
    model_type="hunyuan_video", component="dit", layout="comfyui",
    model="vidax.models.hunyuan_video.dit:HunyuanVideoDiT",
    config="vidax.models.hunyuan_video.config:HunyuanVideoDiTConfig",
    mapper="vidax.translator.mappings.comfyui_hunyuan:DIT",
    variants={"t2v-720p": "t2v_720p"},
    files=("hunyuan_video_t2v_720p*.safetensors",),
    description="HunyuanVideo 1.0 DiT in ComfyUI's names (Flux-style; a file ComfyUI saved, "
                "Comfy-Org's hunyuan_video_t2v_720p_bf16.safetensors)",
))


# ------------------------------------------------------------------ HunyuanVideo-1.5 DiT
# ComfyUI runs 1.5 on the same module (comfy/ldm/hunyuan_video/model.py ``HunyuanVideo`` with
# ``vision_in`` = Wan's ``MLPProj`` (``proj.{0,1,3,4}``), ``byt5_in.{layernorm,fc1,fc2,fc3}``,
# ``cond_type_embedding``, ``time_r_in``: read at yzkee/ComfyUI@8d534945, a ComfyUI mirror)
# and the same renaming (``supported_models.HunyuanVideo15`` subclasses ``HunyuanVideo``).
# Its double blocks are Flux's, with ONE fused ``{img,txt}_attn.qkv`` Linear, where the
# authors' 1.5 file stores q, k, v apart, and ComfyUI's renaming fuses nothing. So a 1.5 file
# ComfyUI loads holds the fused rows [q | k | v], in one of two namings, both read here:
#
# * Comfy-Org's repackaging (``hunyuanvideo1.5_*_fp16.safetensors``): the authors' names with
#   the double blocks' q/k/v fused into 1.0's ``{img,txt}_attn_qkv`` (which the renaming turns
#   into ``_attn.qkv``), no prefix -- kohya-ss/musubi-tuner
#   ``src/musubi_tuner/hunyuan_video_1_5/hunyuan_video_1_5_models.py`` (@6a1b064a) loads these
#   files strictly into the authors' names after splitting only ``img_attn_qkv`` /
#   ``txt_attn_qkv`` in thirds (its comment: the repackaged files keep those packed);
# * a file ComfyUI saved: its module names (``img_attn.qkv``, ``img_mod.lin``, ...) under
#   ``model.model.``, as for 1.0.
#
# The fused rows are split in thirds; the renames below map either naming onto the authors'
# layout's paths (``hunyuan_video1_5.DIT``).
_TIME_15 = r"^(time_in|time_r_in|txt_in\.t_embedder)"
_VISION_IN = (("0", "norm_in"), ("1", "linear_1"), ("3", "linear_2"), ("4", "norm_out"))

DIT15 = Mapper(
    name="hunyuan_video1_5.dit.comfyui",
    description="HunyuanVideo-1.5 DiT with fused double-block qkv: Comfy-Org's repackaging "
                "(authors' names, img_attn_qkv) or ComfyUI's own names (optional model.model.)",
    rules=(
        Split(_P + r"double_blocks\.(\d+)\.(img|txt)_attn[._]qkv\.(weight|bias)",
              (r"double_blocks.\1.\2_attn_q.\3", r"double_blocks.\1.\2_attn_k.\3",
               r"double_blocks.\1.\2_attn_v.\3")),
        Split(_P + r"(txt_in\.individual_token_refiner\.blocks\.\d+)\.self_attn[._]qkv\."
                   r"(weight|bias)",
              (r"\1.self_attn_q.\2", r"\1.self_attn_k.\2", r"\1.self_attn_v.\2")),
        Transform(r"cond_type_embedding\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^model\.model\.", ""),
        Rename(_TIME_15 + r"\.(in_layer|mlp\.0)\.", r"\1.mlp.fc1."),
        Rename(_TIME_15 + r"\.(out_layer|mlp\.2)\.", r"\1.mlp.fc2."),
        Rename(r"^txt_in\.c_embedder\.in_layer\.", "txt_in.c_embedder.linear_1."),
        Rename(r"^txt_in\.c_embedder\.out_layer\.", "txt_in.c_embedder.linear_2."),
        *_DOUBLE_BLOCKS,
        *_TOKEN_REFINER,
        Rename(r"\.adaLN_modulation\.1\.", ".adaLN_modulation."),
        *(Rename(rf"^vision_in\.proj\.{i}\.", f"vision_in.{name}.") for i, name in _VISION_IN),
    ),
)

_DIT15_VARIANTS = ("480p_t2v", "480p_i2v", "720p_t2v", "720p_i2v", "480p_t2v_distilled",
                   "480p_i2v_distilled", "720p_i2v_distilled", "720p_i2v_distilled_sparse",
                   "480p_i2v_step_distilled")

register(ComponentSpec(
    model_type="hunyuan_video1_5", component="dit", layout="comfyui",
    model="vidax.models.hunyuan_video1_5.dit:HunyuanVideo15DiT",
    config="vidax.models.hunyuan_video1_5.config:HunyuanVideo15DiTConfig",
    mapper="vidax.translator.mappings.comfyui_hunyuan:DIT15",
    variants={v: "_".join((v.split("_")[1], v.split("_")[0], *v.split("_")[2:]))
              for v in _DIT15_VARIANTS},
    files=("hunyuanvideo1.5_*_t2v*.safetensors", "hunyuanvideo1.5_*_i2v*.safetensors"),
    description="HunyuanVideo-1.5 DiT in ComfyUI's names (Comfy-Org's "
                "hunyuanvideo1.5_*_fp16.safetensors; fused double-block qkv)",
))


# ------------------------------------------------------------------ HunyuanVideo 1.0 VAE
# ComfyUI runs the 1.0 VAE as its ldm ``AutoencoderKL`` with 3D convs (``comfy/sd.py`` ``VAE``:
# the branch keyed on ``decoder.conv_in.conv.weight``, ``ddconfig`` ch 128, ch_mult
# [1, 2, 4, 4], 2 res blocks, ``conv3d``, ``time_compress`` 4), and loads the authors' /
# diffusers' names by ``comfy/diffusers_convert.py`` ``convert_vae_state_dict`` (applied when
# ``decoder.up_blocks.0.resnets.0.norm1.weight`` is present): ``down_blocks.i.resnets.j`` ->
# ``down.i.block.j``, ``down_blocks.i.downsamplers.0`` -> ``down.i.downsample``,
# ``up_blocks.i.resnets.j`` -> ``up.{3-i}.block.j`` and ``up_blocks.i.upsamplers.0`` ->
# ``up.{3-i}.upsample`` (the up levels numbered in reverse), ``mid_block.resnets.{0,1}`` ->
# ``mid.block_{1,2}``, ``mid_block.attentions.0.{group_norm,to_q,to_k,to_v,to_out.0}`` ->
# ``mid.attn_1.{norm,q,k,v,proj_out}`` with the four weights reshaped ``[C, C]`` ->
# ``[C, C, 1, 1, 1]`` (1x1x1 convs), ``conv_shortcut`` -> ``nin_shortcut``, ``conv_norm_out``
# -> ``norm_out``; ``quant_conv`` / ``post_quant_conv`` / ``conv_in`` / ``conv_out`` as they
# are (read at comfyanonymous/ComfyUI@06a5766d). A file ComfyUI saved holds those names (by
# kijai/ComfyUI-HunyuanVideoWrapper#338 and #483, Comfy-Org's ``hunyuan_video_vae_bf16`` is
# one). The rules below undo the renaming onto the parameter paths of the authors' layout
# (``hunyuan_video.VAE``); the up-level reversal is for the 4 levels ComfyUI's table assumes.
_LEVELS = 4
_VAE_ATTN = (("norm", "group_norm"), ("q", "to_q"), ("k", "to_k"), ("v", "to_v"),
             ("proj_out", "to_out"))

VAE = Mapper(
    name="hunyuan_video.vae.comfyui",
    description="HunyuanVideo 1.0 VAE, ComfyUI's layout (ldm AutoencoderKL names: "
                "down.i.block.j, up.{3-i}, mid.attn_1 1x1x1 convs, nin_shortcut, norm_out)",
    rules=(
        Transform(r"\.mid\.attn_1\.(q|k|v|proj_out)\.weight$",
                  reshape=lambda shape: tuple(shape[:2])),
        Rename(r"^(encoder|decoder)\.mid\.block_1\.", r"\1.mid_block.resnets.0."),
        Rename(r"^(encoder|decoder)\.mid\.block_2\.", r"\1.mid_block.resnets.1."),
        *(Rename(rf"^(encoder|decoder)\.mid\.attn_1\.{a}\.", rf"\1.mid_block.attention.{b}.")
          for a, b in _VAE_ATTN),
        Rename(r"^encoder\.down\.(\d+)\.block\.", r"encoder.down_blocks.\1.resnets."),
        Rename(r"^encoder\.down\.(\d+)\.downsample\.", r"encoder.down_blocks.\1.downsampler."),
        *(Rename(rf"^decoder\.up\.{_LEVELS - 1 - i}\.block\.", f"decoder.up_blocks.{i}.resnets.")
          for i in range(_LEVELS)),
        *(Rename(rf"^decoder\.up\.{_LEVELS - 1 - i}\.upsample\.",
                 f"decoder.up_blocks.{i}.upsampler.") for i in range(_LEVELS)),
        Rename(r"\.nin_shortcut\.", ".conv_shortcut."),
        Rename(r"^(encoder|decoder)\.norm_out\.", r"\1.conv_norm_out."),
    ),
)

register(ComponentSpec(
    model_type="hunyuan_video", component="vae", layout="comfyui",
    model="vidax.models.hunyuan_video.vae:HunyuanVideoVAE",
    config="vidax.models.hunyuan_video.config:HunyuanVideoVAEConfig",
    mapper="vidax.translator.mappings.comfyui_hunyuan:VAE",
    variants={"t2v-720p": "t2v_720p"},
    files=("hunyuan_video_vae*.safetensors",),
    description="HunyuanVideo 1.0 VAE in ComfyUI's ldm names (Comfy-Org's "
                "hunyuan_video_vae_bf16.safetensors)",
))


# ------------------------------------------------------------------ HunyuanVideo-1.5 byT5
# ComfyUI's glyph-text encoder (``comfy/text_encoders/hunyuan_image.py`` ``ByT5SmallModel``,
# HunyuanVideo-1.5's too) is its ``comfy/text_encoders/t5.py`` ``T5`` at
# ``byt5_config_small_glyph.json`` (vocabulary 1510, model_type t5: the relative-position table
# in block 0 only): transformers' ``T5EncoderModel`` names (``shared``, ``encoder.block.N.*``,
# ``encoder.final_layer_norm``), not the bare ``T5Stack`` names of the authors' ``byt5_model.pt``
# (read at comfyanonymous/ComfyUI@04e411c3 t5.py, @d7c3a3f2 the config). That naming is the
# ``t5`` encoder's ``transformers`` layout (``vidax.translator.mappings.t5.T5_ENCODER``), whose
# registration knows T5-v1.1-XXL only; layout ``comfyui`` is the same table at the glyph
# byT5's config.
register(ComponentSpec(
    model_type="t5", component="encoder", layout="comfyui",
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.config:T5Config",
    mapper="vidax.translator.mappings.t5:T5_ENCODER",
    variants={"glyph-sdxl-v2": "glyph_sdxl_v2"},
    files=("byt5_small_glyphxl*.safetensors",),
    description="byT5-small glyph encoder in transformers' T5EncoderModel names (ComfyUI's "
                "byt5_small_glyphxl_fp16.safetensors: HunyuanVideo-1.5's glyph-text encoder)",
))
