"""Wan2.1: the authors' (``Wan-Video/Wan2.1``) key layout -> ``vidax.models.wan2_1``.

DiT (``diffusion_pytorch_model*.safetensors``): a near-mechanical rename. The authors'
``nn.Sequential`` indices become named layers; everything else keeps its name, and the
converter's automatic layout handles the rest (Linear transposed, the Conv3d patch
embedding made channels-last, norm weights -> ``scale``). ``modulation`` and
``img_emb.emb_pos`` are free parameters and pass unchanged. The RoPE table ``freqs`` is
not stored (recomputed at run time), so nothing needs ignoring.
"""

from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Mapper, Rename

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
    model="vidax.models.wan2_1:WanDiT", config="vidax.models.wan2_1:WanDiTConfig",
    mapper="vidax.translator.mappings.wan2_1:DIT",
    variants={"t2v-1.3b": "t2v_1_3b", "t2v-14b": "t2v_14b", "i2v-14b": "i2v_14b",
              "flf2v-14b": "flf2v_14b"},
    files=("diffusion_pytorch_model*.safetensors", "diffusion_pytorch_model.safetensors.index.json"),
    description="Wan2.1 diffusion transformer (T2V 1.3B/14B, I2V 14B 480P/720P, FLF2V 14B)",
))

# Each Wan2.2 A14B text-to-video expert (high_noise_model/, low_noise_model/) is the Wan2.1
# T2V-14B architecture with the same key/shape set.
alias("wan2_2", "t2v-a14b", "dit", "original", Alias("wan2_1", "t2v-14b", "dit", "original"))
