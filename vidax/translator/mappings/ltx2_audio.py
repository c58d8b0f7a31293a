"""LTX-2.x's audio VAE and vocoders in the authors' layout -> :mod:`vidax.models.ltx2_audio`:
the ``audio_vae.`` and ``vocoder.`` parts of the 2.0 / 2.3 single files and of LTX-2.5's
``ltx-2.5-audio-vae-bf16.safetensors`` (both prefixes kept in that file), each configured from
the file's ``__metadata__["config"]`` (``audio_vae`` / ``vocoder`` sections), as ltx-core's
configurators read them. Registered under the ``ltx2_5`` model type."""

from __future__ import annotations

from vidax.models.ltx2_audio.config import LTX2AudioVAEConfig, LTX2VocoderConfig
from vidax.registry import ComponentSpec, register
from vidax.translator.mapping import Ignore, Mapper, Rename, Transform
from vidax.translator.mappings.common import metadata_section


# ----------------------------------------------------------------------------- audio VAE
# ltx-core's AudioEncoder / AudioDecoder state dicts (``audio_vae.encoder.*`` /
# ``audio_vae.decoder.*``) and the statistics both of them load
# (``audio_vae.per_channel_statistics.*``, ltx-core's AUDIO_VAE_{ENCODER,DECODER}_COMFY_KEYS_FILTER)
# -> vidax.models.ltx2_audio.audio_vae.LTX2AudioVAE, whose module names are ltx-core's. The
# converter makes the Conv2d weights channels-last kernels; the statistics lose their hyphens.
# The monoliths (2.0, 2.3) and LTX-2.5's ``ltx-2.5-audio-vae-bf16`` (audio VAE + vocoder) keep
# the ``audio_vae.`` prefix; the vocoder's ``vocoder.*`` keys lie outside it.
AUDIO_VAE = Mapper(
    name="ltx2_5.audio_vae",
    description="LTX-2.x audio VAE, authors' layout (ltx-core AudioEncoder + AudioDecoder "
                "state dicts, per_channel_statistics shared)",
    rules=(
        Rename(r"^per_channel_statistics\.mean-of-means$", "per_channel_statistics.mean_of_means"),
        Rename(r"^per_channel_statistics\.std-of-means$", "per_channel_statistics.std_of_means"),
    ),
)


def audio_vae_config(metadata: dict[str, str], source: str):
    """The audio VAE config of an LTX-2.x release file (``config["audio_vae"]``), or None."""
    section = metadata_section(metadata, source, "audio_vae", "an LTX-2 release or audio VAE file")
    return None if section is None else LTX2AudioVAEConfig.from_dict(section)


register(ComponentSpec(
    model_type="ltx2_5", component="audio_vae", layout="original",
    model="vidax.models.ltx2_audio.audio_vae:LTX2AudioVAE",
    config="vidax.models.ltx2_audio.config:LTX2AudioVAEConfig",
    mapper="vidax.translator.mappings.ltx2_audio:AUDIO_VAE",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_19b", "2.3-22b-distilled": "ltx2_19b", "2.5": "ltx2_19b"},
    prefix="audio_vae.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2-19b-dev-fp8.safetensors", "ltx-2-19b-distilled-fp8.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-dev-fp8.safetensors",
           "ltx-2.3-22b-distilled*.safetensors",
           "ltx-2.5-audio-vae*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_audio:audio_vae_config",
    description="LTX-2.x audio VAE (stereo log-mel <-> 8 x 16 latents, causal in time) with "
                "its per-channel latent statistics, in the release file or LTX-2.5's audio file",
))


# ----------------------------------------------------------------------------- vocoders
# (imports kept in this section so that the shared header stays untouched; hoist on merge)

# The file keys are "vocoder." + ltx-core's module keys (VOCODER_COMFY_KEYS_FILTER strips one
# "vocoder."): the 19B HiFi-GAN's bare Vocoder keys (conv_pre, ups.i, resblocks.j, conv_post),
# or VocoderWithBWE's vocoder.*, bwe_generator.*, mel_stft.*. vidax's LTX2Vocoder always
# holds the generator as `vocoder`, so the 19B keys move under it. ConvTranspose1d weights
# are [in, out, k]: the converter's conv_transpose layout (-> [k, in, out]). Conv1d weights
# take the automatic conv layout; SnakeBeta alpha/beta, the anti-alias filters [1, 1, 12] and
# the STFT / mel bases keep their names and shapes.
VOCODER = Mapper(
    name="ltx2_5.vocoder",
    description="LTX-2.x vocoder, authors' layout (ltx-core Vocoder, or VocoderWithBWE: "
                "vocoder + bwe_generator + mel_stft)",
    rules=(
        Ignore(r"mel_stft\.stft_fn\.inverse_basis",
               "the inverse STFT basis: ltx-core's VocoderWithBWE never uses it"),
        Transform(r"(^|\.)ups\.\d+\.weight$", layout="conv_transpose"),
        Rename(r"^(conv_pre|ups|resblocks|act_post|conv_post)\.", r"vocoder.\1."),
    ),
)


def vocoder_config(metadata: dict[str, str], source: str):
    """The vocoder config of an LTX-2.x release file (``config["vocoder"]``: the 2.0 / 2.3
    monoliths, LTX-2.5's audio file), or None."""
    section = metadata_section(metadata, source, "vocoder", "an LTX-2 file with a vocoder")
    return None if section is None else LTX2VocoderConfig.from_dict(section)


register(ComponentSpec(
    model_type="ltx2_5", component="vocoder", layout="original",
    model="vidax.models.ltx2_audio.vocoder:LTX2Vocoder",
    config="vidax.models.ltx2_audio.config:LTX2VocoderConfig",
    mapper="vidax.translator.mappings.ltx2_audio:VOCODER",
    variants={"2.0-19b-dev": "ltx2_19b", "2.0-19b-distilled": "ltx2_19b",
              "2.3-22b-dev": "ltx2_3_22b", "2.3-22b-distilled": "ltx2_3_22b",
              "2.5": "ltx2_3_22b"},
    prefix="vocoder.",
    files=("ltx-2-19b-dev.safetensors", "ltx-2-19b-distilled.safetensors",
           "ltx-2-19b-dev-fp8.safetensors", "ltx-2-19b-distilled-fp8.safetensors",
           "ltx-2.3-22b-dev.safetensors", "ltx-2.3-22b-dev-fp8.safetensors",
           "ltx-2.3-22b-distilled*.safetensors",
           "ltx-2.5-audio-vae*.safetensors"),
    config_from_metadata="vidax.translator.mappings.ltx2_audio:vocoder_config",
    description="LTX-2.x vocoder: HiFi-GAN to 24 kHz (19B), BigVGAN-v2 + bandwidth extension "
                "to 48 kHz (2.3, 2.5), inside the release file (2.5: the audio VAE file)",
))
