"""CogVideoX / CogVideoX1.5 (diffusers layout) -> vidax.

The hub releases (THUDM/CogVideoX-2b, -5b, -5b-I2V, CogVideoX1.5-5B, -5B-I2V) are diffusers
pipeline folders; the original SAT checkpoints are not mapped here.

DiT: diffusers' ``CogVideoXTransformer3DModel`` state dict ->
:class:`vidax.models.cogvideox.dit.CogVideoXDiT`, whose module names mirror diffusers', so the
rules are three renames of ``ModuleList`` indices; the converter's automatic layout does the
rest (Linear ``[out, in]`` -> ``[in, out]``; the 1.0 Conv2d patch embedding
``[D, C, p, p]`` -> ``[p, p, C, D]``; the 1.5 Linear patch embedding keeps its (C, p_t, p, p)
input order, which the model patchifies to). The 5b-i2v learned table
``patch_embed.pos_embedding`` keeps its name and layout; the 2b sincos table is a
non-persistent buffer, absent from the files, and RoPE is computed at run time.

VAE: diffusers' ``AutoencoderKLCogVideoX`` state dict ->
:class:`vidax.models.cogvideox.vae.CogVideoXVAE` (below).
"""

from __future__ import annotations

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper, Rename

# ---- DiT
DIT = Mapper(
    name="cogvideox.dit",
    description="CogVideoX DiT, diffusers' layout (CogVideoXTransformer3DModel state dict)",
    rules=(
        Rename(r"\.attn1\.to_out\.0\.", ".attn1.to_out."),
        Rename(r"\.ff\.net\.0\.proj\.", ".ff.proj_in."),
        Rename(r"\.ff\.net\.2\.", ".ff.proj_out."),
    ),
)

register(ComponentSpec(
    model_type="cogvideox", component="dit", layout="diffusers",
    model="vidax.models.cogvideox.dit:CogVideoXDiT",
    config="vidax.models.cogvideox.config:CogVideoXDiTConfig",
    mapper="vidax.translator.mappings.cogvideox:DIT",
    variants={"2b": "cogvideox_2b", "5b": "cogvideox_5b", "5b-i2v": "cogvideox_5b_i2v",
              "1.5-5b": "cogvideox1_5_5b", "1.5-5b-i2v": "cogvideox1_5_5b_i2v"},
    files=("transformer/diffusion_pytorch_model.safetensors.index.json",
           "transformer/diffusion_pytorch_model*.safetensors"),
    description="CogVideoX / CogVideoX1.5 DiT in diffusers' layout "
                "(CogVideoXTransformer3DModel: 2b, 5b, 5b-i2v, 1.5-5b, 1.5-5b-i2v)",
))

# ---- VAE
# diffusers' ``AutoencoderKLCogVideoX`` state dict -> :class:`vidax.models.cogvideox.vae.
# CogVideoXVAE`, whose module names mirror diffusers'. The causal convs are diffusers wrappers
# holding an ``nn.Conv3d`` named ``conv`` (3x3x3 ``conv_in`` / ``conv_out`` / ``conv1`` /
# ``conv2``; the spatial norms' 1x1x1 ``conv_y`` / ``conv_b``): the wrapper level is dropped.
# ``conv_shortcut`` is a bare 1x1x1 Conv3d and the down/upsamplers' ``conv`` a Conv2d; both keep
# their names. The one-element ``downsamplers`` / ``upsamplers`` lists become single modules.
# The converter's automatic layout does the rest (conv weights -> channels-last kernels,
# GroupNorm ``weight`` -> ``scale``). Same keys and shapes in all five releases (436 tensors).
VAE = Mapper(
    name="cogvideox.vae",
    description="CogVideoX VAE, diffusers' layout (AutoencoderKLCogVideoX state dict)",
    rules=(
        Rename(r"\.(conv_in|conv_out|conv1|conv2|conv_y|conv_b)\.conv\.", r".\1."),
        Rename(r"\.downsamplers\.0\.", ".downsampler."),
        Rename(r"\.upsamplers\.0\.", ".upsampler."),
    ),
)

register(ComponentSpec(
    model_type="cogvideox", component="vae", layout="diffusers",
    model="vidax.models.cogvideox.vae:CogVideoXVAE",
    config="vidax.models.cogvideox.config:CogVideoXVAEConfig",
    mapper="vidax.translator.mappings.cogvideox:VAE",
    variants={"2b": "cogvideox_2b", "5b": "cogvideox_5b", "5b-i2v": "cogvideox_5b",
              "1.5-5b": "cogvideox1_5_5b", "1.5-5b-i2v": "cogvideox1_5_5b"},
    files=("vae/diffusion_pytorch_model*.safetensors",),
    description="CogVideoX / CogVideoX1.5 VAE in diffusers' layout (AutoencoderKLCogVideoX; "
                "one architecture, scaling_factor 1.15258426 for 2b, 0.7 for the 5B releases)",
))
