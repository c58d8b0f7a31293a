"""Cosmos3 (Nano, Edge): the DiT's diffusers layout -> ``vidax.models.cosmos3.dit``.

(The VAE, ``vae/``, is the Wan2.2 VAE in diffusers' layout: an alias registered in
``vidax.translator.mappings.wan2_2_diffusers``.)

The released ``transformer/`` folders (``diffusion_pytorch_model-*.safetensors`` + index) hold
``Cosmos3OmniTransformer``'s state dict, written by NVIDIA's
``cosmos_framework/scripts/_convert_model_to_diffusers.py``; vidax's modules carry the same
names, so the converter's name-and-rank rules do everything except the token embedding table
(kept ``[vocab, D]``). The file also holds the network's other output surfaces, which video
generation never reads; they are ignored with their reasons below: the reasoner's text head
(``lm_head`` and the prompt stream's final ``norm``), the action (policy) head (Nano and Edge)
and the sound head (Nano).
"""

from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Ignore, Mapper, Transform

DIT = Mapper(
    name="cosmos3.dit",
    description="Cosmos3 DiT, diffusers' layout (Cosmos3OmniTransformer; Nano and Edge)",
    rules=(
        Ignore(r"lm_head\.weight",
               "the reasoner's next-token head (text output): video generation reads only the "
               "video tokens' outputs"),
        Ignore(r"norm\.weight",
               "the prompt stream's final RMSNorm, read only by lm_head (the video tokens "
               "end with norm_moe_gen)"),
        Ignore(r"action_(modality_embed|proj_(in|out)\.(fc|bias)\.weight)",
               "the action (robot policy) head: per-embodiment DomainAwareLinear projections "
               "and the action modality embedding, used only when action tokens are generated"),
        Ignore(r"audio_(modality_embed|proj_(in|out)\.(weight|bias))",
               "the sound head (Nano): audio projections and modality embedding, used only "
               "when sound tokens are generated with the video"),
        Transform(r"^embed_tokens\.weight$", layout="embedding", leaf="embedding"),
    ),
)

register(ComponentSpec(
    model_type="cosmos3", component="dit", layout="diffusers",
    model="vidax.models.cosmos3.dit:Cosmos3DiT",
    config="vidax.models.cosmos3.config:Cosmos3DiTConfig",
    mapper="vidax.translator.mappings.cosmos3:DIT",
    variants={"nano": "nano", "edge": "edge"},
    files=("transformer/diffusion_pytorch_model.safetensors.index.json",
           "transformer/diffusion_pytorch_model*.safetensors"),
    description="Cosmos3 diffusion transformer (Nano: Qwen3-VL-8B backbone; Edge: Nemotron-2B "
                "backbone), video generation, diffusers' layout (transformer/)",
))
