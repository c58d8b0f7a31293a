"""LTX-2.x (LTX-2 19B, LTX-2.3 22B, LTX-2.5 22B): text (and an image) -> video with its sound.

What the authors' ``ltx-pipelines`` 1.0.0 does (``ti2vid_one_stage.py``, ``distilled.py``,
``utils/helpers.py``, ``utils/samplers.py``, ``utils/constants.py``), on vidax's skeleton:

* the prompt is stripped, tokenized by Gemma's tokenizer with left padding to 1024 tokens, run
  through Gemma (every hidden state), the text embedding projection and the DiT's two
  connectors -> a video and an audio context (``encode_prompts``);
* the video latent grid ``[(F - 1) / 8 + 1, H / 32, W / 32, 128]`` and the audio latents
  ``[round(25 F / fps), 8, 16]`` become one token sequence per stream; vidax samples both as one
  array ``[1, Tv + Ta, 128]`` (video tokens first), which the step splits for the DiT;
* an image (``image``, first frame) replaces the first latent frame's tokens, which then keep
  ``denoise_mask = 1 - strength`` (``VideoConditionByLatentIndex``): their timestep is
  ``mask * sigma`` and the step blends them back to the clean latent (``post_process_latent``);
* Euler over sigmas (``EulerDiffusionStep``: the DiT's velocity turned into ``x0 = x - v t``,
  guided in x0 space, then ``x + (sigma' - sigma) (x - x0) / sigma``);
* **distilled** (``DistilledPipeline``): stage 1 at half the size with
  ``DISTILLED_SIGMA_VALUES``, the latent spatial upsampler (un-normalised latents, x2), then
  stage 2 at full size from the upsampled video and the stage-1 audio re-noised to
  ``STAGE_2_DISTILLED_SIGMA_VALUES[0]`` (``noise_scale``), no guidance. Without an upsampler
  file (or ``stages=1``) it runs stage 1 alone at the full size;
* **dev** (``TI2VidOneStagePipeline``): ``LTX2Scheduler`` sigmas (token-count shift anchored at
  4096 tokens, stretched to 0.1) and ``MultiModalGuider`` per stream: the conditioned pass,
  the negative prompt (CFG), the self-attention of ``stg_blocks`` skipped (STG) and the
  audio<->video attention skipped (modality guidance), combined as
  ``c + (cfg - 1)(c - u) + stg (c - p) + (mod - 1)(c - m)`` then rescaled by
  ``r std(c) / std(pred) + 1 - r``;
* **dev two-stage** (``TI2VidTwoStagesPipeline``, ``ti2vid_two_stages.py``): stage 1 as dev
  at half the size, the upsampler, then stage 2 as the distilled one (``STAGE_2_SIGMAS``,
  re-noised, positive context only, no guidance) on the dev DiT plus the distilled LoRA
  (``ltx-2*-distilled-lora*.safetensors`` in the folder, or ``distilled_lora=`` /
  ``--distilled-lora FILE[:STRENGTH]``, strength default 1). vidax keeps one DiT: the LoRA
  is live at strength 0 and set to its strength for stage 2 only (the authors build a second
  transformer with the LoRA fused; ltx-core fuses ``B @ A`` times the strength, no alpha);
* decoding: the video VAE on the normalised latents (2.5: the diffusion decoder or the conv
  one; the conv one in ltx-core's ``TilingConfig.default()`` tiles where they split the
  latent, as the authors' distilled and two-stage ``main()`` do:
  :mod:`vidax.pipelines.ltx_tiles`), the audio VAE to a stereo mel spectrogram, the vocoder
  to the waveform.

The files: 2.0 / 2.3's single file (DiT, video and audio VAEs, vocoder, text projection; the
configs in its ``__metadata__``) beside the Gemma 3 folder; 2.5's split files (transformer,
``vae/`` video and audio files, ``text_encoders/`` Gemma 4 with projection, tokenizer and
config). Optional: the latent upsampler (stage 2), the distilled LoRA (dev stage 2). Options,
defaults and the request: ltx2_5_request.py; overrides: overrides.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import lora as _lora
from vidax import loading, registry
from vidax.errors import VidaxError
from vidax.models.ltx2_5.dit import Modality, Perturbations, audio_positions, video_positions
from vidax.models.ltx2_audio import audio_vae
from vidax.pipelines import base, ltx_tiles, memory, overrides
from vidax.pipelines.base import PipelineBase, Run, open_folder
from vidax.pipelines.image import h264_round_trip, resize_bilinear
from vidax.pipelines.inputs import load_image, seed_key
from vidax.pipelines.ltx2_5_request import (  # noqa: F401  (re-exported)
    AUDIO_LATENTS_PER_SECOND,
    DEFAULT_NEGATIVE_PROMPT,
    DISTILLED_SIGMAS,
    SPATIAL,
    STAGE_2_SIGMAS,
    TEMPORAL,
    VERSIONS,
    Defaults,
    Guider,
    Kind,
    Request,
    _guide,
    _rows,
    default_guiders,
    defaults_for,
)
from vidax.schedulers.flow_euler import FlowMatchEulerScheduler, ltx2_sigmas
from vidax.translator.io import open_checkpoint

MODEL_TYPE = "ltx2_5"
TASKS = ("t2av", "i2av")
COMPONENT_OPTIONS = {"dit": "dit", "vae": "vae", "text_encoder": "text_encoder"}  # overrides.py
VARIANTS = ("2.0-19b-dev", "2.0-19b-distilled", "2.3-22b-dev", "2.3-22b-distilled",
            "2.5-22b-dev", "2.5-22b-distilled")
TEXT_LEN = 1024                       # ltx-core's LTXVGemmaTokenizer(tokenizer_root, 1024)
# the distilled LoRA of the dev two-stage pipeline (ltx-2-19b-distilled-lora-384, ...)
DISTILLED_LORA = "ltx-2*-distilled-lora*.safetensors"

@dataclass(frozen=True)
class Release(base.Release):
    """An LTX-2.x release (:class:`vidax.pipelines.base.Release`): ``version`` "2.0" / "2.3" /
    "2.5", the DiT file's metadata (``gemma_source_checkpoint``, ...)."""

    version: str = "2.3"
    metadata: dict = dataclasses.field(default_factory=dict)
    distilled_lora: _lora.LoraSpec | None = None     # the dev two-stage pipeline's stage-2 LoRA

    @property
    def has_upsampler(self) -> bool:
        return "upsampler" in self.specs

    @property
    def two_stage_dev(self) -> bool:
        """A dev release that runs the authors' two stages: the upsampler and the LoRA."""
        return self.has_upsampler and self.distilled_lora is not None


def with_distilled_lora(release: Release, lora) -> Release:
    """``release`` with its dev two-stage LoRA ``lora`` (a path, ``"FILE[:STRENGTH]"``, a
    ``(path, strength)`` pair or a :class:`~vidax.lora.LoraSpec`; strength default 1.0, the
    authors' ``DEFAULT_LORA_STRENGTH``), which must exist; None: unchanged."""
    if lora is None:
        return release
    (spec,) = _lora.as_specs([lora])
    if release.variant.endswith("distilled"):
        raise VidaxError(f"--distilled-lora {spec.path}: {release.variant} is a distilled "
                         "release already; the LoRA refines the dev model's stage 2")
    if not Path(spec.path).is_file():
        raise VidaxError(f"--distilled-lora {spec.path}: no such file (the distilled LoRA of "
                         "the dev two-stage pipeline, ltx-2*-distilled-lora*.safetensors)")
    if spec.expert is not None:
        raise VidaxError(f"--distilled-lora {lora}: '@{spec.expert}' picks a Wan2.2 expert")
    return dataclasses.replace(release, distilled_lora=spec)


def _one(folder: Path, patterns, what: str) -> Path | None:
    """The one file of ``folder`` matching ``patterns`` (None: none; two: an error)."""
    found = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    if len(found) > 1:
        raise VidaxError(f"{folder} holds {len(found)} {what} files "
                         f"({', '.join(p.name for p in found)}); keep one per folder")
    return found[0] if found else None


def _version(config) -> str:
    """2.0 (6-row AdaLN), 2.3 (9 rows, video FFN bias) or 2.5 (no video FFN bias)."""
    if not config.cross_attention_adaln:
        return "2.0"
    return "2.3" if config.ff_bias else "2.5"


def _gemma_folder(folder: Path) -> Path | None:
    """The Gemma 3 folder of a 2.0 / 2.3 release: a subfolder with a ``gemma3`` config.json."""
    import json

    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        cfg = sub / "config.json"
        if cfg.is_file():
            try:
                model_type = json.loads(cfg.read_text()).get("model_type", "")
            except (OSError, ValueError):
                continue
            if str(model_type).startswith("gemma3"):
                return sub
    return None


def inspect_folder(folder, variant: str | None = None, distilled_lora=None) -> Release:
    """Every component of an LTX-2.x release folder, without reading a weight.

    2.0 / 2.3: ``ltx-2-19b-{dev,distilled}.safetensors`` or ``ltx-2.3-22b-*.safetensors`` (the
    single file) and the Gemma 3 folder (any subfolder whose ``config.json`` is ``gemma3``:
    ``gemma-3-12b-it-qat-q4_0-unquantized/``). 2.5: ``ltx-2.5-22b-*-transformer*.safetensors``,
    ``vae/ltx-2.5-video-vae-*.safetensors`` (the diffusion decoder's file and/or the conv
    one), ``vae/ltx-2.5-audio-vae*.safetensors``, ``text_encoders/gemma4-12b-with-proj-ltx-2.5*``.
    Optional everywhere: ``ltx-2*-spatial-upscaler-*.safetensors`` (stage 2) and, for dev,
    ``ltx-2*-distilled-lora*.safetensors`` (stage 2's LoRA; ``distilled_lora``: another
    file, :func:`with_distilled_lora`)."""
    folder = open_folder(folder, "LTX-2", VARIANTS, variant, "ltx-2*.safetensors and Gemma")
    dit_spec = registry.get(MODEL_TYPE, "dit")
    up_patterns = registry.get(MODEL_TYPE, "upsampler").files
    dit_files = [p for p in sorted({p for pat in dit_spec.files for p in folder.glob(pat)})
                 if not any(p.match(u) for u in (*up_patterns, DISTILLED_LORA))]
    dit_files = [overrides.path_for("dit")] if overrides.given("dit") else dit_files
    if len(dit_files) != 1:
        raise VidaxError(
            f"{folder} is not an LTX-2 release folder: " + (
                f"it holds {len(dit_files)} DiT files ({', '.join(p.name for p in dit_files)}); "
                "keep one per folder" if dit_files else
                "missing the DiT file (ltx-2-19b-dev.safetensors, ltx-2.3-22b-*.safetensors "
                "or ltx-2.5-22b-*-transformer*.safetensors). Nothing was loaded."))
    dit_file = dit_files[0]
    with open_checkpoint(dit_file) as ckpt:
        metadata = dict(ckpt.metadata or {})
    keys: dict[Path, list[str]] = {}      # each file's tensor names, read once
    dit_config = loading.resolve_config(dit_spec, dit_file)
    version = _version(dit_config)
    files, specs, configs, missing = {}, {}, {}, []

    def add(key, component, path, what, *, layout=None):
        if path is None:
            missing.append(what)
            return
        spec = registry.get(*component, layout=layout) if layout else registry.get(*component)
        if spec.prefix and Path(path).is_file():
            if path not in keys:
                with open_checkpoint(path) as ckpt:
                    keys[path] = list(ckpt)
            _check_prefix(path, keys[path], spec.prefix, what)
        files[key], specs[key] = path, spec
        configs[key] = loading.resolve_config(spec, path)

    add("dit", (MODEL_TYPE, "dit"), dit_file, "the DiT")
    if version in ("2.0", "2.3"):
        for key in ("vae", "audio_vae", "vocoder", "text_projection"):
            add(key, (MODEL_TYPE, key), overrides.path_for(key) or dit_file, key)
        gemma = overrides.folder_for("text_encoder") or _gemma_folder(folder)
        add("text_encoder", ("gemma", "text_encoder"), gemma,
            "the Gemma 3 folder (gemma-3-12b-it-qat-q4_0-unquantized/: config.json, weights, "
            "tokenizer.json)", layout="transformers")
        if gemma is not None:
            files["tokenizer"] = gemma
    else:
        vae_dir, te_dir = folder / "vae", folder / "text_encoders"
        diffusion = overrides.path_for("vae") or _one(
            vae_dir, registry.get(MODEL_TYPE, "video_vae").files, "video VAE")
        conv = _one(vae_dir, registry.get(MODEL_TYPE, "video_vae_conv").files, "conv VAE")
        if diffusion is not None:      # the release's video VAE: the diffusion decoder
            add("vae", (MODEL_TYPE, "video_vae"), diffusion, "vae/ltx-2.5-video-vae-bf16")
        if conv is not None:
            add("vae" if diffusion is None else "vae_conv", (MODEL_TYPE, "video_vae_conv"),
                conv, "vae/ltx-2.5-video-vae-conv")
        if diffusion is None and conv is None:
            missing.append("vae/ltx-2.5-video-vae-bf16.safetensors (the video VAE, or its conv)")
        audio = _one(vae_dir, registry.get(MODEL_TYPE, "audio_vae").files[-1:], "audio VAE")
        add("audio_vae", (MODEL_TYPE, "audio_vae"), audio,
            "vae/ltx-2.5-audio-vae-bf16.safetensors (the audio VAE and vocoder)")
        if audio is not None:
            add("vocoder", (MODEL_TYPE, "vocoder"), audio, "the vocoder")
        te_spec = registry.get(MODEL_TYPE, "text_encoder", layout="transformers")
        te = overrides.path_for("text_encoder") or _one(te_dir, te_spec.files, "text encoder")
        add("text_encoder", (MODEL_TYPE, "text_encoder"), te,
            "text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16.safetensors (Gemma 4 with its "
            "projection, tokenizer and config)", layout="transformers")
        if te is not None:
            add("text_projection", (MODEL_TYPE, "text_projection"), te, "the projection")
            files["tokenizer"] = te
    if missing:
        raise VidaxError(f"{folder} is not a complete LTX-{version} release folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")
    configs["text_projection"] = _projection_config(configs, metadata, dit_file)
    up = _one(folder, [p for p in up_patterns if "spatial" in p], "spatial upsampler")
    if up is not None:
        add("upsampler", (MODEL_TYPE, "upsampler"), up, "upsampler")
        cfg = configs["upsampler"]
        if cfg.temporal_upsample or not cfg.spatial_upsample or cfg.spatial_scale != 2.0:
            raise VidaxError(f"{up}: the two-stage pipeline upsamples x2 in space (the authors' "
                             f"DistilledPipeline); this upsampler is x{cfg.spatial_scale:g}"
                             f"{' in time' if cfg.temporal_upsample else ''}: keep the x2 file "
                             "in the folder")
    mode = "distilled" if "distilled" in dit_file.name else "dev"
    size = {"2.0": "19b", "2.3": "22b", "2.5": "22b"}[version]
    variant = variant or f"{version}-{size}-{mode}"
    _check_text_encoder(version, metadata, files, dit_file)
    release = Release(folder, "t2av", variant, defaults_for(variant, up is not None), configs,
                      files, specs, version=version, metadata=metadata)
    if distilled_lora is None and not variant.endswith("distilled"):
        distilled_lora = _one(folder, [DISTILLED_LORA], "distilled LoRA")
    return with_distilled_lora(release, distilled_lora)


def _projection_config(configs, metadata: dict, dit_file):
    """The text projection's config: its version and output widths from the DiT's metadata
    (ltx-core's ``_create_feature_extractor``; 2.5's text-encoder file carries no DiT config,
    so the DiT file's), its input from the text encoder it reads: every hidden state of that
    Gemma (ltx-core fixes 3840 x 49, Gemma 3 / 4 12B's)."""
    spec = registry.get(MODEL_TYPE, "text_projection")
    base = spec.config_from_file_metadata(metadata, str(dit_file))
    text = configs["text_encoder"]
    return dataclasses.replace(base, embedding_dim=text.hidden_size,
                               num_layers=text.num_hidden_layers + 1)


def _check_prefix(path: Path, keys: list[str], prefix: str, what: str) -> None:
    """The file (tensor names ``keys``) holds the component under ``prefix``, or an error."""
    if not any(k.startswith(prefix) for k in keys):
        found = sorted({k.split(".")[0] + "." for k in keys})
        raise VidaxError(
            f"{path}: no tensor under {prefix!r} ({what}): the file holds {len(keys)} tensors "
            f"under {', '.join(found[:6]) or 'nothing'}. An LTX-2 release file keeps each "
            "component under its prefix (model.diffusion_model., vae., audio_vae., vocoder., "
            "text_embedding_projection.); is this file complete, or another component's? "
            "Nothing was loaded.")


def _check_text_encoder(version, metadata, files, dit_file) -> None:
    """The DiT's ``gemma_source_checkpoint`` against the encoder (the authors' check)."""
    if version != "2.5":
        return
    from vidax.models.gemma.config import check_gemma_source
    from vidax.text import gemma_assets

    encoder = files["text_encoder"]
    check_gemma_source(metadata, gemma_assets(encoder).config, dit_file=dit_file,
                       encoder_file=encoder)



def make_request(task: str, variant: str, prompt: str, *, negative_prompt=None, image=None,
                 frames=None, size=None, steps=None, guidance_scale=None, seed: int = 0,
                 fps=None, noise=None, stages: int | None = None, audio: bool = True,
                 video_guider: Guider | None = None, audio_guider: Guider | None = None,
                 image_strength: float = 1.0, image_crf: int = 33,
                 video_decoder: str = "default",
                 release: Release | None = None, **refused) -> Request:
    """Validate and resolve a generation's options (None: the release's default). ``stages``
    (default: 2 for distilled when the release has the upsampler, else 1); ``guidance_scale``
    replaces the video CFG scale of the dev guidance; ``video_guider`` / ``audio_guider`` the
    whole guidance."""
    from vidax.pipelines.inputs import refuse

    refuse("LTX-2", **{k: (v, "it is not an LTX-2 option") for k, v in refused.items()})
    if task not in TASKS:
        raise VidaxError(f"LTX-2 task must be one of {TASKS}, got {task!r}")
    d = defaults_for(variant)
    has_up = release is not None and release.has_upsampler
    lora = release is not None and release.distilled_lora is not None
    if stages is None:      # two stages where the release can (the authors' recommendation)
        stages = 2 if has_up and (d.mode == "distilled" or lora) else 1
    if stages not in (1, 2):
        raise VidaxError(f"stages must be 1 or 2, got {stages!r}")
    if stages == 2 and d.mode == "dev" and not lora:
        raise VidaxError("the dev two-stage pipeline (TI2VidTwoStagesPipeline) refines stage 2 "
                         "with the distilled LoRA: put ltx-2*-distilled-lora*.safetensors in the "
                         "release folder or pass --distilled-lora FILE[:STRENGTH] "
                         "(distilled_lora=), or use stages=1 (the one-stage dev pipeline)")
    if stages == 2 and release is not None and not has_up:
        raise VidaxError(f"two stages need the spatial upsampler "
                         f"(ltx-2*-spatial-upscaler-*.safetensors) in {release.folder}")
    if d.mode == "distilled" and steps is not None:
        raise VidaxError(f"the {variant} release samples fixed sigma lists (a distilled "
                         "model); --steps does not apply")
    d = defaults_for(variant, stages == 2)
    v_guider, a_guider = default_guiders(d.version)
    v_guider = video_guider or (v_guider if guidance_scale is None else dataclasses.replace(
        v_guider, cfg_scale=float(guidance_scale)))
    a_guider = audio_guider or a_guider
    request = Request.resolve(
        "i2av" if image is not None else "t2av", d, prompt, negative_prompt=negative_prompt,
        frames=frames, size=size, steps=steps, guidance_scale=guidance_scale, seed=seed,
        fps=fps, size_multiple=2 * SPATIAL if stages == 2 else SPATIAL,
        size_why="the VAE's compression" + (" at half size (stage 1)" if stages == 2 else ""),
        vae_stride=(TEMPORAL, SPATIAL, SPATIAL), latent_channels=128, mode=d.mode,
        stages=stages, video_guider=v_guider if d.mode == "dev" else None,
        audio_guider=a_guider if d.mode == "dev" else None,
        image_strength=float(image_strength), image_crf=int(image_crf), audio=bool(audio),
        video_decoder=video_decoder)
    if video_decoder not in ("default", "diffusion", "conv"):
        raise VidaxError(f"video_decoder must be 'default', 'diffusion' or 'conv', got "
                         f"{video_decoder!r}")
    neg = (d.negative_prompt if negative_prompt is None else negative_prompt) or ""
    request = dataclasses.replace(
        request, prompt=prompt.strip(), negative_prompt=neg.strip(),
        image=None if image is None else load_image(image))
    if noise is not None:
        raise VidaxError("LTX-2 takes explicit draws (draws={'video': [...], 'audio': [...]}) "
                         "from Python, not a --noise file")
    return request


# ----------------------------------------------------------------------------- the image
def conditioning_frame(image: np.ndarray, size, crf: int) -> np.ndarray:
    """``load_image_conditioning``: :func:`~vidax.pipelines.image.h264_round_trip`, a
    bilinear resize that covers ``size`` (``ceil`` of the scaled sides) and a centre crop, then
    ``x / 127.5 - 1``: float32 ``[height, width, 3]``."""
    width, height = size
    image = h264_round_trip(np.asarray(image, np.uint8), crf).astype(np.float32)
    scale = max(height / image.shape[0], width / image.shape[1])
    new_h, new_w = math.ceil(image.shape[0] * scale), math.ceil(image.shape[1] * scale)
    image = resize_bilinear(image, new_h, new_w)
    top, left = (new_h - height) // 2, (new_w - width) // 2
    image = image[top:top + height, left:left + width]
    return (image / np.float32(127.5) - np.float32(1.0)).astype(np.float32)


# ----------------------------------------------------------------------------- tokens
def video_tokens(latents: jax.Array) -> jax.Array:
    """``[B, T, h, w, C]`` -> ``[B, T h w, C]`` in (f, h, w) order (``VideoLatentPatchifier``)."""
    b, t, h, w, c = latents.shape
    return latents.reshape(b, t * h * w, c)


# ----------------------------------------------------------------------------- the pipeline
@nnx.jit
def _encode_text(encoder, projection, dit, ids, mask):
    """Gemma's hidden states -> the projection -> the connectors (one prompt)."""
    v, a = projection(encoder(ids, mask), mask)
    return dit.connect_text(v, a, mask)


_decode_audio = nnx.jit(lambda vae, vocoder, latents: vocoder(vae.decode_normalized(latents)))
_decode_video = nnx.jit(lambda vae, latents: vae.decode_normalized(latents))
_decode_diffusion = nnx.jit(lambda vae, latents, key: vae.decode_normalized(latents, key=key))
_encode_image = nnx.jit(lambda vae, frame: vae.normalize(vae.encode(frame)))
_upsample = nnx.jit(lambda vae, up, video: vae.normalize(up(vae.denormalize(video))))


class LTX2Pipeline(PipelineBase):
    """A loaded LTX-2.x release; options are :func:`make_request`'s. ``pipe(prompt)`` returns
    uint8 frames and keeps the waveform in :attr:`audio` (``[channels, samples]`` float32,
    :attr:`sample_rate`), which :meth:`write` muxes as an AAC track."""

    NAME = "LTX-2"
    make_request = staticmethod(make_request)
    upsampler = None
    vae_conv = None
    audio: np.ndarray | None = None
    sample_rate: int | None = None

    def __init__(self, release: Release, *, distilled_lora=None, **options):
        """``distilled_lora``: the dev two-stage pipeline's stage-2 LoRA, replacing the
        release folder's (:func:`with_distilled_lora`)."""
        super().__init__(with_distilled_lora(release, distilled_lora), **options)

    @classmethod
    def from_release(cls, release: Release, *, loras=None, lora_mode: str = "merge",
                     distilled_lora=None, **options) -> LTX2Pipeline:
        """:meth:`PipelineBase.from_release`; a dev release with the upsampler and the
        distilled LoRA (``distilled_lora``, else the folder's) gets the LoRA on its one DiT,
        live at strength 0 (checked against the DiT before any weight is read): stage 1 and
        a one-stage run are the plain dev model, stage 2 sets the LoRA's strength (the
        authors' stage-2 ``ModelLedger.with_additional_loras``, without a second DiT)."""
        release = with_distilled_lora(release, distilled_lora)
        if release.two_stage_dev:
            zero = _lora.LoraSpec(release.distilled_lora.path, 0.0)
            _lora.for_release(release, [zero], "live")
            if loras and lora_mode == "live":     # one live call for all of the DiT's LoRAs
                loras = [*_lora.as_specs(loras), zero]
        return super().from_release(release, loras=loras, lora_mode=lora_mode, **options)

    def adopt(self, key: str, model) -> None:
        spec = self.release.distilled_lora
        if key == "dit" and self.release.two_stage_dev and spec.name not in (
                _lora.live_strengths(model)):
            applied = _lora.apply(model, MODEL_TYPE, "dit", [_lora.LoraSpec(spec.path, 0.0)],
                                  mode="live")
            for line in applied.lines:
                self._progress.line(f"  dit distilled LoRA (live, stage 2 at strength "
                                    f"{spec.strength:g}) {line}")
        super().adopt(key, model)

    @contextlib.contextmanager
    def _stage_lora(self, request: Request, stage: int):
        """Dev's stage 2 with the distilled LoRA at its strength, back to 0 after."""
        if not (stage and request.mode == "dev"):
            yield
            return
        spec = self.release.distilled_lora
        if spec is None or spec.name not in _lora.live_strengths(self.dit):
            raise VidaxError("the dev two-stage pipeline's stage 2 needs the distilled LoRA "
                             "live on the DiT: load with Pipeline.from_release")
        _lora.set_strengths(self.dit, {spec.name: spec.strength})
        try:
            yield
        finally:
            _lora.set_strengths(self.dit, {spec.name: 0.0})

    def describe(self) -> str:
        return f"LTX-2 {self.variant}"

    def param_dtype(self, component: str):
        if component in ("vocoder", "audio_vae", "upsampler", "video_vae", "video_vae_conv"):
            return base.component_dtype(self.precision, "vae")
        if component == "text_projection":
            return base.component_dtype(self.precision, "text_encoder")
        return super().param_dtype(component)

    def setup(self) -> None:
        """The Gemma tokenizer (a release without the text encoder samples from given
        contexts only: :meth:`encode_text` then refuses)."""
        self.tokenizer = _tokenizer(self.release) if "tokenizer" in self.release.files else None

    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, release=self.release, **options)

    def vae_geometry(self, request: Request) -> memory.VAEGeometry:
        """The conv decoder: one pass of :mod:`~vidax.pipelines.ltx_tiles`' decode (the
        largest ltx-core tile, or the whole clip), its widest stage as LTX-Video's; the 2.5
        diffusion decoder (not tiled): the whole video, its stage-5 SwiGLU (4 x its width per
        4 x 4 pixel patch). Not calibrated on a measured peak."""
        cfg, (width, height) = self.release.configs["vae"], request.size
        if self.release.specs["vae"].component == "video_vae":
            channels = 4 * cfg.decoder.stage_channels[-1] / cfg.decoder.patch_size ** 2
            return memory.VAEGeometry(request.frames, height, width, channels, 1,
                                      request.frames)
        return ltx_tiles.vae_geometry(cfg, request.latent_shape, request.size, request.frames,
                                      2 * cfg.decoder_base_channels / cfg.patch_size ** 2)

    def dit_geometry(self, request: Request) -> memory.DiTGeometry:
        cfg = self.release.configs["dit"]
        tokens = int(np.prod(request.latent_shape[:3]))
        rows = len(_rows(request.video_guider, request.audio_guider))
        return memory.DiTGeometry(rows, tokens, cfg.inner_dim, cfg.num_attention_heads,
                                  4 * cfg.inner_dim, TEXT_LEN)

    # ------------------------------------------------------------------------- text
    def encode_text(self, prompt: str) -> tuple[jax.Array, jax.Array]:
        """One prompt -> (video context ``[1, 1024, Dv]``, audio context ``[1, 1024, Da]``):
        Gemma's hidden states, the projection, the connectors."""
        if self.tokenizer is None:
            raise VidaxError(f"{self.release.folder}: this pipeline was built without its text "
                             "encoder")
        ids, mask = self.tokenizer(prompt)
        return _encode_text(self.text_encoder, self.text_projection, self.dit,
                            self._place(ids), self._place(mask))

    # ------------------------------------------------------------------------- sampling
    def resolve(self, request: Request, draws=None) -> Request:
        if draws is not None:
            request = dataclasses.replace(request, draws=dict(draws))
        request = dataclasses.replace(request,
                                      latent_channels=self.release.configs["dit"].in_channels)
        if request.stages == 2 and self.upsampler is None and not self.release.has_upsampler:
            raise VidaxError(f"two stages need the spatial upsampler in {self.release.folder}")
        if "vae" in self.release.specs:
            self._decoder(request.video_decoder)     # the choice against the folder
        return request

    def _draw(self, request: Request, name: str, stage: int, shape) -> jax.Array:
        given = (request.draws or {}).get(name)
        if given is not None:
            return self._place(np.asarray(given[stage], np.float32).reshape(shape))
        key = jax.random.fold_in(seed_key(request.seed), 2 * stage + (name == "audio"))
        return self._place(jax.random.normal(key, shape, jnp.float32))

    def __call__(self, prompt: str | None = None, *, request: Request | None = None,
                 draws=None, memory_check: bool = True, **options) -> np.ndarray:
        """uint8 frames ``[F, H, W, 3]``; the waveform in :attr:`audio`."""
        request = self.resolve(self._request(prompt, request, options), draws)
        video, audio = self.sample(request=request, memory_check=memory_check)
        frames = self.decode(video, request)
        self.audio, self.sample_rate = self.decode_audio(audio) if request.audio else (None, None)
        return frames

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               draws=None, memory_check: bool = True, **options):
        """The final latents: video ``[T, h, w, C]`` (normalised) and audio ``[C, T, M]``."""
        request = self.resolve(self._request(prompt, request, options), draws)
        if memory_check:
            self.memory_fits(request, weights=False)
        with self._matmul_precision():
            with self._progress.phase("encoding the prompt"):
                contexts = [self.encode_text(request.prompt)]
                if request.mode == "dev" and "uncond" in _rows(request.video_guider,
                                                               request.audio_guider):
                    contexts.append(self.encode_text(request.negative_prompt))
            video, audio = None, None
            for stage, size in enumerate(request.stage_sizes()):
                if stage:
                    with self._progress.phase("upsampling the latents"):
                        video = self.upsample(video)
                with self._stage_lora(request, stage):
                    run = self.prepare_stage(request, stage, size, contexts, video, audio)
                    latents = self.denoise(dataclasses.replace(request, size=size), run)
                video, audio = self._split(latents, run)
        return np.asarray(video[0]), np.asarray(audio[0])

    def _split(self, latents, run: Run):
        tv = run.extra["video_tokens"]
        t, h, w = run.extra["shape"][:3]
        video = latents[:, :tv].reshape(1, t, h, w, -1)
        return video, audio_vae.unpatchify(latents[:, tv:], run.extra["audio_channels"])

    def encode_image(self, image: np.ndarray, size, crf: int) -> jax.Array:
        """The normalised latent ``[1, 1, h, w, C]`` of the first frame at ``size``
        (:func:`conditioning_frame`)."""
        frame = conditioning_frame(image, size, crf)
        return _encode_image(self.vae, self._place(np.asarray(frame, np.float32)[None, None]))

    def prepare_stage(self, request: Request, stage: int, size, contexts, video, audio) -> Run:
        """Stage ``stage``'s initial tokens (noised as ``GaussianNoiser`` with its
        ``noise_scale``), conditioning mask and clean latents, and its sigmas."""
        shape = request.latent_shape_at(size)
        t, h, w, c = shape
        ta, ca = request.audio_frames, self.release.configs["dit"].audio_in_channels
        # the audio latent's channels: the audio VAE's z_channels (8 in every release)
        a_channels = int(getattr(self.release.configs.get("audio_vae"), "z_channels", 8))
        tv = t * h * w
        sigmas = (STAGE_2_SIGMAS if stage else   # dev's stage 2 too (TI2VidTwoStagesPipeline)
                  ltx2_sigmas(request.steps) if request.mode == "dev" else DISTILLED_SIGMAS)
        scale = jnp.float32(1.0 if stage == 0 else sigmas[0])
        v_init = (jnp.zeros((1, tv, c), jnp.float32) if video is None
                  else video_tokens(video).astype(jnp.float32))
        a_init = (jnp.zeros((1, ta, ca), jnp.float32) if audio is None
                  else audio_vae.patchify(audio).astype(jnp.float32))
        v_mask = np.ones((1, tv, 1), np.float32)
        if request.image is not None:
            cond = video_tokens(self.encode_image(request.image, size, request.image_crf)
                                ).astype(jnp.float32)
            v_init = v_init.at[:, :h * w].set(cond[0])
            v_mask[:, :h * w] = 1.0 - request.image_strength
        clean = jnp.concatenate([v_init, a_init], axis=1)
        mask = jnp.asarray(np.concatenate([v_mask, np.ones((1, ta, 1), np.float32)], axis=1))
        noise = jnp.concatenate([self._draw(request, "video", stage, (1, tv, c)),
                                 self._draw(request, "audio", stage, (1, ta, ca))], axis=1)
        latents = noise * (mask * scale) + clean * (1 - mask * scale)
        # stage 2 (dev's too): positive context only, no guidance (simple_denoising_func)
        guiders = (None, None) if stage else (request.video_guider, request.audio_guider)
        rows = _rows(*guiders)
        contexts = contexts if "uncond" in rows else contexts[:1]
        keyframes = None
        if self.release.version == "2.5":   # latent frame 0 holds one pixel frame
            keyframes = jnp.asarray((np.arange(tv) < h * w).astype(np.float32)[None])
        inputs = {
            "contexts": (jnp.concatenate([x[0] for x in contexts]),
                         jnp.concatenate([x[1] for x in contexts])),
            "mask": mask, "clean": clean, "keyframes": keyframes,
            "v_positions": video_positions(t, h, w, request.fps),
            "a_positions": audio_positions(ta),
            "perturb": self._perturbations(request, rows),
        }
        kind = Kind(rows, *guiders, tv)
        return Run(latents, FlowMatchEulerScheduler.from_sigmas(sigmas), inputs,
                   nnx.split(self.dit), f"stage {stage + 1}, {len(sigmas) - 1} steps",
                   {"video_tokens": tv, "shape": shape, "audio_channels": a_channels,
                    "kind": kind})

    def _perturbations(self, request: Request, rows) -> Perturbations | None:
        if "stg" not in rows and "modality" not in rows:
            return None
        n, layers = len(rows), self.release.configs["dit"].num_layers
        skip = {"video_self": [], "audio_self": [], "a2v": [], "v2a": []}
        if "stg" in rows:
            i = rows.index("stg")
            if request.video_guider.stg:
                skip["video_self"].append((i, request.video_guider.stg_blocks))
            if request.audio_guider.stg:
                skip["audio_self"].append((i, request.audio_guider.stg_blocks))
        if "modality" in rows:
            i = rows.index("modality")
            skip["a2v"].append((i, None))
            skip["v2a"].append((i, None))
        p = Perturbations.make(layers, n, **{k: v for k, v in skip.items() if v})
        return Perturbations(*(None if x is None else jnp.asarray(x) for x in p))

    def step_inputs(self, request: Request, run: Run, index: int, t):
        """The DiT runs at sigma (its AdaLN scales by 1000 itself)."""
        return run.model, jnp.float32(run.scheduler.sigmas[index]), {"kind": run.extra["kind"]}

    @classmethod
    def velocity(cls, dit, latents, sigma, inputs, compute_dtype):
        """The guided x0 of both streams (``multi_modal_guider_denoising_func``), blended with
        the clean latents by the mask, as the Euler velocity ``(x - x0) / sigma``."""
        kind = inputs["kind"]
        tv = kind.split
        n = len(kind.rows)
        mask = inputs["mask"]
        x = latents.astype(jnp.float32)
        t = (mask[..., 0] * sigma)                                   # [1, T]
        v_ctx, a_ctx = inputs["contexts"]
        rows = jnp.asarray([1 if r == "uncond" else 0 for r in kind.rows])  # the text batch
        def rep(a):
            return jnp.concatenate([a] * n)
        sig = jnp.full((n,), sigma, jnp.float32)
        video = Modality(rep(x[:, :tv]).astype(compute_dtype), sig, rep(t[:, :tv]),
                         inputs["v_positions"], v_ctx[rows].astype(compute_dtype), None,
                         None if inputs["keyframes"] is None else rep(inputs["keyframes"]))
        audio = Modality(rep(x[:, tv:]).astype(compute_dtype), sig, rep(t[:, tv:]),
                         inputs["a_positions"], a_ctx[rows].astype(compute_dtype), None)
        v_out, a_out = dit(video, audio, perturb=inputs["perturb"])
        v0 = rep(x[:, :tv]) - v_out.astype(jnp.float32) * rep(t[:, :tv])[..., None]
        a0 = rep(x[:, tv:]) - a_out.astype(jnp.float32) * rep(t[:, tv:])[..., None]
        if kind.video is not None:
            v0 = _guide({r: v0[i:i + 1] for i, r in enumerate(kind.rows)}, kind.video)
            a0 = _guide({r: a0[i:i + 1] for i, r in enumerate(kind.rows)}, kind.audio)
        x0 = jnp.concatenate([v0[:1], a0[:1]], axis=1)
        x0 = x0 * mask + inputs["clean"] * (1 - mask)              # post_process_latent
        return (x - x0) / sigma

    # ------------------------------------------------------------------------- stages
    def upsample(self, video: jax.Array) -> jax.Array:
        """``upsample_video``: un-normalise, the upsampler, normalise."""
        return _upsample(self.vae, self.upsampler, video)

    # ------------------------------------------------------------------------- decoding
    def _decoder(self, choice: str) -> str:
        """The key of the video VAE that decodes: ``default`` the release's (2.5: the diffusion
        decoder where the folder has it), ``diffusion`` / ``conv`` that one (refused when
        the folder lacks it)."""
        diffusion = self.release.specs["vae"].component == "video_vae"
        if choice == "default" or choice == ("diffusion" if diffusion else "conv"):
            return "vae"
        if choice == "conv" and "vae_conv" in self.release.specs:
            return "vae_conv"
        raise VidaxError(f"video_decoder={choice!r}: {self.release.folder} has no "
                         + ("vae/ltx-2.5-video-vae-conv*.safetensors" if choice == "conv" else
                            "vae/ltx-2.5-video-vae-bf16.safetensors (LTX-2.5's diffusion "
                            "decoder)"))

    def decode(self, latents, request: Request | None = None) -> np.ndarray:
        """Normalised video latents ``[T, h, w, C]`` -> uint8 frames ``[F, H, W, 3]``: the
        conv decoder, or the 2.5 diffusion decoder from noise drawn from the seed."""
        latents = self.check_finite(np.asarray(latents, np.float32), "the final video latents")
        vae = getattr(self, self._decoder("default" if request is None
                                          else request.video_decoder))
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[0]} latent frames", unit="chunk") as advance:
            if hasattr(vae, "noise_shape"):      # the diffusion decoder samples
                key = jax.random.fold_in(seed_key(0 if request is None else request.seed), 99)
                video = _decode_diffusion(vae, self._place(latents[None]), key)
            else:                                # ltx-core's tiles where they split it
                video = ltx_tiles.decode(vae, self._place(latents[None]),
                                         lambda z: _decode_video(vae, z),
                                         on_chunk=lambda done, total: advance(total=total))
        return self.to_uint8(self.check_finite(np.asarray(video[0]), "the decoded video"))

    def decode_audio(self, latents) -> tuple[np.ndarray, int]:
        """Audio latents ``[C, T, M]`` -> (waveform ``[channels, samples]`` float32, rate):
        the audio VAE's mel spectrogram, then the vocoder (``decode_audio``)."""
        latents = self.check_finite(np.asarray(latents, np.float32), "the final audio latents")
        with self._matmul_precision(), self._progress.phase("decoding the audio"):
            wave = _decode_audio(self.audio_vae, self.vocoder, self._place(latents[None]))
        wave = self.check_finite(np.asarray(wave[0], np.float32), "the decoded audio")
        return wave, int(self.vocoder.sample_rate)

    def write(self, frames, path: str | os.PathLike, *, fps: float | None = None) -> Path:
        """An mp4 with the video and, when the last call made one, its AAC audio track."""
        from vidax.video import write_mp4

        if self.audio is None:
            return write_mp4(path, frames, fps=fps or self.defaults.fps)
        return write_mp4(path, frames, fps=fps or self.defaults.fps, audio=self.audio,
                         sample_rate=self.sample_rate)

    def write_audio(self, path: str | os.PathLike) -> Path:
        """The last call's waveform as a 16-bit WAV file."""
        from vidax.video import write_wav

        if self.audio is None:
            raise VidaxError("no audio to write: the last generation ran video only")
        return write_wav(path, self.audio, self.sample_rate)


def _tokenizer(release: Release):
    """Prompt -> (ids, mask) ``[1, 1024]``, stripped, left-padded: the Gemma 3 folder's
    tokenizer with its own special tokens (Gemma 3's BOS: ltx-core 1.0.0's
    ``LTXVGemmaTokenizer``), or the one inside LTX-2.5's text-encoder file
    (:class:`vidax.text.GemmaTokenizer`, which pads left itself)."""
    from vidax.text import Tokenizer, gemma_tokenizer

    source = release.files["tokenizer"]
    if not Path(source).is_dir():
        tokenizer = gemma_tokenizer(source, seq_len=TEXT_LEN)   # it strips and pads left itself
        right = None
    else:
        tokenizer = right = Tokenizer(source, seq_len=TEXT_LEN, clean=None, special="file")

    def tokenize(prompt: str) -> tuple[np.ndarray, np.ndarray]:
        tokens = tokenizer([prompt.strip()])
        if right is None:
            return np.asarray(tokens.ids), np.asarray(tokens.mask)
        n = int(tokens.mask[0].sum())
        ids, mask = np.full_like(tokens.ids, right.pad_id), np.zeros_like(tokens.mask)
        ids[0, TEXT_LEN - n:], mask[0, TEXT_LEN - n:] = tokens.ids[0, :n], 1
        return ids, mask
    return tokenize


Pipeline = LTX2Pipeline
