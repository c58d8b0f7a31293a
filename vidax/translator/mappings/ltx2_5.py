"""LTX-2.x (LTX-2 19B, LTX-2.3 22B, LTX-2.5 22B): the authors' single-file layout ->
``vidax.models.ltx2_5.dit``, and its text projection (``vidax.models.ltx2_5.text``); the video
VAE is LTX-Video's model, whose mappers are in ``vidax.translator.mappings.ltx_video``.

The 2.0 and 2.3 releases are one file per model (``ltx-2-19b-dev.safetensors``, ...) holding
the DiT under ``model.diffusion_model.``, next to ``text_embedding_projection.``, ``vae.``,
``audio_vae.`` and ``vocoder.``; 2.5 ships the transformer alone
(``ltx-2.5-22b-*-transformer-bf16``) with the same prefix. The two text connectors
(``{video,audio}_embeddings_connector.*``) are stored inside that prefix and are part of
vidax's DiT tree (``LTX2DiT.connect_text``). ltx-core builds every model from the file's
``__metadata__["config"]``; its ``transformer`` section is the DiT's config here too
(``ComponentSpec.config_from_metadata``), read as LTX-Video's single files are.
"""

from __future__ import annotations

from vidax.errors import VidaxError
from vidax.models.ltx2_5.config import (LTX2DiTConfig, LTX2TextProjectionConfig,
                                        LTX2VideoVAEConfig)
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper, Rename
from vidax.translator.mappings.common import metadata_config, metadata_section

# Module names are ltx-core's (vidax.models.ltx2_5.dit); two nn.Sequential indices become names.
# The converter does the rest: Linear weights transposed, q/k norm weights -> scale; the
# scale_shift_tables, learnable_registers and keyframes_abs_pos_embedding pass unchanged.
DIT = Mapper(
    name="ltx2_5.dit",
    description="LTX-2.x audio-video DiT + text connectors, authors' layout (ltx-core LTXModel "
                "and Embeddings1DConnector state dicts)",
    rules=(
        Rename(r"\.to_out\.0\.", ".to_out."),
        Rename(r"ff\.net\.0\.proj\.", "ff.proj_in."),       # ff and audio_ff
        Rename(r"ff\.net\.2\.", "ff.proj_out."),
    ),
)


def dit_config(metadata: dict[str, str], source: str):
    """The DiT config of an LTX-2.x release file (``config["transformer"]``), or None."""
    section = metadata_section(metadata, source, "transformer", "an LTX-2 DiT release file")
    return None if section is None else LTX2DiTConfig.from_dict(section)


register(ComponentSpec(
    model_type="ltx2_5", component="dit", layout="original",
    model="vidax.models.ltx2_5.dit:LTX2DiT",
    config="vidax.models.ltx2_5.config:LTX2DiTConfig",
    mapper="vidax.translator.mappings.ltx2_5:DIT",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b",
              "2.5-22b-dev": "ltx2_5_22b", "2.5-22b-distilled": "ltx2_5_22b"},
    prefix="model.diffusion_model.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2-19b-dev-fp8.safetensors", "ltx-2-19b-distilled-fp8.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-dev-fp8.safetensors",
           "ltx-2.3-22b-distilled*.safetensors",
           "ltx-2.5-22b-*-transformer*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_5:dit_config",
    description="LTX-2.x audio-video diffusion transformer with its two text connectors "
                "(19B; 2.3 and 2.5 22B), inside the release file",
))


# ----------------------------------------------------------------------------- VAE
# The model is vidax.models.ltx_video.vae.LTXVideoVAE (configured by
# vidax.models.ltx2_5.config.LTX2VideoVAEConfig), so its mapper (``ltx2_5.vae``: LTX-Video's
# rules) is the LTX-Video VAE's other layout, in vidax.translator.mappings.ltx_video. The
# 2.0 / 2.3 monoliths store the VAE under ``vae.``; LTX-2.5's conv VAE file has bare keys.


def vae_config(metadata: dict[str, str], source: str):
    """The video VAE config of an LTX-2.x release file (``config["vae"]``), or None."""
    section = metadata_section(metadata, source, "vae", "an LTX-2 video VAE release file")
    return None if section is None else LTX2VideoVAEConfig.from_dict(section)


register(ComponentSpec(
    model_type="ltx2_5", component="vae", layout="original",
    model="vidax.models.ltx_video.vae:LTXVideoVAE",
    config="vidax.models.ltx2_5.config:LTX2VideoVAEConfig",
    mapper="vidax.translator.mappings.ltx_video:LTX2_VAE",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b"},
    prefix="vae.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2-19b-dev-fp8.safetensors", "ltx-2-19b-distilled-fp8.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-dev-fp8.safetensors",
           "ltx-2.3-22b-distilled*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_5:vae_config",
    description="LTX-2 (19B) and LTX-2.3 (22B) causal video VAE with its per-channel latent "
                "statistics, inside the release file",
))

register(ComponentSpec(
    model_type="ltx2_5", component="video_vae_conv", layout="original",
    model="vidax.models.ltx_video.vae:LTXVideoVAE",
    config="vidax.models.ltx2_5.config:LTX2VideoVAEConfig",
    mapper="vidax.translator.mappings.ltx_video:LTX2_VAE",
    variants={"2.5": "ltx2_3_22b"},
    files=("ltx-2.5-video-vae-conv*.safetensors",),
    config_from_metadata="vidax.translator.mappings.ltx2_5:vae_config",
    description="LTX-2.5 causal video VAE with the conv decoder (the 2.3 architecture), its "
                "own file with bare keys",
))


# ------------------------------------------------------------- text projection
# Text projection (``ltx2_5`` / ``text_projection``, layout ``original``): the
# ``text_embedding_projection.*`` tensors of the LTX-2 19B and LTX-2.3 monoliths (and of
# LTX-2.5's text-encoder file), whose names are ltx-core's ``FeatureExtractorV1/V2``
# attributes. The version and sizes come from the file's ``__metadata__`` DiT config, as
# ltx-core decides them.
# Names are ltx-core's FeatureExtractorV1/V2 attributes, which vidax's module keeps; the
# converter transposes the Linear weights.
TEXT_PROJECTION = Mapper(
    name="ltx2_5.text_projection",
    description="LTX-2.x text embedding projection, authors' layout (ltx-core "
                "FeatureExtractorV1 aggregate_embed / V2 {video,audio}_aggregate_embed)",
    rules=(),
)


def text_projection_config(metadata: dict[str, str], source: str):
    """The projection config of an LTX-2.x release file, from its metadata DiT config
    (``config["transformer"]``), or None where the file carries none (LTX-2.5's text-encoder
    file: pass ``variant="2.5"``)."""
    config = metadata_config(metadata, source)
    if config is None:
        return None
    if not isinstance(config.get("transformer"), dict):
        raise VidaxError(f"{source}: the metadata config has no 'transformer' section (it has "
                         f"{sorted(config)}), which decides the text projection's version; is "
                         "this an LTX-2 release file?")
    return LTX2TextProjectionConfig.from_dict(config["transformer"])


register(ComponentSpec(
    model_type="ltx2_5", component="text_projection", layout="original",
    model="vidax.models.ltx2_5.text:LTX2TextProjection",
    config="vidax.models.ltx2_5.config:LTX2TextProjectionConfig",
    mapper="vidax.translator.mappings.ltx2_5:TEXT_PROJECTION",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b",
              "2.5": "ltx2_3_22b"},
    prefix="text_embedding_projection.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2-19b-dev-fp8.safetensors", "ltx-2-19b-distilled-fp8.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-dev-fp8.safetensors",
           "ltx-2.3-22b-distilled*.safetensors",
           "gemma4-12b-with-proj-ltx-2.5*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_5:text_projection_config",
    description="LTX-2.x text embedding projection (Gemma hidden states -> the connectors' "
                "input; V1 in the 19B, V2 in 2.3 and 2.5), inside the release file",
))


# ------------------------------------------------------------ 2.5 diffusion decoder
# ``ltx-2.5-video-vae-bf16`` (``CausalDiffusionVAE``, bare keys): the conv VAE's encoder and
# statistics (LTX-Video's VAE rules) and the NA diffusion decoder, renamed as the authors'
# loader does (ltx-core @400fd31 model_configurator.py ``_build_diffusion_vae_decoder_sd_ops``):
# the fused ``attn.qkv`` [3C, C] split q | k | v into ``attn.qkv.to_{q,k,v}``,
# ``t_embedder.mlp.0 / .2`` -> ``t_embedder.timestep_embedder.linear_1 / linear_2``. The
# ChannelLinears (conv_in, conv_in_x_t, conv_out) and upsample projections are Linear weights.
from vidax.models.ltx2_5.config import LTX2DiffusionVAEConfig  # noqa: E402
from vidax.translator.mapping import Ignore, Split  # noqa: E402
from vidax.translator.mappings.ltx_video import VAE as _LTX_VIDEO_VAE  # noqa: E402

DIFFUSION_VAE = Mapper(
    name="ltx2_5.video_vae",
    description="LTX-2.5 diffusion video VAE, authors' layout (ltx-core VideoEncoder + "
                "DiffusionVideoDecoder state dicts, fused qkv, per_channel_statistics)",
    rules=(
        *_LTX_VIDEO_VAE.rules,
        Ignore(r"decoder\.type_emb",
               "not a parameter of the authors' DiffusionVideoDecoder (ltx-core @400fd31), "
               "whose non-strict loader drops it; diffusers' converter has no slot for it"),
        Ignore(r"decoder\.coarse_.*",
               "preview/coarse heads the authors' loader drops (_drop_coarse_param)"),
        Split(r"(decoder\.(?:det_stages\.\d+\.\d+|diff_blocks\.\d+)\.attn)\.qkv\.(weight|bias)",
              (r"\1.qkv.to_q.\2", r"\1.qkv.to_k.\2", r"\1.qkv.to_v.\2")),
        Rename(r"^decoder\.t_embedder\.mlp\.0\.", "decoder.t_embedder.timestep_embedder.linear_1."),
        Rename(r"^decoder\.t_embedder\.mlp\.2\.", "decoder.t_embedder.timestep_embedder.linear_2."),
    ),
)


def diffusion_vae_config(metadata: dict[str, str], source: str):
    """The diffusion VAE config of ``ltx-2.5-video-vae-bf16`` (``config["vae"]``), or None."""
    section = metadata_section(metadata, source, "vae", "LTX-2.5's diffusion video VAE file")
    return None if section is None else LTX2DiffusionVAEConfig.from_dict(section)


register(ComponentSpec(
    model_type="ltx2_5", component="video_vae", layout="original",
    model="vidax.models.ltx2_5.diffusion_decoder:LTX2DiffusionVAE",
    config="vidax.models.ltx2_5.config:LTX2DiffusionVAEConfig",
    mapper="vidax.translator.mappings.ltx2_5:DIFFUSION_VAE",
    variants={"2.5": "ltx2_5"},
    files=("ltx-2.5-video-vae-bf16*.safetensors",),
    config_from_metadata="vidax.translator.mappings.ltx2_5:diffusion_vae_config",
    description="LTX-2.5 video VAE with the neighborhood-attention diffusion decoder "
                "(CausalDiffusionVAE; the conv VAE's encoder), its own file with bare keys",
))
