"""diffusers' Wan key layouts (``*-Diffusers`` releases, Cosmos3's and Cosmos-Predict2.5's VAEs)
-> the same vidax modules as the authors' layouts.

Registered as layout ``diffusers`` of the components they implement: ``wan2_1`` ``dit``
(``WanTransformer3DModel``), ``wan2_1`` ``vae`` and ``wan2_2`` ``vae`` (``AutoencoderKLWan``
with the Wan2.1 / Wan2.2 configs), ``wan2_2`` ``dit`` (TI2V-5B, A14B experts). Every tensor maps
1:1 with the shape it has in the authors' layout (checked against diffusers'
``scripts/convert_wan_to_diffusers.py``; ../shared/families/wan.md), so the rules are renames
only; the converter's automatic layout then does what it does for the authors' files.

DiT: a pure rename (the conversion script's ``TRANSFORMER_KEYS_RENAME_DICT``, read backwards).

VAE: the authors' ``nn.Sequential`` indices become diffusers' named blocks, and the flat
Wan2.1 decoder list ``upsamples.N`` is regrouped by diffusers into
``up_blocks.N // 4 .{resnets.N % 4 | upsamplers.0}``; Wan2.2's nested lists become
``down_blocks.I.{resnets.J | downsampler}`` / ``up_blocks.I.{resnets.J | upsampler}``. The
index arithmetic assumes ``num_res_blocks = 2`` (every release; the diffusers config readers
below refuse any other value, and verification would fail on the tree).
"""

from __future__ import annotations

# The config.json readers live with the configs (importable from here too, their first home).
from vidax.models.wan2_2.config import (  # noqa: F401
    _LEVELS, _RES, Wan22VAEDiffusersConfigs, WanDiTDiffusersConfigs, WanVAEDiffusersConfigs,
    dit_config_from_diffusers, vae_config_from_diffusers)
from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Mapper, Rename, Transform

# ----------------------------------------------------------------------------- DiT
DIT = Mapper(
    name="wan2_2_diffusers.dit",
    description="Wan DiT, diffusers' layout (WanTransformer3DModel state dict)",
    rules=(
        Rename(r"^scale_shift_table$", "head.modulation"),
        Rename(r"^proj_out\.", "head.head."),
        Rename(r"^blocks\.(\d+)\.scale_shift_table$", r"blocks.\1.modulation"),
        Rename(r"^condition_embedder\.time_embedder\.linear_([12])\.", r"time_embedding.fc\1."),
        Rename(r"^condition_embedder\.text_embedder\.linear_([12])\.", r"text_embedding.fc\1."),
        Rename(r"^condition_embedder\.time_proj\.", "time_projection.fc."),
        Rename(r"^condition_embedder\.image_embedder\.pos_embed$", "img_emb.emb_pos"),
        Rename(r"^condition_embedder\.image_embedder\.ff\.net\.0\.proj\.", "img_emb.fc1."),
        Rename(r"^condition_embedder\.image_embedder\.ff\.net\.2\.", "img_emb.fc2."),
        Rename(r"^condition_embedder\.image_embedder\.", "img_emb."),
        # diffusers' norm2 is the affine LayerNorm before cross-attention (the authors' norm3).
        Rename(r"^blocks\.(\d+)\.norm2\.", r"blocks.\1.norm3."),
        Rename(r"\.attn1\.", ".self_attn."),
        Rename(r"\.attn2\.", ".cross_attn."),
        Rename(r"\.to_([qkv])\.", r".\1."),
        Rename(r"\.to_out\.0\.", ".o."),
        Rename(r"\.add_([kv])_proj\.", r".\1_img."),
        Rename(r"\.norm_added_k\.", ".norm_k_img."),
        Rename(r"\.ffn\.net\.0\.proj\.", ".ffn.fc1."),
        Rename(r"\.ffn\.net\.2\.", ".ffn.fc2."),
    ),
)


_DIT_FILES = ("transformer/diffusion_pytorch_model.safetensors.index.json",
              "transformer/diffusion_pytorch_model*.safetensors")

register(ComponentSpec(
    model_type="wan2_1", component="dit", layout="diffusers",
    model="vidax.models.wan2_1.dit:WanDiT",
    config="vidax.models.wan2_2.config:WanDiTDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:DIT",
    variants={"t2v-1.3b": "t2v_1_3b", "t2v-14b": "t2v_14b", "i2v-14b": "i2v_14b",
              "flf2v-14b": "flf2v_14b"},
    files=_DIT_FILES,
    description="Wan2.1 DiT in diffusers' layout (WanTransformer3DModel, Wan2.1-*-Diffusers)",
))
register(ComponentSpec(
    model_type="wan2_2", component="dit", layout="diffusers",
    model="vidax.models.wan2_1.dit:WanDiT",
    config="vidax.models.wan2_2.config:WanDiTDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:DIT",
    variants={"ti2v-5b": "ti2v_5b", "t2v-a14b": "t2v_a14b", "i2v-a14b": "i2v_a14b"},
    files=_DIT_FILES,
    description="Wan2.2 DiTs in diffusers' layout (WanTransformer3DModel, Wan2.2-*-Diffusers; "
                "A14B: transformer/ and transformer_2/)",
))


# ----------------------------------------------------------------------------- VAE
def _residual_and_attention_rules() -> tuple:
    """Rules shared by both VAEs: the top-level convs, the encoder/decoder ends, the middle
    blocks, inside each residual block (diffusers already names its norms and convs as vidax
    does), the resample conv; RMS_norm ``gamma`` -> ``scale`` [C]. Attention (``norm``,
    ``to_qkv``, ``proj``) and ``time_conv`` keep their names."""
    return (
        Transform(r"\.gamma$", leaf="scale", reshape=lambda shape: (shape[0],)),
        Rename(r"^quant_conv\.", "conv1."),
        Rename(r"^post_quant_conv\.", "conv2."),
        Rename(r"^(encoder|decoder)\.conv_in\.", r"\1.conv1."),
        Rename(r"^(encoder|decoder)\.norm_out\.", r"\1.head_norm."),
        Rename(r"^(encoder|decoder)\.conv_out\.", r"\1.head_conv."),
        Rename(r"\.mid_block\.resnets\.0\.", ".mid_block1."),
        Rename(r"\.mid_block\.attentions\.0\.", ".mid_attn."),
        Rename(r"\.mid_block\.resnets\.1\.", ".mid_block2."),
        Rename(r"\.conv_shortcut\.", ".shortcut."),
        Rename(r"\.resample\.1\.", ".conv."),
    )


# Every release: num_res_blocks = 2, four levels. Wan2.1's decoder levels hold 3 residual
# blocks and (but the last) an upsampler: authors' flat index 4 * level + j.
VAE2_1 = Mapper(
    name="wan2_2_diffusers.vae2_1",
    description="Wan2.1 VAE, diffusers' layout (AutoencoderKLWan, z 16)",
    rules=_residual_and_attention_rules() + (
        Rename(r"^encoder\.down_blocks\.(\d+)\.", r"encoder.downsamples.\1."),
        *(Rename(rf"^decoder\.up_blocks\.{i}\.resnets\.{j}\.",
                 f"decoder.upsamples.{(_RES + 2) * i + j}.")
          for i in range(_LEVELS) for j in range(_RES + 1)),
        *(Rename(rf"^decoder\.up_blocks\.{i}\.upsamplers\.0\.",
                 f"decoder.upsamples.{(_RES + 2) * i + _RES + 1}.")
          for i in range(_LEVELS - 1)),
    ),
)

VAE2_2 = Mapper(
    name="wan2_2_diffusers.vae2_2",
    description="Wan2.2 VAE, diffusers' layout (AutoencoderKLWan, z 48, is_residual)",
    rules=_residual_and_attention_rules() + (
        Rename(r"^encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.",
               r"encoder.downsamples.\1.downsamples.\2."),
        Rename(r"^encoder\.down_blocks\.(\d+)\.downsampler\.",
               rf"encoder.downsamples.\1.downsamples.{_RES}."),
        Rename(r"^decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.",
               r"decoder.upsamples.\1.upsamples.\2."),
        Rename(r"^decoder\.up_blocks\.(\d+)\.upsampler\.",
               rf"decoder.upsamples.\1.upsamples.{_RES + 1}."),
    ),
)


_VAE_FILES = ("vae/diffusion_pytorch_model.safetensors",)

register(ComponentSpec(
    model_type="wan2_1", component="vae", layout="diffusers",
    model="vidax.models.wan2_1.vae:WanVAE",
    config="vidax.models.wan2_2.config:WanVAEDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:VAE2_1",
    variants={v: "wan2_1" for v in ("t2v-1.3b", "t2v-14b", "i2v-14b", "flf2v-14b")},
    files=_VAE_FILES,
    description="Wan2.1 VAE in diffusers' layout (AutoencoderKLWan z 16): Wan2.1-*-Diffusers, "
                "Wan2.2 A14B -Diffusers, Cosmos-Predict2.5 diffusers revision",
))
register(ComponentSpec(
    model_type="wan2_2", component="vae", layout="diffusers",
    model="vidax.models.wan2_2.vae:Wan22VAE",
    config="vidax.models.wan2_2.config:Wan22VAEDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:VAE2_2",
    variants={"ti2v-5b": "wan2_2"},
    files=_VAE_FILES,
    description="Wan2.2 VAE in diffusers' layout (AutoencoderKLWan z 48): "
                "Wan2.2-TI2V-5B-Diffusers, Cosmos3",
))

# ----------------------------------------------------------------------------- aliases
# The manifests' wan2_2_diffusers family (the -Diffusers releases), and the same VAEs in other
# families' releases: Cosmos3 ships the Wan2.2 VAE, Cosmos-Predict2.5's diffusers revision the
# Wan2.1 VAE, both in diffusers' layout.
_DIFFUSERS = "diffusers"
for _name, _target in {
    ("wan2_2_diffusers", "t2v-1.3b", "dit"): ("wan2_1", "t2v-1.3b"),
    ("wan2_2_diffusers", "ti2v-5b", "dit"): ("wan2_2", "ti2v-5b"),
    ("wan2_2_diffusers", "t2v-1.3b", "vae"): ("wan2_1", "t2v-1.3b"),
    ("wan2_2_diffusers", "ti2v-5b", "vae"): ("wan2_2", "ti2v-5b"),
    ("wan2_2", "t2v-a14b", "vae"): ("wan2_1", "t2v-14b"),
    ("wan2_2", "i2v-a14b", "vae"): ("wan2_1", "t2v-14b"),
    ("cosmos2_5", "predict-2b", "vae"): ("wan2_1", "t2v-1.3b"),
    ("cosmos3", "edge", "vae"): ("wan2_2", "ti2v-5b"),
    ("cosmos3", "nano", "vae"): ("wan2_2", "ti2v-5b"),
}.items():
    alias(*_name, _DIFFUSERS, Alias(_target[0], _target[1], _name[2], _DIFFUSERS))
