"""LTX-2.x (LTX-2 19B, LTX-2.3 22B, LTX-2.5 22B): the authors' single-file layout ->
``vidax.models.ltx2_5.dit``.

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
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Mapper, Rename
from vidax.translator.mappings.ltx_video import VAE as LTX_VIDEO_VAE
from vidax.translator.mappings.ltx_video import _metadata_config

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
    from vidax.models.ltx2_5.dit import LTX2DiTConfig

    config = _metadata_config(metadata, source)
    if config is None:
        return None
    if not isinstance(config.get("transformer"), dict):
        raise VidaxError(f"{source}: the metadata config has no 'transformer' section (it has "
                         f"{sorted(config)}); is this an LTX-2 DiT release file?")
    return LTX2DiTConfig.from_dict(config["transformer"])


register(ComponentSpec(
    model_type="ltx2_5", component="dit", layout="original",
    model="vidax.models.ltx2_5.dit:LTX2DiT",
    config="vidax.models.ltx2_5.dit:LTX2DiTConfig",
    mapper="vidax.translator.mappings.ltx2_5:DIT",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b",
              "2.5-22b-dev": "ltx2_5_22b", "2.5-22b-distilled": "ltx2_5_22b"},
    prefix="model.diffusion_model.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-distilled*.safetensors",
           "ltx-2.5-22b-*-transformer*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_5:dit_config",
    description="LTX-2.x audio-video diffusion transformer with its two text connectors "
                "(19B; 2.3 and 2.5 22B), inside the release file",
))


# ----------------------------------------------------------------------------- VAE
# ltx-core's VideoEncoder / VideoDecoder keep the LTX-Video VAE's module names and flat block
# numbering, so the model is vidax.models.ltx_video.vae.LTXVideoVAE (configured by
# vidax.models.ltx2_5.vae) and the rules are LTX-Video's: the two used statistics lose their
# hyphens, and the three unused ones the 19B file still stores are ignored (2.3 / 2.5 files
# no longer have them). The 2.0 / 2.3 monoliths store the VAE under ``vae.``; LTX-2.5's conv
# VAE file has bare keys.
VAE = Mapper(
    name="ltx2_5.vae",
    description="LTX-2.x video VAE, authors' layout (ltx-core VideoEncoder + VideoDecoder "
                "state dicts, per_channel_statistics shared)",
    rules=LTX_VIDEO_VAE.rules,
)


def vae_config(metadata: dict[str, str], source: str):
    """The video VAE config of an LTX-2.x release file (``config["vae"]``), or None."""
    from vidax.models.ltx2_5.vae import LTX2VideoVAEConfig

    config = _metadata_config(metadata, source)
    if config is None:
        return None
    if not isinstance(config.get("vae"), dict):
        raise VidaxError(f"{source}: the metadata config has no 'vae' section (it has "
                         f"{sorted(config)}); is this an LTX-2 video VAE release file?")
    return LTX2VideoVAEConfig.from_dict(config["vae"])


register(ComponentSpec(
    model_type="ltx2_5", component="vae", layout="original",
    model="vidax.models.ltx_video.vae:LTXVideoVAE",
    config="vidax.models.ltx2_5.vae:LTX2VideoVAEConfig",
    mapper="vidax.translator.mappings.ltx2_5:VAE",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b"},
    prefix="vae.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-distilled*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_5:vae_config",
    description="LTX-2 (19B) and LTX-2.3 (22B) causal video VAE with its per-channel latent "
                "statistics, inside the release file",
))

register(ComponentSpec(
    model_type="ltx2_5", component="video_vae_conv", layout="original",
    model="vidax.models.ltx_video.vae:LTXVideoVAE",
    config="vidax.models.ltx2_5.vae:LTX2VideoVAEConfig",
    mapper="vidax.translator.mappings.ltx2_5:VAE",
    variants={"2.5": "ltx2_3_22b"},
    files=("ltx-2.5-video-vae-conv*.safetensors",),
    config_from_metadata="vidax.translator.mappings.ltx2_5:vae_config",
    description="LTX-2.5 causal video VAE with the conv decoder (the 2.3 architecture), its "
                "own file with bare keys",
))
