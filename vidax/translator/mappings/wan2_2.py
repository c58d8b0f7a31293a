"""Wan2.2: the authors' (``Wan-Video/Wan2.2``) key layout -> vidax modules.

VAE (``Wan2.2_VAE.pth``, vae2_2 ``WanVAE_`` state dict) -> :mod:`vidax.models.wan2_2.vae`.
Its ``nn.Sequential`` indices are the Wan2.1 VAE's (residual, middle, head, resample), so the
rules are the Wan2.1 VAE mapper's, unchanged; the nested ``downsamples.I.downsamples.J`` /
``upsamples.I.upsamples.J`` numbering is kept, and the AvgDown3D / DupUp3D shortcuts store
nothing.

DiTs: every Wan2.2 ``WanModel`` is the Wan2.1 DiT's key layout (``wan2_1.DIT``) at its own
config. The A14B T2V experts are Wan2.1 T2V-14B (aliased in ``wan2_1``). I2V-A14B has 36 input
channels and, unlike Wan2.1 I2V, no CLIP branch: structurally a Wan2.1 "t2v" model with
``in_dim=36`` (``WanDiT`` then concatenates ``y`` onto ``x``, as the authors do). TI2V-5B is a
"t2v" model at its own widths; its per-token timesteps are a forward-pass feature of the
Wan2.2 DiT, not a different tree.
"""

from vidax.models.wan2_2.config import Wan22DiTConfigs  # noqa: F401  (its old home; moved)
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper
from vidax.translator.mappings import wan2_1

VAE = Mapper(
    name="wan2_2.vae",
    description="Wan2.2 VAE, authors' layout (vae2_2 WanVAE_ state dict)",
    rules=wan2_1.VAE.rules,
)

register(ComponentSpec(
    model_type="wan2_2", component="vae", layout="original",
    model="vidax.models.wan2_2.vae:Wan22VAE", config="vidax.models.wan2_2.config:Wan22VAEConfig",
    mapper="vidax.translator.mappings.wan2_2:VAE",
    variants={"ti2v-5b": "wan2_2"},
    files=("Wan2.2_VAE.pth",),
    description="Wan2.2 causal 3D VAE (2x2 patchify, z 48, stride 4x16x16) of TI2V-5B; "
                "Cosmos3's VAE in diffusers' layout",
))


register(ComponentSpec(
    model_type="wan2_2", component="dit", layout="original",
    model="vidax.models.wan2_1.dit:WanDiT",
    config="vidax.models.wan2_2.config:Wan22DiTConfigs",
    mapper="vidax.translator.mappings.wan2_1:DIT",
    variants={"ti2v-5b": "ti2v_5b", "t2v-a14b": "t2v_a14b", "i2v-a14b": "i2v_a14b"},
    files=("diffusion_pytorch_model.safetensors.index.json",
           "diffusion_pytorch_model*.safetensors"),
    description="Wan2.2 diffusion transformers (TI2V-5B; each A14B T2V/I2V expert): the "
                "Wan2.1 DiT tree at Wan2.2 configs",
))
