"""Wan2.1: the authors' (``Wan-Video/Wan2.1``) key layout -> ``vidax.models.wan2_1``.

DiT (``diffusion_pytorch_model*.safetensors``): a near-mechanical rename. The authors'
``nn.Sequential`` indices become named layers; everything else keeps its name, and the
converter's automatic layout handles the rest (Linear transposed, the Conv3d patch
embedding made channels-last, norm weights -> ``scale``). ``modulation`` and
``img_emb.emb_pos`` are free parameters and pass unchanged. The RoPE table ``freqs`` is
not stored (recomputed at run time), so nothing needs ignoring.

The releases' text and image encoders (UMT5-XXL, the CLIP ViT-H/14 visual tower) are
registered with their encoders' other layouts, in ``vidax.translator.mappings.t5`` and
``vidax.translator.mappings.clip``.
"""

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Mapper, Rename, Transform

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
    model="vidax.models.wan2_1.dit:WanDiT", config="vidax.models.wan2_1.config:WanDiTConfig",
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

# ----------------------------------------------------------------------------- VAE
# Wan2.1_VAE.pth: the authors' ``WanVAE_`` state dict (wan/modules/vae2_1.py; also Wan2.2's
# A14B VAE and Cosmos-Predict2.5's tokenizer.pth, the same keys). ``nn.Sequential`` indices
# become names (see vidax.models.wan2_1.vae); the flat ``downsamples.N`` / ``upsamples.N``
# numbering is kept. Every RMS_norm ``gamma`` is stored broadcastable ([C, 1, 1, 1] in the
# residual blocks and heads, [C, 1, 1] in the attention blocks) and becomes ``scale`` [C].
# The converter's automatic layout handles the rest: Conv3d / Conv2d weights channels-last.
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
    model="vidax.models.wan2_1.vae:WanVAE", config="vidax.models.wan2_1.config:WanVAEConfig",
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
