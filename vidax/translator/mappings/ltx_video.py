"""LTX-Video 0.9.x: the authors' single-file layout -> ``vidax.models.ltx_video`` (the text
encoder, T5-v1.1-XXL in transformers' layout, is registered in ``vidax.translator.mappings.t5``).

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

from vidax.models.ltx_video.config import (LTX2UpsamplerConfig, LTXVideoDiTConfig,
                                           LTXVideoUpsamplerConfig, LTXVideoVAEConfig)
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Ignore, Mapper, Rename
from vidax.translator.mappings.common import metadata_config, metadata_section

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

# The same VAE in LTX-2.x's release files (registered in vidax.translator.mappings.ltx2_5, at
# LTX-2's config): ltx-core's VideoEncoder / VideoDecoder keep the LTX-Video VAE's module names
# and flat block numbering, so the rules are the ones above: the two used statistics lose their
# hyphens, and the three unused ones the 19B file still stores are ignored (2.3 / 2.5 files no
# longer have them).
LTX2_VAE = Mapper(
    name="ltx2_5.vae",
    description="LTX-2.x video VAE, authors' layout (ltx-core VideoEncoder + VideoDecoder "
                "state dicts, per_channel_statistics shared)",
    rules=VAE.rules,
)

# ----------------------------------------------------------------------------- upsampler
# LatentUpsampler.state_dict(): the upsampler Sequential's conv (index 0) is named; GroupNorm
# weights -> scale and conv weights (3-D, and the per-frame 2-D one) -> channels-last kernels.
UPSAMPLER = Mapper(
    name="ltx_video.upsampler",
    description="LTX-Video latent upsampler, authors' layout (LatentUpsampler state dict)",
    rules=(Rename(r"^upsampler\.0\.", "upsampler.conv."),),
)

# LTX-2.x's upscalers (ltx-core's LatentUpsampler, the same model in vidax): the same rename
# for the plain pixel-shuffle files; the rational resampler's upsampler.conv.* and its
# persistent buffer upsampler.blur_down.kernel [1, 1, 5, 5] already carry vidax's names (the
# kernel is loaded as stored and used as ltx-core uses it: a depthwise blur at stride > 1).
LTX2_UPSAMPLER = Mapper(
    name="ltx2_5.upsampler",
    description="LTX-2.x latent upscaler, authors' layout (ltx-core LatentUpsampler state "
                "dict, bare keys)",
    rules=UPSAMPLER.rules,
)


# ----------------------------------------------------------------------------- metadata
def _section(metadata: dict[str, str], source: str, section: str) -> dict | None:
    return metadata_section(metadata, source, section, "an LTX-Video release file")


def dit_config(metadata: dict[str, str], source: str):
    """The DiT config of an LTX-Video single file (``config["transformer"]``), or None."""
    section = _section(metadata, source, "transformer")
    return None if section is None else LTXVideoDiTConfig.from_dict(section)


def vae_config(metadata: dict[str, str], source: str):
    """The VAE config of an LTX-Video single file (``config["vae"]``), or None."""
    section = _section(metadata, source, "vae")
    return None if section is None else LTXVideoVAEConfig.from_dict(section)


def upsampler_config(metadata: dict[str, str], source: str):
    """The latent upsampler config (the whole metadata ``config``), or None."""
    config = metadata_config(metadata, source)
    return None if config is None else LTXVideoUpsamplerConfig.from_dict(config)


def ltx2_upsampler_config(metadata: dict[str, str], source: str):
    """An LTX-2.x upscaler file's config: its whole metadata ``config`` (what ltx-core's
    ``SafetensorsModelStateDictLoader.metadata`` hands ``LatentUpsamplerConfigurator``), or
    None."""
    config = metadata_config(metadata, source)
    return None if config is None else LTX2UpsamplerConfig.from_dict(config)


_RELEASE_FILES = ("ltxv-13b-0.9.8-dev.safetensors", "ltxv-13b-0.9.8-distilled.safetensors",
                  "ltxv-2b-0.9.8-distilled.safetensors")

register(ComponentSpec(
    model_type="ltx_video", component="dit", layout="original",
    model="vidax.models.ltx_video.dit:LTXVideoDiT",
    config="vidax.models.ltx_video.config:LTXVideoDiTConfig",
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
    config="vidax.models.ltx_video.config:LTXVideoVAEConfig",
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
    config="vidax.models.ltx_video.config:LTXVideoUpsamplerConfig",
    mapper="vidax.translator.mappings.ltx_video:UPSAMPLER",
    variants={"0.9.8-13b-dev": "spatial_0_9_8", "0.9.8-13b-distilled": "spatial_0_9_8",
              "0.9.8-2b-distilled": "spatial_0_9_8"},
    files=("ltxv-spatial-upscaler-0.9.8.safetensors",),
    config_from_metadata="vidax.translator.mappings.ltx_video:upsampler_config",
    description="LTX-Video 0.9.8 spatial latent upscaler (multi-scale pipeline), its own file",
))

# LTX-2 / 2.3 / 2.5 latent upscalers: one file each, bare keys, the config in the metadata.
# Variants: the release and the file (their manifests: tests/models/ltx2_5/manifests/).
LTX2_UPSCALER_FILES = {
    "2.0-spatial-x2": "ltx-2-spatial-upscaler-x2-1.0.safetensors",
    "2.0-temporal-x2": "ltx-2-temporal-upscaler-x2-1.0.safetensors",
    "2.3-spatial-x2-1.0": "ltx-2.3-spatial-upscaler-x2-1.0.safetensors",
    "2.3-spatial-x2-1.1": "ltx-2.3-spatial-upscaler-x2-1.1.safetensors",
    "2.3-spatial-x1.5": "ltx-2.3-spatial-upscaler-x1.5-1.0.safetensors",
    "2.3-temporal-x2": "ltx-2.3-temporal-upscaler-x2-1.0.safetensors",
    "2.5-spatial-x2": "ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors",
    "2.5-temporal-x2": "ltx-2.5-latent-temporal-upscaler-x2-bf16-1.0.safetensors",
}
LTX2_UPSCALER_PRESETS = {
    "2.0-spatial-x2": "spatial_x2_rational", "2.0-temporal-x2": "temporal_x2",
    "2.3-spatial-x2-1.0": "spatial_x2_rational", "2.3-spatial-x2-1.1": "spatial_x2",
    "2.3-spatial-x1.5": "spatial_x1_5", "2.3-temporal-x2": "temporal_x2",
    "2.5-spatial-x2": "spatial_x2", "2.5-temporal-x2": "temporal_x2",
}

register(ComponentSpec(
    model_type="ltx2_5", component="upsampler", layout="original",
    model="vidax.models.ltx_video.upsampler:LTXVideoLatentUpsampler",
    config="vidax.models.ltx_video.config:LTX2UpsamplerConfig",
    mapper="vidax.translator.mappings.ltx_video:LTX2_UPSAMPLER",
    variants=LTX2_UPSCALER_PRESETS,
    files=tuple(LTX2_UPSCALER_FILES.values()),
    config_from_metadata="vidax.translator.mappings.ltx_video:ltx2_upsampler_config",
    description="LTX-2 / 2.3 / 2.5 latent upscalers (spatial x2, x1.5, temporal x2; ltx-core "
                "LatentUpsampler, the LTX-Video model plus the rational resampler), one file "
                "each",
))
