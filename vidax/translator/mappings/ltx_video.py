"""LTX-Video 0.9.x: the authors' single-file layout -> ``vidax.models.ltx_video``, and the
T5-v1.1-XXL text encoder in transformers' layout -> ``vidax.models.t5.model``.

One release file (``ltxv-13b-0.9.8-dev.safetensors``, ...) holds two components:

* the DiT under ``model.diffusion_model.`` (``Transformer3DModel.state_dict()``);
* the VAE under ``vae.`` (``CausalVideoAutoencoder.state_dict()``) plus five latent
  statistics vectors ``vae.per_channel_statistics.<name>`` (hyphens are literal);

and its ``__metadata__["config"]`` is a JSON object whose ``transformer`` / ``vae`` sections
are the models' constructor arguments (there is no config.json). The specs below select each
component's keys by prefix, and read their config from the metadata when neither a variant
nor a config is given (``ComponentSpec.config_from_metadata``). The spatial latent upscaler is
its own file (``ltxv-spatial-upscaler-0.9.8.safetensors``): bare keys, and the metadata
``config`` is the upsampler's own dict.

The authors' loader silently drops VAE norm keys its model lacks and loads the DiT by
prefix; vidax maps or ignores (with the reason) every tensor under a component's prefix and
reports anything else, so a file that does not fit fails verification instead.
"""

from __future__ import annotations

import json

from vidax.errors import VidaxError
from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform

# ----------------------------------------------------------------------------- DiT
# Module names are the authors' (vidax.models.ltx_video.dit); two nn.Sequential indices
# become names. The converter's automatic layout does the rest (Linear weights transposed,
# q/k norm weights -> scale, the scale_shift_tables pass unchanged).
DIT = Mapper(
    name="ltx_video.dit",
    description="LTX-Video DiT, authors' layout (Transformer3DModel state dict)",
    rules=(
        Rename(r"\.to_out\.0\.", ".to_out."),
        Rename(r"\.ff\.net\.0\.proj\.", ".ff.proj_in."),
        Rename(r"\.ff\.net\.2\.", ".ff.proj_out."),
    ),
)

# ----------------------------------------------------------------------------- VAE
# Module names and the flat encoder.down_blocks.N / decoder.up_blocks.N numbering are the
# authors'; Conv3d weights become channels-last kernels, and the 0-d
# decoder.timestep_scale_multiplier passes as it is. Of the five statistics the authors'
# loader keeps two (their CausalVideoAutoencoder.load_state_dict); the names lose their
# hyphens.
VAE = Mapper(
    name="ltx_video.vae",
    description="LTX-Video causal video VAE, authors' layout (CausalVideoAutoencoder state "
                "dict + per_channel_statistics)",
    rules=(
        Ignore(r"per_channel_statistics\.(channel|mean-of-stds|mean-of-stds_over_std-of-means)",
               "latent statistics the authors never use (only mean-of-means and std-of-means "
               "normalise latents)"),
        Rename(r"^per_channel_statistics\.mean-of-means$", "per_channel_statistics.mean_of_means"),
        Rename(r"^per_channel_statistics\.std-of-means$", "per_channel_statistics.std_of_means"),
    ),
)

# ----------------------------------------------------------------------------- upsampler
# LatentUpsampler.state_dict(): the upsampler Sequential's conv (index 0) is named; GroupNorm
# weights -> scale and conv weights (3-D, and the per-frame 2-D one) -> channels-last kernels.
UPSAMPLER = Mapper(
    name="ltx_video.upsampler",
    description="LTX-Video latent upsampler, authors' layout (LatentUpsampler state dict)",
    rules=(Rename(r"^upsampler\.0\.", "upsampler.conv."),),
)


# ----------------------------------------------------------------------------- metadata
def _metadata_config(metadata: dict[str, str], source: str) -> dict | None:
    if "config" not in metadata:
        return None
    try:
        config = json.loads(metadata["config"])
    except ValueError as e:
        raise VidaxError(f"{source}: the safetensors metadata 'config' is not valid JSON "
                         f"({e})") from e
    if not isinstance(config, dict):
        raise VidaxError(f"{source}: the safetensors metadata 'config' is not a JSON object")
    return config


def _section(metadata: dict[str, str], source: str, section: str) -> dict | None:
    config = _metadata_config(metadata, source)
    if config is None:
        return None
    if not isinstance(config.get(section), dict):
        raise VidaxError(f"{source}: the metadata config has no '{section}' section (it has "
                         f"{sorted(config)}); is this an LTX-Video release file?")
    return config[section]


def dit_config(metadata: dict[str, str], source: str):
    """The DiT config of an LTX-Video single file (``config["transformer"]``), or None."""
    from vidax.models.ltx_video.dit import LTXVideoDiTConfig

    section = _section(metadata, source, "transformer")
    return None if section is None else LTXVideoDiTConfig.from_dict(section)


def vae_config(metadata: dict[str, str], source: str):
    """The VAE config of an LTX-Video single file (``config["vae"]``), or None."""
    from vidax.models.ltx_video.vae import LTXVideoVAEConfig

    section = _section(metadata, source, "vae")
    return None if section is None else LTXVideoVAEConfig.from_dict(section)


def upsampler_config(metadata: dict[str, str], source: str):
    """The latent upsampler config (the whole metadata ``config``), or None."""
    from vidax.models.ltx_video.upsampler import LTXVideoUpsamplerConfig

    config = _metadata_config(metadata, source)
    return None if config is None else LTXVideoUpsamplerConfig.from_dict(config)


_RELEASE_FILES = ("ltxv-13b-0.9.8-dev.safetensors", "ltxv-13b-0.9.8-distilled.safetensors",
                  "ltxv-2b-0.9.8-distilled.safetensors")

register(ComponentSpec(
    model_type="ltx_video", component="dit", layout="original",
    model="vidax.models.ltx_video.dit:LTXVideoDiT",
    config="vidax.models.ltx_video.dit:LTXVideoDiTConfig",
    mapper="vidax.translator.mappings.ltx_video:DIT",
    variants={"0.9.8-13b-dev": "ltxv_13b_0_9_8_dev",
              "0.9.8-13b-distilled": "ltxv_13b_0_9_8_distilled",
              "0.9.8-2b-distilled": "ltxv_2b_0_9_8_distilled"},
    prefix="model.diffusion_model.", files=_RELEASE_FILES,
    config_from_metadata="vidax.translator.mappings.ltx_video:dit_config",
    description="LTX-Video 0.9.8 diffusion transformer (13B dev/distilled, 2B distilled), "
                "inside the single release file",
))

register(ComponentSpec(
    model_type="ltx_video", component="vae", layout="original",
    model="vidax.models.ltx_video.vae:LTXVideoVAE",
    config="vidax.models.ltx_video.vae:LTXVideoVAEConfig",
    mapper="vidax.translator.mappings.ltx_video:VAE",
    variants={"0.9.8-13b-dev": "ltxv_0_9_8", "0.9.8-13b-distilled": "ltxv_0_9_8",
              "0.9.8-2b-distilled": "ltxv_0_9_8"},
    prefix="vae.", files=_RELEASE_FILES,
    config_from_metadata="vidax.translator.mappings.ltx_video:vae_config",
    description="LTX-Video 0.9.8 causal video VAE (timestep-conditioned decoder, per-channel "
                "latent statistics), inside the single release file",
))

register(ComponentSpec(
    model_type="ltx_video", component="upsampler", layout="original",
    model="vidax.models.ltx_video.upsampler:LTXVideoLatentUpsampler",
    config="vidax.models.ltx_video.upsampler:LTXVideoUpsamplerConfig",
    mapper="vidax.translator.mappings.ltx_video:UPSAMPLER",
    variants={"0.9.8-13b-dev": "spatial_0_9_8", "0.9.8-13b-distilled": "spatial_0_9_8",
              "0.9.8-2b-distilled": "spatial_0_9_8"},
    files=("ltxv-spatial-upscaler-0.9.8.safetensors",),
    config_from_metadata="vidax.translator.mappings.ltx_video:upsampler_config",
    description="LTX-Video 0.9.8 spatial latent upscaler (multi-scale pipeline), its own file",
))


# ----------------------------------------------------------------------------- T5-v1.1-XXL
# transformers' T5EncoderModel state dict -> vidax.models.t5.T5Encoder (shared_pos=True):
# ``shared`` is the token table, the encoder's ``embed_tokens`` is the same tensor (tied;
# transformers' safetensors save drops that alias, a torch-saved .bin may keep it), and the
# relative-position table exists only in block 0, used by every block. google/t5-v1_1-xxl's
# own checkpoint is the full encoder-decoder: its decoder half is ignored.
T5_ENCODER = Mapper(
    name="t5.encoder",
    description="T5 encoder, transformers layout (T5EncoderModel / T5ForConditionalGeneration "
                "state dict)",
    rules=(
        Ignore(r"encoder\.embed_tokens\.weight",
               "tied alias of shared.weight (the same tensor; vidax reads shared.weight)"),
        Ignore(r"(decoder\..*|lm_head\.weight)",
               "decoder half of an encoder-decoder T5 checkpoint: the text encoder is the "
               "encoder only"),
        Transform(r"^(shared|encoder\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias)"
                  r"\.weight$", layout="embedding", leaf="embedding"),
        Rename(r"^shared\.", "token_embedding."),
        Rename(r"^encoder\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias\.",
               "pos_embedding.embedding."),
        Rename(r"^encoder\.final_layer_norm\.", "norm."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.", r"blocks.\1.attn."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.0\.layer_norm\.", r"blocks.\1.norm1."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.layer_norm\.", r"blocks.\1.norm2."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_0\.", r"blocks.\1.ffn.gate."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_1\.", r"blocks.\1.ffn.fc1."),
        Rename(r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wo\.", r"blocks.\1.ffn.fc2."),
    ),
)

register(ComponentSpec(
    model_type="t5", component="encoder", layout="transformers",
    model="vidax.models.t5.model:T5Encoder", config="vidax.models.t5.model:T5Config",
    mapper="vidax.translator.mappings.ltx_video:T5_ENCODER",
    variants={"t5-v1_1-xxl": "t5_v1_1_xxl"},
    files=("model.safetensors.index.json", "model*.safetensors"),
    description="T5-v1.1-XXL encoder in transformers' layout (text_encoder/ of LTX-Video, "
                "CogVideoX, PixArt, DeepFloyd IF)",
))

# The same encoder as the families' manifests name it.
_T5 = Alias("t5", "t5-v1_1-xxl", "encoder", "transformers")
alias("ltx_video", "t5-v1_1-xxl", "text_encoder", "transformers", _T5)
for _variant in ("2b", "5b", "5b-i2v", "1.5-5b", "1.5-5b-i2v"):
    alias("cogvideox", _variant, "text_encoder", "transformers", _T5)
